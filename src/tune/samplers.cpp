// Samplers: random, and the univariate tree-structured Parzen estimator as Optuna 3 computes it
// (optuna/samplers/_tpe: sampler.py, parzen_estimator.py; defaults in docs/reference lifecycle.md).
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "slipway/tune.h"

namespace slipway::tune {
namespace {

constexpr double kNegativeInfinity = -std::numeric_limits<double>::infinity();
// Optuna's SIGMA0_MAGNITUDE: a multivariate kernel's bandwidth at one observation, as a share of
// the range.
constexpr double kJointBandwidth = 0.2;

// A numeric parameter in the space it is sampled in: log-scaled ranges in log space; integers
// widened by half a step on each side so that each whole number gets a full unit of mass.
struct Bounds {
  double low = 0.0;
  double high = 0.0;
};

Bounds internal_bounds(const ParamRange& param) {
  double low = param.low;
  double high = param.high;
  if (param.kind == ParamKind::kInt) {
    low -= 0.5;
    high += 0.5;
  }
  if (param.log) return {std::log(low), std::log(high)};
  return {low, high};
}

double to_internal(const ParamRange& param, double value) { return param.log ? std::log(value) : value; }

// An internal point back to a value of the parameter, inside its range.
double from_internal(const ParamRange& param, double internal) {
  double value = param.log ? std::exp(internal) : internal;
  if (param.kind == ParamKind::kInt) value = std::round(value);
  return std::clamp(value, param.low, param.high);
}

std::string format_value(const ParamRange& param, double value) {
  if (param.kind == ParamKind::kInt) return std::to_string(static_cast<long long>(value));
  return format_config_number(value);
}

// Whether `param` is sampled given the values chosen so far for this trial.
bool is_active(const ParamRange& param, const ParamValues& chosen) {
  if (param.parent.empty()) return true;
  auto parent = chosen.find(param.parent);
  return parent != chosen.end() &&
         std::find(param.parent_values.begin(), param.parent_values.end(), parent->second) != param.parent_values.end();
}

std::string sample_uniform(const ParamRange& param, std::mt19937_64& random) {
  if (param.kind == ParamKind::kCategorical) {
    std::uniform_int_distribution<std::size_t> pick(0, param.choices.size() - 1);
    return param.choices[pick(random)];
  }
  if (param.kind == ParamKind::kInt && !param.log) {
    std::uniform_int_distribution<long long> pick(static_cast<long long>(param.low),
                                                  static_cast<long long>(param.high));
    return std::to_string(pick(random));
  }
  Bounds bounds = internal_bounds(param);
  std::uniform_real_distribution<double> pick(bounds.low, bounds.high);
  return format_value(param, from_internal(param, pick(random)));
}

// Every parameter active under the values drawn before it, drawn at random.
ParamValues sample_space_uniform(const SearchSpace& space, std::mt19937_64& random) {
  ParamValues chosen;
  for (const auto& param : space.params) {
    if (is_active(param, chosen)) chosen[param.name] = sample_uniform(param, random);
  }
  return chosen;
}

class RandomSampler : public Sampler {
 public:
  explicit RandomSampler(std::uint64_t seed) : random_(seed) {}

  ParamValues sample(const SearchSpace& space, const std::vector<Trial>& /*trials*/, Direction /*direction*/) override {
    return sample_space_uniform(space, random_);
  }

 private:
  std::mt19937_64 random_;
};

class GridSampler : public Sampler {
 public:
  GridSampler(std::vector<ParamValues> points, std::uint64_t seed) : points_(std::move(points)), random_(seed) {
    std::shuffle(points_.begin(), points_.end(), random_);
  }

  ParamValues sample(const SearchSpace& /*space*/, const std::vector<Trial>& trials, Direction /*direction*/) override {
    if (points_.empty()) return {};
    for (const auto& point : points_) {
      bool visited =
          std::any_of(trials.begin(), trials.end(), [&](const Trial& trial) { return trial.params == point; });
      if (!visited) return point;
    }
    std::uniform_int_distribution<std::size_t> pick(0, points_.size() - 1);
    return points_[pick(random_)];
  }

