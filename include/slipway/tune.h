// slipway/tune.h — hyperparameter search: search spaces over the training parameters, the
// samplers that pick each trial's parameters from the trials before it (random, and TPE with
// Optuna's semantics), and the pruners that stop weak trials early (median, successive halving).
// Studies and the `slipway tune` operation build on these.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "slipway/core.h"

namespace slipway::tune {

// ---------------------------------------------------------------------------------------------
// Search spaces.

enum class ParamKind { kFloat, kInt, kCategorical };

struct ParamRange {
  std::string name;  // a training parameter of the space's family
  ParamKind kind = ParamKind::kFloat;
  double low = 0.0;                  // kFloat, kInt: inclusive
  double high = 0.0;                 // kFloat, kInt: inclusive
  bool log = false;                  // sampled uniformly in log space (low > 0)
  std::vector<std::string> choices;  // kCategorical
  // Sampled only when the parameter `parent` (earlier in the space) took one of `parent_values`;
  // otherwise the trial leaves it at its default. Empty: always sampled.
  std::string parent;
  std::vector<std::string> parent_values;
};

struct SearchSpace {
  std::string family;  // logistic, linear, gbdt or mlp
  std::vector<ParamRange> params;
};

// A search space in YAML:
//
//   family: gbdt                      # optional; must match `family` when both are given
//   params:
//     learning_rate: {type: float, low: 0.01, high: 0.3, log: true}
//     max_depth: {type: int, low: 3, high: 10}
//     grow_policy: {type: categorical, choices: [depthwise, lossguide]}
//     max_leaves: {type: int, low: 16, high: 256, log: true, when: {grow_policy: [lossguide]}}
//
// Checked as `check_search_space` checks; InvalidArgument naming `source` and the parameter.
Result<SearchSpace> parse_search_space(std::string_view yaml, std::string_view source, const std::string& family);
Result<SearchSpace> load_search_space(const std::string& path, const std::string& family);
// The same space as YAML that parse_search_space reads back.
std::string search_space_yaml(const SearchSpace& space);

// Where tuning usually pays for `family` (learning rate, depth, regularization, ...), as ranges
// inside each parameter's declared limits. NotFound for a family with nothing to tune.
Result<SearchSpace> default_search_space(const std::string& family);

// Every parameter is one of the family's (an unknown name is refused with the closest known one
// suggested), appears once, and its range is non-empty, ordered, inside the parameter's declared
// limits (a log range above zero), of the parameter's type (int for integers, categorical for
// choices) with legal choices; a condition names an earlier categorical parameter and its choices.
Status check_search_space(const SearchSpace& space);

// ---------------------------------------------------------------------------------------------
// Trials and samplers.

// A trial's parameters as training takes them (KEY=VALUE text): integers as integers, numbers in
// their shortest exact decimal form, choices as written.
using ParamValues = std::map<std::string, std::string>;

enum class TrialState { kRunning, kComplete, kPruned, kFailed };
enum class Direction { kMinimize, kMaximize };

struct Trial {
  int number = 0;
  ParamValues params;
  TrialState state = TrialState::kRunning;
  double value = 0.0;  // the objective, kComplete only
  // What the trainer reported along the way (the validation metric by boosting round or epoch),
  // step -> value; what pruners judge.
  std::map<int, double> intermediate;
  // Successive halving's record: the value the trial had when it reached each rung.
  std::map<int, double> rung_values;
};

// A narrower space from a finished study, to start the next one from (reuse): each range
// shrinks to what the best `top_fraction` of the completed trials used, widened by a tenth of
// that span (at least a twentieth of the old range, in log space for log ranges) and kept
// inside the old one; integers round outward; choices keep those the best trials took; a
// parameter whose condition no longer holds for any kept choice is dropped; a parameter the
// best trials never set keeps its range. InvalidArgument without a completed trial or with
// top_fraction outside (0, 1].
Result<SearchSpace> narrow_search_space(const SearchSpace& space, const std::vector<Trial>& trials, Direction direction,
                                        double top_fraction);

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The next trial's parameters, from the space and the study's trials so far (any states).
  virtual ParamValues sample(const SearchSpace& space, const std::vector<Trial>& trials, Direction direction) = 0;
};

// Independent uniform draws (log-uniform on log ranges); deterministic for a seed.
std::unique_ptr<Sampler> make_random_sampler(std::uint64_t seed);

