#include <algorithm>
#include <cmath>
#include <deque>

#include "slipway/train.h"

namespace slipway::train {
namespace {

double dot(std::span<const double> a, std::span<const double> b) {
  double sum = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += a[i] * b[i];
  return sum;
}

double max_abs(std::span<const double> values) {
  double largest = 0.0;
  for (double value : values) largest = std::max(largest, std::abs(value));
  return largest;
}

struct CorrectionPair {
  std::vector<double> step;             // s = x_{k+1} - x_k
  std::vector<double> gradient_change;  // y = g_{k+1} - g_k
  double rho;                           // 1 / (y . s)
};

}  // namespace

LbfgsResult minimize_lbfgs(const Objective& objective, std::vector<double>& x, const LbfgsOptions& options) {
  const std::size_t size = x.size();
  std::vector<double> gradient(size);
  std::vector<double> direction(size);
  std::vector<double> candidate(size);
  std::vector<double> candidate_gradient(size);
  std::vector<double> alphas;
  std::deque<CorrectionPair> history;

  LbfgsResult result;
  double value = objective(x, gradient);
  double threshold = options.gradient_tolerance * options.gradient_scale;
  for (int iteration = 0; iteration < options.max_iterations; ++iteration) {
    if (options.stop != nullptr && options.stop->load(std::memory_order_relaxed)) break;
    if (max_abs(gradient) <= threshold) {
      result.converged = true;
      break;
    }
    // Two-loop recursion: direction = -H * gradient.
    direction = gradient;
    alphas.assign(history.size(), 0.0);
    for (std::size_t k = history.size(); k-- > 0;) {
      alphas[k] = history[k].rho * dot(history[k].step, direction);
      for (std::size_t i = 0; i < size; ++i) direction[i] -= alphas[k] * history[k].gradient_change[i];
    }
    double initial_scale = 1.0 / std::max(1e-300, std::sqrt(dot(gradient, gradient)));
    if (!history.empty()) {
      const auto& latest = history.back();
      initial_scale = dot(latest.step, latest.gradient_change) / dot(latest.gradient_change, latest.gradient_change);
    }
    for (double& component : direction) component *= initial_scale;
    for (std::size_t k = 0; k < history.size(); ++k) {
      double beta = history[k].rho * dot(history[k].gradient_change, direction);
      for (std::size_t i = 0; i < size; ++i) direction[i] += (alphas[k] - beta) * history[k].step[i];
    }
    for (double& component : direction) component = -component;

    double slope = dot(gradient, direction);
    if (slope >= 0.0) {  // not a descent direction: restart from steepest descent
      history.clear();
      for (std::size_t i = 0; i < size; ++i) direction[i] = -gradient[i] * initial_scale;
      slope = dot(gradient, direction);
    }

    // Backtracking line search with the Armijo condition.
    double step_length = 1.0;
    double candidate_value = value;
    bool accepted = false;
    for (int attempt = 0; attempt < 60; ++attempt) {
      for (std::size_t i = 0; i < size; ++i) candidate[i] = x[i] + step_length * direction[i];
      candidate_value = objective(candidate, candidate_gradient);
      if (std::isfinite(candidate_value) && candidate_value <= value + 1e-4 * step_length * slope) {
        accepted = true;
        break;
      }
      step_length *= 0.5;
    }
    result.iterations = iteration + 1;
    if (!accepted) break;  // no progress possible at machine precision

    CorrectionPair pair{std::vector<double>(size), std::vector<double>(size), 0.0};
    for (std::size_t i = 0; i < size; ++i) {
      pair.step[i] = candidate[i] - x[i];
      pair.gradient_change[i] = candidate_gradient[i] - gradient[i];
    }
    double curvature = dot(pair.step, pair.gradient_change);
    double previous_value = value;
    x.swap(candidate);
    gradient.swap(candidate_gradient);
    value = candidate_value;
    if (curvature > 1e-12 * dot(pair.gradient_change, pair.gradient_change)) {
      pair.rho = 1.0 / curvature;
      history.push_back(std::move(pair));
      if (history.size() > static_cast<std::size_t>(options.history)) history.pop_front();
    }
    if (std::abs(previous_value - value) <= 1e-15 * std::max(1.0, std::abs(value))) {
      result.converged = true;
      break;
    }
  }
  if (max_abs(gradient) <= threshold) result.converged = true;
  result.objective = value;
  return result;
}

}  // namespace slipway::train