 private:
  std::vector<ParamValues> points_;
  std::mt19937_64 random_;
};

// Sobol direction numbers for the first 21 dimensions (Joe and Kuo, new-joe-kuo-6.21201, as
// scipy's table holds them): the primitive polynomial's bits and the initial numbers m_1..m_s.
struct SobolDimension {
  std::uint32_t polynomial;
  std::vector<std::uint32_t> initial;
};
const std::vector<SobolDimension>& sobol_dimensions() {
  static const std::vector<SobolDimension> kDimensions = {
      {1, {}},
      {3, {1}},
      {7, {1, 3}},
      {11, {1, 3, 1}},
      {13, {1, 1, 1}},
      {19, {1, 1, 3, 3}},
      {25, {1, 3, 5, 13}},
      {37, {1, 1, 5, 5, 17}},
      {41, {1, 1, 5, 5, 5}},
      {47, {1, 1, 7, 11, 19}},
      {55, {1, 1, 5, 1, 1}},
      {59, {1, 1, 1, 3, 11}},
      {61, {1, 3, 5, 5, 31}},
      {67, {1, 3, 3, 9, 7, 49}},
      {91, {1, 1, 1, 15, 21, 21}},
      {97, {1, 3, 1, 13, 27, 49}},
      {103, {1, 1, 1, 15, 7, 5}},
      {109, {1, 3, 1, 15, 13, 25}},
      {115, {1, 1, 5, 5, 19, 61}},
      {131, {1, 3, 7, 11, 23, 15, 103}},
      {137, {1, 3, 7, 13, 13, 15, 69}},
  };
  return kDimensions;
}

constexpr int kSobolBits = 32;

// Direction integers v[d][j] (Bratley and Fox's recurrence), each scaled to 32 bits.
const std::vector<std::array<std::uint32_t, kSobolBits>>& sobol_directions() {
  static const std::vector<std::array<std::uint32_t, kSobolBits>> kDirections = [] {
    const auto& dimensions = sobol_dimensions();
    std::vector<std::array<std::uint32_t, kSobolBits>> v(dimensions.size());
    for (std::size_t d = 0; d < dimensions.size(); ++d) {
      std::uint32_t polynomial = dimensions[d].polynomial;
      int degree = std::bit_width(polynomial) - 1;
      for (int j = 0; j < kSobolBits; ++j) {
        if (d == 0) {
          v[d][j] = 1;
        } else if (j < degree) {
          v[d][j] = dimensions[d].initial[static_cast<std::size_t>(j)];
        } else {
          std::uint32_t next = v[d][j - degree];
          std::uint32_t power = 1;
          for (int k = 0; k < degree; ++k) {
            power <<= 1;
            if ((polynomial >> (degree - 1 - k)) & 1U) next ^= power * v[d][j - k - 1];
          }
          v[d][j] = next;
        }
      }
      for (int j = 0; j < kSobolBits; ++j) v[d][j] <<= (kSobolBits - 1 - j);
    }
    return v;
  }();
  return kDirections;
}

// The Sobol point `index` as 32-bit integers, by its Gray code: the XOR of the directions of the
// bits set in index ^ (index >> 1).
std::vector<std::uint32_t> sobol_integers(std::uint32_t index, std::size_t dimensions) {
  const auto& v = sobol_directions();
  std::vector<std::uint32_t> point(dimensions, 0);
  std::uint32_t gray = index ^ (index >> 1);
  for (int bit = 0; bit < kSobolBits; ++bit) {
    if (((gray >> bit) & 1U) == 0) continue;
    for (std::size_t d = 0; d < dimensions; ++d) point[d] ^= v[d][static_cast<std::size_t>(bit)];
  }
  return point;
}

// A uniform draw u in [0, 1) as a value of the parameter (the random sampler's mapping).
std::string value_at(const ParamRange& param, double u) {
  if (param.kind == ParamKind::kCategorical) {
    auto index =
        std::min(static_cast<std::size_t>(u * static_cast<double>(param.choices.size())), param.choices.size() - 1);
    return param.choices[index];
  }
  Bounds bounds = internal_bounds(param);
  return format_value(param, from_internal(param, bounds.low + u * (bounds.high - bounds.low)));
}

class QmcSampler : public Sampler {
 public:
  explicit QmcSampler(const QmcOptions& options) : random_(options.seed) {
    if (!options.scramble) return;
    std::uniform_int_distribution<std::uint32_t> shift;
    for (std::size_t d = 0; d < sobol_dimensions().size(); ++d) shifts_.push_back(shift(random_));
  }