// Quasi-random search: point n of the Sobol sequence (Joe and Kuo's direction numbers, as
// scipy.stats.qmc.Sobol draws it) for the study's n-th trial, one dimension per parameter in
// space order, mapped as the random sampler maps a uniform draw. Scrambled by a seeded digital
// shift unless `scramble` is off (then trial 0 is every range's low end). Parameters past the
// 21st are drawn at random.
struct QmcOptions {
  bool scramble = true;
  std::uint64_t seed = 0;
};
std::unique_ptr<Sampler> make_qmc_sampler(const QmcOptions& options);
// The unscrambled Sobol point `index` in [0, 1)^dimensions (dimensions at most 21), for tests.
std::vector<double> sobol_point(std::uint32_t index, int dimensions);

// Grid search: every combination of the parameters' values, each once, in an order the seed
// shuffles (as Optuna's GridSampler takes unvisited points at random); a trial in any state
// counts as a visit. Once every point is visited it repeats one at random: a study stops at
// `points.size()` trials.
std::unique_ptr<Sampler> make_grid_sampler(std::vector<ParamValues> points, std::uint64_t seed);
// The grid of `space`: every integer of an int range, every choice, `float_points` values spread
// evenly over a float range (in log space when log-scaled, both ends included); a conditional
// parameter only under its parent's values. InvalidArgument when it has more than `max_points`.
Result<std::vector<ParamValues>> grid_points(const SearchSpace& space, int float_points,
                                             std::size_t max_points = 100'000);

// The tree-structured Parzen estimator, univariate, as Optuna's TPESampler computes it: random
// until `startup_trials` trials completed or were pruned; then those trials split into the best
// gamma(n) = min(ceil(0.1 n), 25) and the rest, a Parzen mixture of truncated normals (one
// kernel per observation plus a prior over the whole range, bandwidths from neighbour distances
// clipped by the "magic clip") or of smoothed categorical kernels is fitted to each, and of
// `ei_candidates` draws from the good mixture the one with the highest l(x)/g(x) is taken.
// Observation weights are flat for under 25 trials, then the oldest ramp down.
// Pruned trials count too, as Optuna counts them: below every complete trial, ranked by the last
// step they reached (further is better), then by their value there.
struct TpeOptions {
  int startup_trials = 10;
  int ei_candidates = 24;
  double prior_weight = 1.0;
  std::uint64_t seed = 0;
  // Which way pruned trials' intermediate values are better; unset: the study's direction (as
  // Optuna assumes: trials report the objective along the way).
  std::optional<Direction> intermediate_direction;
  // Optuna's multivariate=True: the parameters without a condition are drawn jointly from a
  // mixture of products (each observation's kernels in every dimension together, one bandwidth
  // per dimension, 0.2 x n^(-1/(d+4)) of the range), so what works together is drawn together;
  // conditional parameters are drawn one by one after.
  bool multivariate = false;
};
std::unique_ptr<Sampler> make_tpe_sampler(const TpeOptions& options);

// Optuna's gamma: how many of `completed` trials form the good set.
int tpe_good_count(int completed);

// ---------------------------------------------------------------------------------------------
// Pruners: whether a running trial, at its last reported step, should stop (Optuna's semantics).

class Pruner {
 public:
  virtual ~Pruner() = default;
  // `trial` is running and has just reported its last step; `trials` are the study's others, in
  // any state. May record in `trial` what it needs later (successive halving's rung values).
  virtual bool should_prune(Trial& trial, const std::vector<Trial>& trials, Direction direction) = 0;
};

// Optuna's MedianPruner: once `startup_trials` trials completed, a trial past `warmup_steps`
// stops, at steps `interval_steps` apart, when its best value so far is worse than the median of
// the completed trials' values at the same step (when at least `min_trials` reported one). A
// trial whose values are all NaN stops.
struct MedianPrunerOptions {
  int startup_trials = 5;
  int warmup_steps = 0;
  int interval_steps = 1;
  int min_trials = 1;
};
std::unique_ptr<Pruner> make_median_pruner(const MedianPrunerOptions& options);

// Asynchronous successive halving (Optuna's SuccessiveHalvingPruner): rung k ends at step
// min_resource * reduction_factor^(min_early_stopping_rate + k); a trial reaching it goes on only
// when its value there is in the best 1/reduction_factor of the values every trial had at that
// rung (the only one so far goes on). min_resource 0 is "auto": the longest completed trial's
// last step / 100, at least 1, and no pruning until a trial has completed.
struct AshaOptions {
  int min_resource = 0;
  int reduction_factor = 4;
  int min_early_stopping_rate = 0;
};
std::unique_ptr<Pruner> make_asha_pruner(const AshaOptions& options);

}  // namespace slipway::tune
