// slipway optimize: candidates built from a baseline, measured on this machine, and the one to ship.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "optimize/candidates.h"
#include "optimize/loopback.h"
#include "slipway/eval.h"
#include "slipway/optimize.h"
#include "slipway/pipeline.h"
#include "slipway/serve.h"

namespace slipway::optimize {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr std::size_t kMaxBodies = 256;

Result<double> parse_number(const std::string& text, const std::string& clause) {
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value) || value < 0) {
    return invalid_argument("SLO clause '" + clause + "': '" + text + "' is not a non-negative number");
  }
  return value;
}

}  // namespace

Result<Slo> parse_slo(const std::string& text) {
  Slo slo;
  slo.text = text;
  for (std::string clause : config_detail::split_list(text)) {
    clause.erase(std::remove(clause.begin(), clause.end(), ' '), clause.end());
    if (clause.empty()) continue;
    std::size_t at = clause.find('@');
    if (at != std::string::npos) {
      if (slo.latency) return invalid_argument("the SLO has two latency clauses; give one");
      SLIPWAY_ASSIGN_OR_RETURN(LatencySlo latency, parse_latency_slo(clause.substr(0, at)));
      std::string rate = clause.substr(at + 1);
      if (!rate.ends_with("rps")) {
        return invalid_argument("SLO clause '" + clause + "': the rate after '@' needs 'rps', e.g. p95<=5ms@2000rps");
      }
      SLIPWAY_ASSIGN_OR_RETURN(slo.rate, parse_number(rate.substr(0, rate.size() - 3), clause));
      if (slo.rate < 1 || slo.rate > 1e6) {
        return invalid_argument("SLO clause '" + clause + "': the rate must be from 1 to 1000000 rps");
      }
      slo.latency = latency;
      continue;
    }
    std::size_t bound = clause.find("<=");
    if (bound == std::string::npos) {
      return invalid_argument("SLO clause '" + clause +
                              "' is not one of: pNN<=Tms@Rrps, cost<=X/1k, <metric>_drop<=X (e.g. "
                              "'p95<=5ms@2000rps,cost<=0.02/1k,auc_drop<=0.005')");
    }
    std::string name = clause.substr(0, bound);
    std::string value = clause.substr(bound + 2);
    if (name == "cost") {
      if (!value.ends_with("/1k")) return invalid_argument("SLO clause '" + clause + "': write the cost as X/1k");
      SLIPWAY_ASSIGN_OR_RETURN(double cost, parse_number(value.substr(0, value.size() - 3), clause));
      slo.cost_per_1k = cost;
    } else if (name.ends_with("_drop") && name.size() > 5) {
      SLIPWAY_ASSIGN_OR_RETURN(double drop, parse_number(value, clause));
      slo.quality_drops.emplace_back(name.substr(0, name.size() - 5), drop);
    } else {
      return invalid_argument("SLO clause '" + clause + "': unknown objective '" + name +
                              "' (latency pNN@rate, cost, or <metric>_drop)");
    }
  }
  return slo;
}

namespace {

// Without an SLO clause on the metric the table watches, a candidate may not trade quality away
// unseen: its drop is held to this share of the baseline's value (AUC 0.80 may fall to 0.792).
constexpr double kDefaultRelativeQualityDrop = 0.01;
// Interleaved closed-loop rounds that decide between the candidates that meet the SLO: one
// measurement each is noise (two identical models once measured 12,000 and 1,965 req/s).
constexpr int kThroughputRounds = 5;

class Optimizer {
 public:
  explicit Optimizer(const OptimizeOptions& options) : options_(options) {}

  Result<OptimizeReport> run();

 private:
  void progress(const std::string& what) {
    if (options_.on_progress) options_.on_progress(step_, total_steps_, what);
    ++step_;
  }
  Status measure_quality(CandidateResult& candidate);
  Status measure_serving(CandidateResult& candidate, const std::string& url);
  Result<LoadTestReport> load(const std::string& url, double rate, std::chrono::milliseconds duration);
  bool latency_holds(const LoadTestReport& report) const;
  void check_slo(CandidateResult& candidate, const eval::Comparison& comparison);
  // Whether the SLO bounds the drop of the metric the table watches; without such a clause the
  // default bound (kDefaultRelativeQualityDrop of the baseline's value) holds instead.
  bool quality_bounded() const {
    return std::any_of(options_.slo.quality_drops.begin(), options_.slo.quality_drops.end(),
                       [this](const auto& clause) { return clause.first == metric_; });
  }
  void recommend(OptimizeReport& report) const;
  // Closed-loop throughput of every candidate that meets the SLO, kThroughputRounds times, in
  // turn (each round starting one later), into throughput_median/low/high.
  void measure_throughput_rounds(OptimizeReport& report, const std::function<std::string(std::size_t)>& url_of,
                                 const std::vector<std::vector<std::string>>& bodies_of,
                                 const std::function<bool()>& over_budget);
  void register_candidate(CandidateResult& candidate);
  // The version and record an earlier run registered for a candidate of this name and settings.
  std::optional<std::pair<std::string, std::map<std::string, std::string>>> finished_record(
      const std::string& name, const std::map<std::string, std::string>& settings) const;