  ParamValues sample(const SearchSpace& space, const std::vector<Trial>& trials, Direction /*direction*/) override {
    std::size_t dimensions = std::min(space.params.size(), sobol_dimensions().size());
    auto point = sobol_integers(static_cast<std::uint32_t>(trials.size()), dimensions);
    ParamValues chosen;
    for (std::size_t d = 0; d < space.params.size(); ++d) {
      const auto& param = space.params[d];
      if (!is_active(param, chosen)) continue;
      if (d >= dimensions) {
        chosen[param.name] = sample_uniform(param, random_);
        continue;
      }
      std::uint32_t bits = point[d] ^ (shifts_.empty() ? 0U : shifts_[d]);
      chosen[param.name] = value_at(param, std::ldexp(static_cast<double>(bits), -kSobolBits));
    }
    return chosen;
  }

 private:
  std::mt19937_64 random_;
  std::vector<std::uint32_t> shifts_;
};

// The values a parameter takes on the grid, as training takes them.
std::vector<std::string> grid_values(const ParamRange& param, int float_points) {
  std::vector<std::string> values;
  if (param.kind == ParamKind::kCategorical) return param.choices;
  if (param.kind == ParamKind::kInt) {
    values.reserve(static_cast<std::size_t>(param.high - param.low + 1));
    for (auto value = static_cast<long long>(param.low); value <= static_cast<long long>(param.high); ++value) {
      values.push_back(std::to_string(value));
    }
    return values;
  }
  double low = to_internal(param, param.low);
  double high = to_internal(param, param.high);
  values.reserve(static_cast<std::size_t>(float_points));
  for (int i = 0; i < float_points; ++i) {
    double value = param.low;
    if (float_points == 1) {
      value = from_internal(param, 0.5 * (low + high));
    } else if (i == float_points - 1) {
      value = param.high;
    } else if (i > 0) {
      value = from_internal(param, low + (high - low) * static_cast<double>(i) / (float_points - 1));
    }
    // Twelve significant digits: 0.1, not exp(log(0.1))'s 0.10000000000000002.
    if (i > 0 && i < float_points - 1)
      value = std::clamp(std::stod(fmt::format("{:.12g}", value)), param.low, param.high);
    std::string text = format_value(param, value);
    if (values.empty() || values.back() != text) values.push_back(text);
  }
  return values;
}

// Optuna's default_weights: flat for under 25 observations; beyond, the oldest ramp from 1/n up.
std::vector<double> observation_weights(std::size_t count) {
  std::vector<double> weights(count, 1.0);
  if (count < 25) return weights;
  std::size_t ramp = count - 25;
  for (std::size_t i = 0; i < ramp; ++i) {
    // numpy.linspace(1 / n, 1, num=n - 25)
    double start = 1.0 / static_cast<double>(count);
    weights[i] = ramp == 1 ? start : start + (1.0 - start) * static_cast<double>(i) / static_cast<double>(ramp - 1);
  }
  return weights;
}

double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

// A mixture of normals truncated to [low, high] (numeric), or of categorical kernels.
struct ParzenEstimator {
  std::vector<double> component_weights;  // normalized
  // Numeric.
  std::vector<double> mus, sigmas;
  Bounds bounds;
  bool discrete = false;  // integers: the mass of [x - 0.5, x + 0.5] in the original space
  const ParamRange* param = nullptr;
  // Categorical: per component, a distribution over the choices.
  std::vector<std::vector<double>> choice_weights;

  static std::vector<double> normalized(std::vector<double> weights) {
    double total = std::accumulate(weights.begin(), weights.end(), 0.0);
    for (auto& weight : weights) weight /= total;
    return weights;
  }

  // `joint_dimensions` > 0: one dimension of a multivariate estimator over that many parameters,
  // whose kernels share one bandwidth per dimension (Optuna's multivariate rule: 0.2 x n^(-1/(d+4))
  // of the range) instead of the neighbours' distances.
  static ParzenEstimator numeric(const ParamRange& param, const std::vector<double>& observations, double prior_weight,
                                 int joint_dimensions = 0) {
    ParzenEstimator estimator;
    estimator.param = &param;
    estimator.bounds = internal_bounds(param);
    estimator.discrete = param.kind == ParamKind::kInt;
    const double low = estimator.bounds.low;
    const double high = estimator.bounds.high;
    const double prior_mu = 0.5 * (low + high);
    std::vector<double> with_prior = observations;
    with_prior.push_back(prior_mu);
    // Bandwidths from the neighbours' distances, the range's ends as sentinels; the outermost
    // kernels look inward only (consider_endpoints=False); then the magic clip.
    std::vector<std::size_t> order(with_prior.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return with_prior[a] < with_prior[b]; });
    std::vector<double> sorted{low};
    for (auto index : order) sorted.push_back(with_prior[index]);
    sorted.push_back(high);
    std::vector<double> sorted_sigmas(with_prior.size());
    for (std::size_t i = 1; i + 1 < sorted.size(); ++i) {
      sorted_sigmas[i - 1] = std::max(sorted[i] - sorted[i - 1], sorted[i + 1] - sorted[i]);
    }
    if (sorted.size() >= 4) {
      sorted_sigmas.front() = sorted[2] - sorted[1];
      sorted_sigmas.back() = sorted[sorted.size() - 2] - sorted[sorted.size() - 3];
    }
    const double max_sigma = high - low;
    const double min_sigma = (high - low) / std::min(100.0, 1.0 + static_cast<double>(with_prior.size()));
    std::vector<double> sigmas(with_prior.size());
    for (std::size_t i = 0; i < order.size(); ++i)
      sigmas[order[i]] = std::clamp(sorted_sigmas[i], min_sigma, max_sigma);
    if (joint_dimensions > 0) {
      double shared =
          kJointBandwidth *
          std::pow(std::max<double>(static_cast<double>(observations.size()), 1.0), -1.0 / (joint_dimensions + 4)) *
          (high - low);
      std::fill(sigmas.begin(), sigmas.end(), std::clamp(shared, min_sigma, max_sigma));
    }
    estimator.mus = observations;
    estimator.sigmas.assign(sigmas.begin(), sigmas.begin() + static_cast<std::ptrdiff_t>(observations.size()));
    estimator.mus.push_back(prior_mu);
    estimator.sigmas.push_back(max_sigma);  // the prior spans the whole range
    auto weights = observation_weights(observations.size());
    weights.push_back(prior_weight);
    estimator.component_weights = normalized(std::move(weights));
    return estimator;
  }

  static ParzenEstimator categorical(const ParamRange& param, const std::vector<std::size_t>& observations,
                                     double prior_weight) {
    ParzenEstimator estimator;
    estimator.param = &param;
    const std::size_t kernels = observations.size() + 1;
    const double fill = prior_weight / static_cast<double>(kernels);
    estimator.choice_weights.assign(kernels, std::vector<double>(param.choices.size(), fill));
    for (std::size_t i = 0; i < observations.size(); ++i) estimator.choice_weights[i][observations[i]] += 1.0;
    for (auto& row : estimator.choice_weights) row = normalized(std::move(row));
    auto weights = observation_weights(observations.size());
    weights.push_back(prior_weight);
    estimator.component_weights = normalized(std::move(weights));
    return estimator;
  }

  // One draw, as an internal value (numeric) or a choice index (categorical).
  double draw(std::mt19937_64& random) const { return draw_from(draw_component(random), random); }

  std::size_t draw_component(std::mt19937_64& random) const {
    std::discrete_distribution<std::size_t> component(component_weights.begin(), component_weights.end());
    return component(random);
  }

  // A draw from kernel `k` alone.
  double draw_from(std::size_t k, std::mt19937_64& random) const {
    if (!choice_weights.empty()) {
      std::discrete_distribution<std::size_t> choice(choice_weights[k].begin(), choice_weights[k].end());
      return static_cast<double>(choice(random));
    }
    std::normal_distribution<double> normal(mus[k], sigmas[k]);
    for (int attempt = 0; attempt < 1000; ++attempt) {
      double x = normal(random);
      if (x >= bounds.low && x <= bounds.high) return x;
    }
    return std::clamp(mus[k], bounds.low, bounds.high);  // unreachable in practice: sigma <= the range
  }