  const OptimizeOptions& options_;
  std::vector<std::string> bodies_;
  std::string metric_;
  int step_ = 0;
  int total_steps_ = 1;
  std::map<std::string, eval::Comparison> comparisons_;
};

Result<LoadTestReport> Optimizer::load(const std::string& url, double rate, std::chrono::milliseconds duration) {
  LoadTestOptions test;
  test.url = url;
  test.bodies = bodies_;
  test.repeat_rate = options_.repeat_rate;
  test.duration = duration;
  test.warmup = std::min(std::chrono::milliseconds(300), duration / 4);
  test.timeout = std::chrono::milliseconds(2000);
  if (rate > 0) {
    test.rate = rate;
  } else {
    test.concurrency = 2 * options_.threads;
  }
  return run_load_test(test);
}

bool Optimizer::latency_holds(const LoadTestReport& report) const {
  const auto& latency = *options_.slo.latency;
  return report.sent > 0 && report.succeeded == report.sent &&
         latency_statistic(report, latency.statistic) <= latency.limit_ms;
}

Status Optimizer::measure_quality(CandidateResult& candidate) {
  eval::ComparisonOptions comparing;
  comparing.tolerance = options_.tolerance.value_or(1e-6);
  comparing.slice_column = options_.slice_column;
  comparing.worst_rows = 0;
  SLIPWAY_ASSIGN_OR_RETURN(eval::Comparison comparison,
                           eval::compare(*options_.baseline, *candidate.bundle, *options_.golden, comparing));
  candidate.quality = comparison.metrics_b.get(metric_);
  candidate.quality_drop = comparison.quality_drop;
  candidate.worst_slice = comparison.worst_slice;
  candidate.worst_slice_drop = comparison.worst_slice.empty() ? kNaN : comparison.worst_slice_drop;
  candidate.rows_beyond_tolerance = comparison.overall.rows_beyond_tolerance;
  candidate.label_flips = comparison.overall.label_flips;
  candidate.max_abs_difference = comparison.overall.max_abs_difference;
  comparisons_[candidate.name] = std::move(comparison);
  return {};
}

Status Optimizer::measure_serving(CandidateResult& candidate, const std::string& url) {
  const Slo& slo = options_.slo;
  SLIPWAY_ASSIGN_OR_RETURN(LoadTestReport at_target, load(url, slo.latency ? slo.rate : 0, options_.measure_time));
  candidate.p50_ms = at_target.p50_ms;
  candidate.p95_ms = at_target.p95_ms;
  candidate.p99_ms = at_target.p99_ms;
  candidate.achieved_rate = at_target.achieved_rate;
  candidate.failed_requests = at_target.sent - at_target.succeeded;
  if (!slo.latency) {
    candidate.max_rate = at_target.achieved_rate;
    return {};
  }
  // The highest rate whose latency SLO holds: doubling from the target while it holds (or
  // halving while it does not), then bisections, within rate_search_steps probes of half a
  // measurement each. Past the last doubling that held, the rate is "at least" that.
  auto probe_time = std::max(std::chrono::milliseconds(100), options_.measure_time / 2);
  int steps = std::max(0, options_.rate_search_steps);
  auto holds = [&](double rate) -> Result<bool> {
    --steps;
    SLIPWAY_ASSIGN_OR_RETURN(LoadTestReport report, load(url, rate, probe_time));
    return latency_holds(report);
  };
  const int bisections = std::min(3, steps / 3);
  double low = 0.0, high = 0.0;
  if (latency_holds(at_target)) {
    low = slo.rate;
    high = 2 * slo.rate;
    while (steps > bisections) {
      SLIPWAY_ASSIGN_OR_RETURN(bool ok, holds(high));
      if (!ok) break;
      low = high;
      high *= 2;
    }
  } else {
    high = slo.rate;
    while (steps > bisections && low == 0.0) {
      double rate = high / 2;
      SLIPWAY_ASSIGN_OR_RETURN(bool ok, holds(rate));
      if (ok) {
        low = rate;
      } else {
        high = rate;
      }
    }
  }
  if (low > 0) {
    while (steps > 0) {
      double middle = (low + high) / 2;
      SLIPWAY_ASSIGN_OR_RETURN(bool ok, holds(middle));
      (ok ? low : high) = middle;
    }
  }
  candidate.max_rate = low;
  return {};
}

void Optimizer::check_slo(CandidateResult& candidate, const eval::Comparison& comparison) {
  const Slo& slo = options_.slo;
  if (slo.latency) {
    if (candidate.failed_requests > 0) {
      candidate.failures.push_back(
          fmt::format("{} requests failed at {} rps", candidate.failed_requests, format_config_number(slo.rate)));
    }
    double value = slo.latency->statistic == "p50"   ? candidate.p50_ms
                   : slo.latency->statistic == "p95" ? candidate.p95_ms
                   : slo.latency->statistic == "p99" ? candidate.p99_ms
                                                     : kNaN;
    if (std::isnan(value) || candidate.max_rate < slo.rate) {
      if (candidate.max_rate < slo.rate) {
        candidate.failures.push_back(fmt::format("{} over {} ms at {} rps (it holds up to {:.0f} rps)",
                                                 slo.latency->statistic, format_config_number(slo.latency->limit_ms),
                                                 format_config_number(slo.rate), candidate.max_rate));
      }
    } else if (value > slo.latency->limit_ms) {
      candidate.failures.push_back(fmt::format("{} {:.3f} ms > {} ms at {} rps", slo.latency->statistic, value,
                                               format_config_number(slo.latency->limit_ms),
                                               format_config_number(slo.rate)));
    }
  }
  if (slo.cost_per_1k && !(candidate.cost_per_1k <= *slo.cost_per_1k)) {
    candidate.failures.push_back(
        fmt::format("cost {:.4g}/1k > {}/1k", candidate.cost_per_1k, format_config_number(*slo.cost_per_1k)));
  }
  for (const auto& [metric, limit] : slo.quality_drops) {
    double baseline = comparison.metrics_a.get(metric);
    double value = comparison.metrics_b.get(metric);
    if (std::isnan(baseline) || std::isnan(value)) {
      candidate.failures.push_back("no " + metric + " for this model's task");
      continue;
    }
    double drop = eval::quality_drop(metric, baseline, value);
    if (drop > limit) {
      candidate.failures.push_back(fmt::format("{} drop {:.4g} > {}", metric, drop, format_config_number(limit)));
    }
    // Quantization errors concentrate in rare segments: the worst slice is held to the same limit.
    if (metric == metric_ && !comparison.worst_slice.empty() && comparison.worst_slice_drop > limit) {
      candidate.failures.push_back(fmt::format("worst slice {}={} drops {} by {:.4g} > {}", comparison.slice_column,
                                               comparison.worst_slice, metric, comparison.worst_slice_drop,
                                               format_config_number(limit)));
    }
  }
  if (!quality_bounded()) {
    double baseline = comparison.metrics_a.get(metric_);
    double drop = eval::quality_drop(metric_, baseline, comparison.metrics_b.get(metric_));
    double limit = kDefaultRelativeQualityDrop * std::abs(baseline);
    if (std::isfinite(drop) && drop > limit) {
      candidate.failures.push_back(
          fmt::format("{} drop {:.4g} > {:.4g}, the default bound (1% of the baseline's; "
                      "set {}_drop in the SLO)",
                      metric_, drop, limit, metric_));
    }
  }
  if (options_.tolerance && candidate.rows_beyond_tolerance > 0) {
    candidate.failures.push_back(fmt::format("{} golden rows differ by more than {}", candidate.rows_beyond_tolerance,
                                             format_config_number(*options_.tolerance)));
  }
  candidate.meets_slo = candidate.failures.empty();
}

// The candidate's optimization record: how it was made and everything measured, so a resumed run
// can show it without measuring again (restore reads it back).
std::map<std::string, std::string> record_of(const CandidateResult& candidate, const OptimizeOptions& options,
                                             const std::string& metric) {
  std::string failures;
  for (const auto& failure : candidate.failures) failures += (failures.empty() ? "" : "; ") + failure;
  std::map<std::string, std::string> record = {
      {"name", candidate.name},
      {"technique", candidate.technique},
      {"baseline", options.baseline_name},
      {"slo", options.slo.text},
      {"context", options.context},
      {"measured.quality_metric", metric},
      {"measured.quality", format_config_number(candidate.quality)},
      {"measured.quality_drop", format_config_number(candidate.quality_drop)},
      {"measured.worst_slice", candidate.worst_slice},
      {"measured.worst_slice_drop", format_config_number(candidate.worst_slice_drop)},
      {"measured.rows_beyond_tolerance", std::to_string(candidate.rows_beyond_tolerance)},
      {"measured.label_flips", std::to_string(candidate.label_flips)},
      {"measured.max_abs_difference", format_config_number(candidate.max_abs_difference)},
      {"measured.p50_ms", format_config_number(candidate.p50_ms)},
      {"measured.p95_ms", format_config_number(candidate.p95_ms)},
      {"measured.p99_ms", format_config_number(candidate.p99_ms)},
      {"measured.achieved_rate", format_config_number(candidate.achieved_rate)},
      {"measured.failed_requests", std::to_string(candidate.failed_requests)},
      {"measured.max_rate", format_config_number(candidate.max_rate)},
      {"measured.bundle_bytes", std::to_string(candidate.bundle_bytes)},
      {"measured.loaded_bytes", std::to_string(candidate.loaded_bytes)},
      {"measured.request_bytes", std::to_string(candidate.request_bytes)},
      {"measured.meets_slo", candidate.meets_slo ? "true" : "false"},
      {"measured.failures", failures},
  };
  if (options.price_per_hour > 0) record["measured.cost_per_1k"] = format_config_number(candidate.cost_per_1k);
  for (const auto& [key, value] : candidate.settings) record["setting." + key] = value;
  return record;
}

void restore(CandidateResult& candidate, const std::map<std::string, std::string>& record) {
  auto text = [&](const std::string& key) {
    auto found = record.find("measured." + key);
    return found == record.end() ? std::string() : found->second;
  };
  auto number = [&](const std::string& key) {
    std::string value = text(key);
    return value.empty() ? kNaN : std::strtod(value.c_str(), nullptr);
  };
  auto count = [&](const std::string& key) {
    return static_cast<std::size_t>(std::strtoull(text(key).c_str(), nullptr, 10));
  };
  candidate.quality = number("quality");
  candidate.quality_drop = number("quality_drop");
  candidate.worst_slice = text("worst_slice");
  candidate.worst_slice_drop = number("worst_slice_drop");
  candidate.rows_beyond_tolerance = count("rows_beyond_tolerance");
  candidate.label_flips = count("label_flips");
  candidate.max_abs_difference = number("max_abs_difference");
  candidate.p50_ms = number("p50_ms");
  candidate.p95_ms = number("p95_ms");
  candidate.p99_ms = number("p99_ms");
  candidate.achieved_rate = number("achieved_rate");
  candidate.failed_requests = count("failed_requests");
  candidate.max_rate = number("max_rate");
  candidate.cost_per_1k = number("cost_per_1k");
  candidate.bundle_bytes = count("bundle_bytes");
  candidate.loaded_bytes = count("loaded_bytes");
  candidate.request_bytes = count("request_bytes");
  candidate.meets_slo = text("meets_slo") == "true";
  candidate.failures.clear();
  std::string failures = text("failures");
  for (std::size_t start = 0; start < failures.size();) {
    std::size_t end = failures.find("; ", start);
    candidate.failures.push_back(failures.substr(start, end == std::string::npos ? std::string::npos : end - start));
    start = end == std::string::npos ? failures.size() : end + 2;
  }
}

// A candidate that can replace the baseline where it serves: it accepts the baseline's requests
// (the inputs it does not use are accepted and left unused) and labels at the baseline's decision
// threshold.
std::shared_ptr<const model::Bundle> drop_in_for(const model::Bundle& baseline,
                                                 std::shared_ptr<const model::Bundle> candidate) {
  model::Manifest manifest = candidate->manifest();
  manifest.decision_threshold = baseline.manifest().decision_threshold;
  manifest.threshold_rule = baseline.manifest().threshold_rule;
  manifest.unused_inputs.clear();
  auto add_unless_used = [&](const std::string& name) {
    if (!candidate->preprocessor().feature_index(name) &&
        std::find(manifest.unused_inputs.begin(), manifest.unused_inputs.end(), name) == manifest.unused_inputs.end()) {
      manifest.unused_inputs.push_back(name);
    }
  };
  for (const auto& feature : baseline.preprocessor().features()) add_unless_used(feature.name);
  for (const auto& name : baseline.manifest().unused_inputs) add_unless_used(name);
  return candidate->with_manifest(std::move(manifest));
}

// Registers a measured candidate at once (not at the end), so a run that stops keeps what it
// measured; serving configurations are the baseline's bytes and are applied with
// `slipway serving-config` instead. The version stands on its own: its metrics are its own on the
// golden rows and its prediction profile its own predictions, so `slipway monitor` holds it to
// what it does, not to what the baseline did.
void Optimizer::register_candidate(CandidateResult& candidate) {
  if (candidate.technique == "serving") return;
  model::Manifest manifest = candidate.bundle->manifest();
  manifest.optimization = record_of(candidate, options_, metric_);
  manifest.optimization["metrics_rows"] = "golden";
  manifest.metrics.clear();
  for (const auto& [name, value] : comparisons_.at(candidate.name).metrics_b.values) {
    manifest.metrics["test_" + name] = value;
  }
  const data::Table& rows = options_.train != nullptr ? *options_.train : *options_.golden;
  auto profile = pipeline::training_profile(*candidate.bundle, rows);
  // None rather than the baseline's when it cannot be made: monitor then says it has none.
  manifest.profile = profile.ok() ? std::move(profile).value() : model::DataProfile{};
  candidate.bundle = candidate.bundle->with_manifest(std::move(manifest));
  if (!options_.on_candidate) return;
  auto version = options_.on_candidate(candidate);
  if (version.ok()) {
    candidate.version = *version;
  } else {
    candidate.error = "measured, but not registered: " + version.status().message();
  }
}

std::optional<std::pair<std::string, std::map<std::string, std::string>>> Optimizer::finished_record(
    const std::string& name, const std::map<std::string, std::string>& settings) const {
  if (!options_.find_finished) return std::nullopt;
  auto finished = options_.find_finished(name);
  if (!finished) return std::nullopt;
  for (const auto& [key, value] : settings) {
    auto recorded = finished->second.find("setting." + key);
    if (recorded == finished->second.end() || recorded->second != value) return std::nullopt;
  }
  return finished;
}

void Optimizer::measure_throughput_rounds(OptimizeReport& report, const std::function<std::string(std::size_t)>& url_of,
                                          const std::vector<std::vector<std::string>>& bodies_of,
                                          const std::function<bool()>& over_budget) {
  std::vector<std::size_t> contenders;
  for (std::size_t index = 0; index < report.candidates.size(); ++index) {
    const CandidateResult& candidate = report.candidates[index];
    if (!candidate.error.empty() || !candidate.meets_slo) continue;
    // One an earlier run measured is not served here: the recommendation then compares the
    // single measurements of all, and rounds for some would decide nothing.
    if (bodies_of[index].empty()) return;
    contenders.push_back(index);
  }
  if (contenders.size() < 2) return;  // nothing to decide between
  auto duration = std::max(std::chrono::milliseconds(100), options_.measure_time / 4);
  std::vector<std::vector<double>> samples(report.candidates.size());
  for (int round = 0; round < kThroughputRounds; ++round) {
    progress(fmt::format("throughput round {} of {}: {} candidates in turn", round + 1, kThroughputRounds,
                         contenders.size()));
    for (std::size_t position = 0; position < contenders.size() && !over_budget(); ++position) {
      std::size_t index = contenders[(position + static_cast<std::size_t>(round)) % contenders.size()];
      bodies_ = bodies_of[index];
      auto measured = load(url_of(index), 0, duration);
      if (measured.ok() && measured->sent > 0 && measured->succeeded == measured->sent) {
        samples[index].push_back(measured->achieved_rate);
      }
    }
  }
  for (std::size_t index : contenders) {
    std::vector<double>& rounds = samples[index];
    if (rounds.empty()) continue;
    std::sort(rounds.begin(), rounds.end());
    CandidateResult& candidate = report.candidates[index];
    std::size_t middle = rounds.size() / 2;
    candidate.throughput_median = rounds.size() % 2 == 1 ? rounds[middle] : 0.5 * (rounds[middle - 1] + rounds[middle]);
    candidate.throughput_low = rounds.front();
    candidate.throughput_high = rounds.back();
    candidate.throughput_rounds = static_cast<int>(rounds.size());
  }
}

void Optimizer::recommend(OptimizeReport& report) const {
  bool priced = options_.price_per_hour > 0;
  std::vector<std::size_t> contenders;
  for (std::size_t index = 0; index < report.candidates.size(); ++index) {
    const CandidateResult& candidate = report.candidates[index];
    if (candidate.error.empty() && candidate.meets_slo) contenders.push_back(index);
  }
  auto& candidates = report.candidates;
  bool rounds_for_all = std::all_of(contenders.begin(), contenders.end(),
                                    [&](std::size_t index) { return candidates[index].throughput_rounds > 0; });
  const bool decided_by_rounds = rounds_for_all && contenders.size() > 1;
  if (decided_by_rounds) {
    // The leader has the highest median; every contender whose range overlaps the leader's is a
    // tie with it, and of those the fewest changes win (then the higher median).
    std::size_t leader = *std::max_element(contenders.begin(), contenders.end(), [&](std::size_t a, std::size_t b) {
      return candidates[a].throughput_median < candidates[b].throughput_median;
    });
    std::size_t chosen = leader;
    for (std::size_t index : contenders) {
      const CandidateResult& candidate = candidates[index];
      if (candidate.throughput_high < candidates[leader].throughput_low) continue;  // clearly slower
      const CandidateResult& best = candidates[chosen];
      if (candidate.changes < best.changes ||
          (candidate.changes == best.changes && candidate.throughput_median > best.throughput_median)) {
        chosen = index;
      }
    }
    report.recommended = static_cast<int>(chosen);
  } else {
    // One measurement each (an earlier run's records among them): a rate within 2% is a tie.
    for (std::size_t index : contenders) {
      if (report.recommended < 0) {
        report.recommended = static_cast<int>(index);
        continue;
      }
      const CandidateResult& candidate = candidates[index];
      const CandidateResult& best = candidates[static_cast<std::size_t>(report.recommended)];
      bool clearly_better = candidate.max_rate > best.max_rate * 1.02;
      bool tie = !clearly_better && candidate.max_rate >= best.max_rate * 0.98;
      if (clearly_better || (tie && candidate.changes < best.changes)) report.recommended = static_cast<int>(index);
    }
  }
  // Said with the recommendation, so a table without a quality clause says what held quality.
  std::string bound_note;
  if (!quality_bounded() && !report.candidates.empty()) {
    bound_note = fmt::format(
        "; the SLO has no {0}_drop clause, so each candidate's {0} was held to the default bound: a drop of at most "
        "1% of the baseline's ({1:.4g})",
        metric_, kDefaultRelativeQualityDrop * std::abs(report.candidates.front().quality));
  }
  if (report.recommended < 0) {
    report.reason = "no candidate meets every SLO clause; the table says which clause each misses" + bound_note;
    return;
  }
  const CandidateResult& chosen = report.candidates[static_cast<std::size_t>(report.recommended)];
  if (decided_by_rounds) {
    report.reason = fmt::format(
        "{} meets every SLO clause with the highest closed-loop throughput, or within the range of the highest and "
        "with fewer changes: {:.0f} req/s, the median of {} interleaved rounds ({:.0f} to {:.0f}); {:.0f} rps within "
        "the latency SLO{}{}",
        chosen.name, chosen.throughput_median, chosen.throughput_rounds, chosen.throughput_low, chosen.throughput_high,
        chosen.max_rate, priced ? fmt::format(", {:.4g}/1k", chosen.cost_per_1k) : "",
        chosen.changes == 0 ? "; no candidate does clearly better than the baseline" : "");
  } else {
    report.reason = fmt::format("{} meets every SLO clause at the {} ({:.0f} rps sustained{}){}", chosen.name,
                                priced ? "lowest cost" : "highest sustainable rate", chosen.max_rate,
                                priced ? fmt::format(", {:.4g}/1k", chosen.cost_per_1k) : "",
                                chosen.changes == 0 ? "; no candidate does better than the baseline" : "");
  }
  if (chosen.technique == "serving") {
    std::string flags;
    for (const auto& [key, value] : chosen.settings) {
      std::string flag = key;
      std::replace(flag.begin(), flag.end(), '_', '-');
      flags += " --" + flag + " " + value;
    }
    std::string model = options_.baseline_name.substr(0, options_.baseline_name.find('@'));
    report.reason += "; apply it with: slipway serving-config " + model + flags +
                     (model.find('/') != std::string::npos || model.ends_with(".slip")
                          ? " (to the name the bundle is registered under)"
                          : "");
  }
  report.reason += bound_note;
}

Result<OptimizeReport> Optimizer::run() {
  const auto started = std::chrono::steady_clock::now();
  auto cancelled = [&] { return options_.cancel != nullptr && options_.cancel->load(); };
  auto over_budget = [&] {
    return cancelled() || (options_.budget && std::chrono::steady_clock::now() - started > *options_.budget);
  };
  auto budget_spent = [&](std::string_view what) {
    if (cancelled()) return fmt::format("not {}: the run was cancelled", what);
    return fmt::format("not {}: the --budget of {} s ran out; raise it or narrow --candidates", what,
                       format_config_number(static_cast<double>(options_.budget->count()) / 1000.0));
  };
  const model::Bundle& baseline = *options_.baseline;
  const data::Table& golden = *options_.golden;
  if (golden.find(baseline.manifest().target) == nullptr) {
    return invalid_argument("the golden rows need the target column '" + baseline.manifest().target +
                            "' to measure quality");
  }
  if (!options_.slice_column.empty()) SLIPWAY_RETURN_IF_ERROR(golden.column_index(options_.slice_column).status());
  if (options_.slo.cost_per_1k && !(options_.price_per_hour > 0)) {
    return invalid_argument("a cost SLO needs --price-per-hour");
  }
  if (options_.threads < 1) return invalid_argument("threads must be >= 1");
  std::vector<std::string> techniques;
  for (const auto& technique : options_.techniques) {
    SLIPWAY_RETURN_IF_ERROR(check_technique(technique));
    if (std::find(techniques.begin(), techniques.end(), technique) == techniques.end()) techniques.push_back(technique);
  }
  metric_ = std::string(eval::watched_metric(baseline.task()));
  OptimizeReport report;
  report.baseline_name = options_.baseline_name;
  report.quality_metric = metric_;
  report.slo_text = options_.slo.text;
  report.price_per_hour = options_.price_per_hour;
  report.repeat_rate = options_.repeat_rate;

  // The candidates: the baseline first, then each technique's.
  std::vector<BuiltCandidate> built = {{"baseline", "baseline", {}, options_.baseline, "", 0}};
  std::optional<double> budget;
  for (const auto& [metric, limit] : options_.slo.quality_drops) {
    if (metric == metric_) budget = limit;
  }
  for (const auto& technique : techniques) {
    if (over_budget()) {
      built.push_back({technique, technique, {}, nullptr, budget_spent("built"), 1});
      continue;
    }
    bool mlp = dynamic_cast<const model::MlpModel*>(&baseline.model()) != nullptr;
    if (technique == "quantize" && mlp) {
      for (auto& candidate : mlp_precision_candidates(baseline, technique, options_.calibration)) {
        built.push_back(std::move(candidate));
      }
    } else if (technique == "quantize") {
      built.push_back(quantize_candidate(baseline, false));
      // bfloat16 leaves only where the layout itself applies (one row says why when not).
      if (built.back().error.empty()) built.push_back(quantize_candidate(baseline, true));
    }
    if (technique == "int8" && mlp) {
      for (auto& candidate : mlp_precision_candidates(baseline, technique, options_.calibration)) {
        built.push_back(std::move(candidate));
      }
    } else if (technique == "int8") {
      built.push_back(int8_candidate(baseline));
    }
    if (technique == "sparse") {
      for (auto& candidate : sparse_candidates(baseline)) built.push_back(std::move(candidate));
    }
    if (technique == "serving") {
      for (auto& candidate : serving_candidates(options_.baseline, options_.repeat_rate)) {
        built.push_back(std::move(candidate));
      }
    }
    // Retraining takes the longest: a candidate an earlier run measured is not trained again.
    AlreadyMeasured already_measured = [this](const BuiltCandidate& candidate) {
      return finished_record(candidate.name, candidate.settings).has_value();
    };
    if (technique == "features") {
      for (auto& candidate : feature_candidates(baseline, options_.train, already_measured)) {
        built.push_back(std::move(candidate));
      }
    }
    if (technique == "distill") {
      DistillSettings settings{options_.distill_alpha, options_.distill_temperature};
      for (auto& candidate :
           distill_candidates(baseline, options_.train, options_.unlabeled, settings, already_measured)) {
        built.push_back(std::move(candidate));
      }
    }
    if (technique == "prune" && mlp) {
      for (auto& candidate : unit_prune_candidates(baseline, options_.train, already_measured)) {
        built.push_back(std::move(candidate));
      }
    } else if (technique == "prune") {
      std::vector<PrunePoint> curve;
      for (auto& candidate : prune_candidates(baseline, golden, budget, curve)) built.push_back(std::move(candidate));
      for (auto& candidate : depth_candidates(baseline, options_.train, already_measured)) {
        built.push_back(std::move(candidate));
      }
      for (const auto& point : curve) report.prune_curve.emplace_back(point.rounds, point.quality);
    }
  }
  total_steps_ = 2 + 2 * static_cast<int>(built.size()) + kThroughputRounds;
  progress("starting a server on loopback");
  if (golden.row_count() == 0) return invalid_argument("the golden rows are empty");
  SLIPWAY_ASSIGN_OR_RETURN(auto scratch, ScratchWorkspace::create());
  for (std::size_t index = 0; index < built.size(); ++index) {
    if (built[index].bundle == nullptr) continue;
    std::string name = "candidate-" + std::to_string(index);
    SLIPWAY_RETURN_IF_ERROR(scratch->add(name, *built[index].bundle));
    if (!built[index].serving_config.empty()) {
      SLIPWAY_RETURN_IF_ERROR(scratch->registry().serving_configs().set(name, built[index].serving_config, true));
    }
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto server, LoopbackServer::start(scratch->registry(), options_.threads));
  auto url_of = [&server](std::size_t index) {
    return server->url("/v2/models/candidate-" + std::to_string(index) + "/infer");
  };
  std::vector<std::vector<std::string>> bodies_of(built.size());  // what each was measured with

  for (std::size_t index = 0; index < built.size(); ++index) {
    BuiltCandidate& source = built[index];
    CandidateResult candidate;
    candidate.name = source.name;
    candidate.technique = source.technique;
    candidate.settings = source.settings;
    candidate.bundle = source.bundle == nullptr ? nullptr : drop_in_for(*options_.baseline, source.bundle);
    candidate.error = source.error;
    candidate.changes = source.changes;
    if (index > 0 && candidate.error.empty() && over_budget()) candidate.error = budget_spent("measured");
    if (index > 0 && candidate.error.empty()) {
      // Measured and registered by an earlier run of the same comparison: its record stands.
      auto finished = finished_record(candidate.name, candidate.settings);
      if (!finished && source.resumed) candidate.error = "an earlier run's record of it is gone; run without --resume";
      if (finished) {
        progress(candidate.name + ": measured earlier (" + finished->first + ")");
        progress(candidate.name + ": measured earlier");
        restore(candidate, finished->second);
        candidate.version = finished->first;
        report.candidates.push_back(std::move(candidate));
        continue;
      }
    }
    progress(candidate.name + ": quality on the golden rows");
    Status measured = candidate.error.empty() ? measure_quality(candidate) : Status();
    progress(candidate.name + ": latency and the highest rate through the server");
    if (measured.ok() && candidate.error.empty()) {
      // Requests carry the candidate's inputs only: fewer inputs make smaller requests.
      std::vector<std::string> skip;
      for (const auto& column : golden.columns()) {
        if (!candidate.bundle->preprocessor().feature_index(column.name)) skip.push_back(column.name);
      }
      bodies_ = serve::v2_requests_from_table(golden, 1, skip, kMaxBodies);
      std::vector<std::size_t> sizes;
      sizes.reserve(bodies_.size());
      for (const auto& body : bodies_) sizes.push_back(body.size());
      std::nth_element(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(sizes.size() / 2), sizes.end());
      candidate.request_bytes = sizes[sizes.size() / 2];
      bodies_of[index] = bodies_;
      measured = measure_serving(candidate, url_of(index));
    }
    if (!measured.ok()) candidate.error = measured.message();
    if (candidate.error.empty()) {
      // Memory as a server holds it once loaded from the bytes, the same way for every candidate
      // (one built here owns arrays that a loaded one would view).
      std::vector<std::byte> bytes = candidate.bundle->serialize();
      candidate.bundle_bytes = bytes.size();
      auto reloaded = model::Bundle::parse(bytes);
      candidate.loaded_bytes = reloaded.ok() ? (*reloaded)->memory_bytes() : candidate.bundle->memory_bytes();
      candidate.cost_per_1k = options_.price_per_hour > 0 && candidate.max_rate > 0
                                  ? options_.price_per_hour / (3600.0 * candidate.max_rate) * 1000.0
                                  : (options_.price_per_hour > 0 ? std::numeric_limits<double>::infinity() : kNaN);
      check_slo(candidate, comparisons_.at(candidate.name));
      // Only what could ship is registered: a candidate that misses a clause would become the
      // newest version, what a bare NAME resolves to, and serve nothing it should.
      if (index > 0 && candidate.meets_slo) register_candidate(candidate);
    }
    report.candidates.push_back(std::move(candidate));
  }
  measure_throughput_rounds(report, url_of, bodies_of, over_budget);
  recommend(report);

  progress("done");
  return report;
}

}  // namespace

Status check_technique(const std::string& technique) {
  static constexpr std::string_view kKnown[] = {"quantize", "prune",  "features", "distill",
                                                "int8",     "sparse", "serving"};
  if (std::find(std::begin(kKnown), std::end(kKnown), technique) == std::end(kKnown)) {
    return invalid_argument("unknown candidate technique '" + technique.substr(0, 64) +
                            "' (this build has: quantize, prune, features, distill, int8, sparse, serving)");
  }
  return {};
}

Result<OptimizeReport> optimize_model(const OptimizeOptions& options) {
  if (options.baseline == nullptr || options.golden == nullptr) {
    return invalid_argument("optimize needs a model and golden rows");
  }
  return Optimizer(options).run();
}

}  // namespace slipway::optimize