  // Kernel `k`'s density (numeric) or probability (integers, categorical) at `x`.
  double kernel_density(std::size_t k, double x) const {
    if (!choice_weights.empty()) return choice_weights[k][static_cast<std::size_t>(x)];
    double mass = normal_cdf((bounds.high - mus[k]) / sigmas[k]) - normal_cdf((bounds.low - mus[k]) / sigmas[k]);
    if (mass <= 0) return 0.0;
    if (discrete) {
      double value = from_internal(*param, x);
      double lower = to_internal(*param, value - 0.5);
      double upper = to_internal(*param, value + 0.5);
      return (normal_cdf((upper - mus[k]) / sigmas[k]) - normal_cdf((lower - mus[k]) / sigmas[k])) / mass;
    }
    double z = (x - mus[k]) / sigmas[k];
    return std::exp(-0.5 * z * z) / (sigmas[k] * std::sqrt(2.0 * std::numbers::pi)) / mass;
  }

  // log of the mixture's density (numeric) or probability (integers, categorical) at `x`.
  double log_density(double x) const {
    double total = 0.0;
    for (std::size_t k = 0; k < component_weights.size(); ++k) total += component_weights[k] * kernel_density(k, x);
    return total > 0 ? std::log(total) : kNegativeInfinity;
  }
};

// A mixture of products (Optuna's multivariate TPE): kernel k of every dimension belongs to the
// same observation, so a draw takes one observation's kernel in all dimensions at once and the
// density multiplies across dimensions inside each kernel.
struct JointEstimator {
  std::vector<ParzenEstimator> dimensions;  // one per parameter, the same kernel weights in each

  std::vector<double> draw(std::mt19937_64& random) const {
    std::size_t k = dimensions.front().draw_component(random);
    std::vector<double> point;
    point.reserve(dimensions.size());
    for (const auto& dimension : dimensions) point.push_back(dimension.draw_from(k, random));
    return point;
  }

  double log_density(const std::vector<double>& point) const {
    const auto& weights = dimensions.front().component_weights;
    std::vector<double> terms;
    terms.reserve(weights.size());
    double largest = kNegativeInfinity;
    for (std::size_t k = 0; k < weights.size(); ++k) {
      double term = std::log(weights[k]);
      for (std::size_t d = 0; d < dimensions.size() && term > kNegativeInfinity; ++d) {
        double density = dimensions[d].kernel_density(k, point[d]);
        term += density > 0 ? std::log(density) : kNegativeInfinity;
      }
      terms.push_back(term);
      largest = std::max(largest, term);
    }
    if (largest == kNegativeInfinity) return kNegativeInfinity;
    double sum = 0.0;
    for (double term : terms) sum += std::exp(term - largest);
    return largest + std::log(sum);
  }
};

constexpr double kInfinity = std::numeric_limits<double>::infinity();

struct Observation {
  int number = 0;
  // Ranked by (group, loss): complete trials (group -inf) by their value, then pruned trials by
  // how far they got (group -last step) and their last intermediate value, then pruned trials
  // that reported nothing (group +inf). Lower is better.
  double group = 0.0;
  double loss = 0.0;
  const ParamValues* params = nullptr;
};

class TpeSampler : public Sampler {
 public:
  explicit TpeSampler(const TpeOptions& options) : options_(options), random_(options.seed) {}

  ParamValues sample(const SearchSpace& space, const std::vector<Trial>& trials, Direction direction) override {
    const Direction steps_direction = options_.intermediate_direction.value_or(direction);
    std::vector<Observation> observed;
    for (const auto& trial : trials) {
      if (trial.state == TrialState::kComplete && std::isfinite(trial.value)) {
        observed.push_back(
            {trial.number, -kInfinity, direction == Direction::kMaximize ? -trial.value : trial.value, &trial.params});
      } else if (trial.state == TrialState::kPruned) {
        // Optuna's rule for pruned trials: they count, below every complete one.
        if (trial.intermediate.empty()) {
          observed.push_back({trial.number, kInfinity, 0.0, &trial.params});
          continue;
        }
        auto [step, value] = *trial.intermediate.rbegin();
        double loss = std::isnan(value) ? kInfinity : steps_direction == Direction::kMaximize ? -value : value;
        observed.push_back({trial.number, -static_cast<double>(step), loss, &trial.params});
      }
    }
    if (static_cast<int>(observed.size()) < options_.startup_trials) return sample_space_uniform(space, random_);
    // The best gamma(n) (ties to the earlier trial), then each group in trial order.
    std::stable_sort(observed.begin(), observed.end(), [](const Observation& a, const Observation& b) {
      if (a.group != b.group) return a.group < b.group;
      return a.loss != b.loss ? a.loss < b.loss : a.number < b.number;
    });
    auto good_count = static_cast<std::size_t>(tpe_good_count(static_cast<int>(observed.size())));
    std::vector<Observation> good(observed.begin(), observed.begin() + static_cast<std::ptrdiff_t>(good_count));
    std::vector<Observation> bad(observed.begin() + static_cast<std::ptrdiff_t>(good_count), observed.end());
    auto by_number = [](const Observation& a, const Observation& b) { return a.number < b.number; };
    std::sort(good.begin(), good.end(), by_number);
    std::sort(bad.begin(), bad.end(), by_number);
    ParamValues chosen;
    if (options_.multivariate) chosen = sample_jointly(space, good, bad);
    for (const auto& param : space.params) {
      if (chosen.count(param.name) != 0 || !is_active(param, chosen)) continue;
      chosen[param.name] = sample_param(param, good, bad);
    }
    return chosen;
  }

 private:
  // Multivariate TPE over the parameters every trial has (those without a condition), from the
  // observations that hold a value inside the space for each; the conditional parameters are
  // then drawn one by one, as Optuna's multivariate sampler falls back to independent sampling
  // outside the intersection search space.
  ParamValues sample_jointly(const SearchSpace& space, const std::vector<Observation>& good,
                             const std::vector<Observation>& bad) {
    std::vector<const ParamRange*> joint;
    for (const auto& param : space.params) {
      if (param.parent.empty()) joint.push_back(&param);
    }
    if (joint.empty()) return {};
    JointEstimator below = joint_estimator(joint, good);
    JointEstimator above = joint_estimator(joint, bad);
    std::vector<double> best_point;
    double best_score = kNegativeInfinity;
    for (int i = 0; i < options_.ei_candidates; ++i) {
      std::vector<double> point = below.draw(random_);
      double score = below.log_density(point) - above.log_density(point);
      if (best_point.empty() || score > best_score) {
        best_score = score;
        best_point = std::move(point);
      }
    }
    ParamValues chosen;
    for (std::size_t d = 0; d < joint.size(); ++d) chosen[joint[d]->name] = value_of(*joint[d], best_point[d]);
    return chosen;
  }

  JointEstimator joint_estimator(const std::vector<const ParamRange*>& joint,
                                 const std::vector<Observation>& group) const {
    // Only observations with every joint parameter inside the space take part.
    std::vector<std::vector<double>> columns(joint.size());
    for (const auto& observation : group) {
      std::vector<double> point;
      for (const ParamRange* param : joint) {
        auto value = internal_value(*param, *observation.params);
        if (!value) break;
        point.push_back(*value);
      }
      if (point.size() != joint.size()) continue;
      for (std::size_t d = 0; d < joint.size(); ++d) columns[d].push_back(point[d]);
    }
    JointEstimator estimator;
    estimator.dimensions.reserve(joint.size());
    const auto dimensions = static_cast<int>(joint.size());
    for (std::size_t d = 0; d < joint.size(); ++d) {
      const ParamRange& param = *joint[d];
      if (param.kind == ParamKind::kCategorical) {
        estimator.dimensions.push_back(
            ParzenEstimator::categorical(param, choice_indices(columns[d]), options_.prior_weight));
      } else {
        estimator.dimensions.push_back(ParzenEstimator::numeric(param, columns[d], options_.prior_weight, dimensions));
      }
    }
    return estimator;
  }

  // The observation's value of `param` as the estimators hold it (internal, or a choice index);
  // none when it has none inside the space (a trial from another space, in a reused study).
  static std::optional<double> internal_value(const ParamRange& param, const ParamValues& params) {
    auto value = params.find(param.name);
    if (value == params.end()) return std::nullopt;
    if (param.kind == ParamKind::kCategorical) {
      auto choice = std::find(param.choices.begin(), param.choices.end(), value->second);
      if (choice == param.choices.end()) return std::nullopt;
      return static_cast<double>(choice - param.choices.begin());
    }
    auto number = parse_finite_number(value->second);
    if (!number || *number < param.low || *number > param.high || (param.log && *number <= 0)) return std::nullopt;
    return to_internal(param, *number);
  }

  static std::vector<std::size_t> choice_indices(const std::vector<double>& values) {
    std::vector<std::size_t> indices;
    indices.reserve(values.size());
    for (double value : values) indices.push_back(static_cast<std::size_t>(value));
    return indices;
  }

  static std::string value_of(const ParamRange& param, double internal) {
    if (param.kind == ParamKind::kCategorical) return param.choices[static_cast<std::size_t>(internal)];
    return format_value(param, from_internal(param, internal));
  }

  std::string sample_param(const ParamRange& param, const std::vector<Observation>& good,
                           const std::vector<Observation>& bad) {
    ParzenEstimator below = estimator(param, good);
    ParzenEstimator above = estimator(param, bad);
    double best_x = below.draw(random_);
    double best_score = kNegativeInfinity;
    for (int i = 0; i < options_.ei_candidates; ++i) {
      double x = i == 0 ? best_x : below.draw(random_);
      double score = below.log_density(x) - above.log_density(x);
      if (score > best_score) {
        best_score = score;
        best_x = x;
      }
    }
    return value_of(param, best_x);
  }

  ParzenEstimator estimator(const ParamRange& param, const std::vector<Observation>& group) const {
    std::vector<double> values;
    for (const auto& observation : group) {
      if (auto value = internal_value(param, *observation.params)) values.push_back(*value);
    }
    if (param.kind == ParamKind::kCategorical) {
      return ParzenEstimator::categorical(param, choice_indices(values), options_.prior_weight);
    }
    return ParzenEstimator::numeric(param, values, options_.prior_weight);
  }

  TpeOptions options_;
  std::mt19937_64 random_;
};

}  // namespace

int tpe_good_count(int completed) {
  return std::min(static_cast<int>(std::ceil(0.1 * static_cast<double>(completed))), 25);
}

std::unique_ptr<Sampler> make_random_sampler(std::uint64_t seed) { return std::make_unique<RandomSampler>(seed); }

std::unique_ptr<Sampler> make_tpe_sampler(const TpeOptions& options) { return std::make_unique<TpeSampler>(options); }

std::unique_ptr<Sampler> make_qmc_sampler(const QmcOptions& options) { return std::make_unique<QmcSampler>(options); }

std::vector<double> sobol_point(std::uint32_t index, int dimensions) {
  auto count = static_cast<std::size_t>(std::clamp(dimensions, 0, static_cast<int>(sobol_dimensions().size())));
  std::vector<double> point;
  point.reserve(count);
  for (auto bits : sobol_integers(index, count)) point.push_back(std::ldexp(static_cast<double>(bits), -kSobolBits));
  return point;
}

std::unique_ptr<Sampler> make_grid_sampler(std::vector<ParamValues> points, std::uint64_t seed) {
  return std::make_unique<GridSampler>(std::move(points), seed);
}

Result<std::vector<ParamValues>> grid_points(const SearchSpace& space, int float_points, std::size_t max_points) {
  if (float_points < 1) return invalid_argument("a grid needs at least one point per float range");
  // Each parameter in turn multiplies the points where it is active; the others pass through.
  std::vector<ParamValues> points{ParamValues{}};
  for (const auto& param : space.params) {
    if (param.kind == ParamKind::kInt && param.high - param.low + 1 > static_cast<double>(max_points)) {
      return invalid_argument(fmt::format("the grid has more than {} points: '{}' alone takes {} values", max_points,
                                          param.name, format_config_number(param.high - param.low + 1)));
    }
    auto values = grid_values(param, float_points);
    std::vector<ParamValues> next;
    next.reserve(std::min(max_points, points.size() * values.size()));
    for (auto& point : points) {
      if (!is_active(param, point)) {
        next.push_back(std::move(point));
        continue;
      }
      for (const auto& value : values) {
        if (next.size() >= max_points) {
          return invalid_argument(
              fmt::format("the grid has more than {} points; narrow the ranges or use another "
                          "sampler (tpe, random)",
                          max_points));
        }
        ParamValues extended = point;
        extended[param.name] = value;
        next.push_back(std::move(extended));
      }
    }
    points = std::move(next);
  }
  return points;
}

}  // namespace slipway::tune
