// The candidate table on a small GBDT: candidates built, measured through the real server,
// recorded and recommended; the SLO's grammar and the refusals.
#include <gtest/gtest.h>
#include <algorithm>

#include "slipway/optimize.h"
#include "slipway/train.h"
#include "support/fixtures.h"

namespace slipway::optimize {
namespace {

using namespace std::chrono_literals;

TEST(Slo, ParsesEachKindOfClause) {
  auto slo = parse_slo("p95<=5ms@2000rps, cost<=0.02/1k,auc_drop<=0.005");
  ASSERT_TRUE(slo.ok()) << slo.status().message();
  ASSERT_TRUE(slo->latency.has_value());
  EXPECT_EQ(slo->latency->statistic, "p95");
  EXPECT_DOUBLE_EQ(slo->latency->limit_ms, 5.0);
  EXPECT_DOUBLE_EQ(slo->rate, 2000.0);
  EXPECT_DOUBLE_EQ(*slo->cost_per_1k, 0.02);
  ASSERT_EQ(slo->quality_drops.size(), 1u);
  EXPECT_EQ(slo->quality_drops[0].first, "auc");
  EXPECT_DOUBLE_EQ(slo->quality_drops[0].second, 0.005);
  EXPECT_TRUE(parse_slo("rmse_drop<=0.1").ok());
  for (const char* bad : {"p95<=5ms", "p95<=5ms@fast", "p95<=5ms@0rps", "cost<=0.02", "speed<=3", "auc_drop<=-1",
                          "auc_drop<=nan", "p95<=5ms@10rps,p99<=9ms@10rps", "p95=5ms@10rps"}) {
    EXPECT_FALSE(parse_slo(bad).ok()) << bad;
  }
}

class OptimizeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    golden_set = new data::Table(testing::lending_rows(2000, 500));
    train_set = new data::Table(testing::lending_rows(0, 2000));
    gbdt = train::fit(*train_set,
                      train::TrainRequest{
                          .target = "Class", .model_family = "gbdt", .params = {{"rounds", "40"}, {"max_depth", "4"}}})
               ->bundle;
    linear = train::fit(*train_set, train::TrainRequest{.target = "Class"})->bundle;
  }
  static void TearDownTestSuite() {
    delete golden_set;
    delete train_set;
  }

  static OptimizeOptions quick(std::shared_ptr<const model::Bundle> baseline) {
    OptimizeOptions options;
    options.baseline = std::move(baseline);
    options.baseline_name = "lending@1";
    options.golden = golden_set;
    options.train = train_set;
    options.slice_column = "term";
    options.slo = *parse_slo("p95<=50ms@100rps,auc_drop<=0.02");
    options.measure_time = 300ms;
    options.rate_search_steps = 2;
    return options;
  }

  // A GBDT of Chicago ridership (30 rounds) to distill: 2,500 rows to train on, 500 golden ones,
  // and the table's options for it under an SLO with no quality clause.
  struct RegressionTeacher {
    data::Table train, golden;
    std::shared_ptr<const model::Bundle> teacher;
    void train_teacher() {
      auto chicago = data::read_csv(testing::data_path("chicago_ridership.csv"));
      ASSERT_TRUE(chicago.ok()) << chicago.status().message();
      std::vector<std::uint32_t> train_rows, golden_rows;
      for (std::uint32_t row = 0; row < 3000; ++row) (row < 2500 ? train_rows : golden_rows).push_back(row);
      train = chicago->take_rows(train_rows);
      golden = chicago->take_rows(golden_rows);
      auto fitted = train::fit(train, train::TrainRequest{.target = "ridership",
                                                          .model_family = "gbdt",
                                                          .excluded_columns = {"date"},
                                                          .params = {{"rounds", "30"}}});
      ASSERT_TRUE(fitted.ok()) << fitted.status().message();
      teacher = fitted->bundle;
    }
    OptimizeOptions options() {
      OptimizeOptions options = quick(teacher);
      options.golden = &golden;
      options.train = &train;
      options.slice_column = "";
      options.slo = *parse_slo("p95<=50ms@100rps");
      options.techniques = {"distill"};
      return options;
    }
  };

  static inline data::Table* golden_set = nullptr;
  static inline data::Table* train_set = nullptr;
  static inline std::shared_ptr<const model::Bundle> gbdt, linear;
};

TEST_F(OptimizeTest, BuildsMeasuresRecordsAndRecommends) {
  OptimizeOptions options = quick(gbdt);
  options.price_per_hour = 0.35;
  options.repeat_rate = 0.5;  // adds the response cache to the serving sweep
  std::vector<std::string> registered;
  options.on_candidate = [&](const CandidateResult& candidate) -> Result<std::string> {
    EXPECT_EQ(candidate.bundle->manifest().optimization.at("technique"), candidate.technique);
    EXPECT_EQ(candidate.bundle->manifest().optimization.at("baseline"), "lending@1");
    // It stands on its own: its metrics and its prediction profile are its own (the baseline,
    // trained here without one, has no profile to pass on).
    EXPECT_EQ(candidate.bundle->manifest().optimization.at("metrics_rows"), "golden");
    EXPECT_EQ(candidate.bundle->manifest().metrics.at("test_auc"), candidate.quality);
    EXPECT_FALSE(candidate.bundle->manifest().profile.empty());
    EXPECT_EQ(candidate.bundle->manifest().profile.inputs.size(), candidate.bundle->preprocessor().features().size());
    registered.push_back(candidate.name);
    return "lending@" + std::to_string(registered.size() + 1);
  };
  auto report = optimize_model(options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_GE(report->candidates.size(), 3u);
  EXPECT_EQ(report->quality_metric, "auc");
  const CandidateResult& baseline = report->candidates[0];
  EXPECT_EQ(baseline.name, "baseline");
  EXPECT_TRUE(baseline.version.empty());  // the baseline is not registered again
  for (const auto& candidate : report->candidates) {
    SCOPED_TRACE(candidate.name);
    if (candidate.technique == "int8" || candidate.technique == "sparse") {  // linear models only
      EXPECT_NE(candidate.error.find("not applicable"), std::string::npos);
      continue;
    }
    ASSERT_EQ(candidate.error, "");
    EXPECT_GT(candidate.p50_ms, 0.0);
    EXPECT_GE(candidate.p99_ms, candidate.p50_ms);
    EXPECT_EQ(candidate.failed_requests, 0u);
    EXPECT_GE(candidate.max_rate, 100.0);  // 100 rps within 50 ms is easy
    EXPECT_NEAR(candidate.cost_per_1k, 0.35 / (3600 * candidate.max_rate) * 1000, 1e-12);
    EXPECT_GT(candidate.bundle_bytes, 0u);
    EXPECT_GT(candidate.loaded_bytes, 0u);
  }
  // The quantized layout is exact: no difference, no drop.
  auto quantized = std::find_if(report->candidates.begin(), report->candidates.end(),
                                [](const auto& candidate) { return candidate.technique == "quantize"; });
  ASSERT_NE(quantized, report->candidates.end());
  EXPECT_EQ(quantized->rows_beyond_tolerance, 0u);
  EXPECT_EQ(quantized->quality_drop, 0.0);
  EXPECT_EQ(quantized->version, "lending@2");
  // bfloat16 leaves: less memory, a small measured difference.
  auto bf16 = std::find_if(report->candidates.begin(), report->candidates.end(),
                           [](const auto& candidate) { return candidate.name == "quantize:bf16-leaves"; });
  ASSERT_NE(bf16, report->candidates.end());
  EXPECT_LT(bf16->loaded_bytes, quantized->loaded_bytes);
  EXPECT_GT(bf16->max_abs_difference, 0.0);
  EXPECT_LT(bf16->max_abs_difference, 0.01);
  EXPECT_EQ(bf16->bundle->manifest().optimization.at("setting.leaves"), "bf16");
  // Refits with a depth cap: shallower trees, retrained on the training rows.
  std::size_t capped = 0;
  for (const auto& candidate : report->candidates) {
    if (!candidate.name.starts_with("prune:depth-")) continue;
    ++capped;
    EXPECT_LT(std::stoi(candidate.settings.at("max_depth")), std::stoi(candidate.settings.at("was")));
    EXPECT_EQ(candidate.bundle->manifest().params.at("max_depth"), candidate.settings.at("max_depth"));
  }
  EXPECT_GE(capped, 1u);
  // Serving configurations are measured, not registered: they are the baseline's bytes.
  std::size_t serving = 0;
  for (const auto& candidate : report->candidates) {
    if (candidate.technique != "serving") continue;
    ++serving;
    EXPECT_TRUE(candidate.version.empty());
    EXPECT_EQ(candidate.quality_drop, 0.0);
    EXPECT_EQ(candidate.settings.count(candidate.name == "serving:cache" ? "cache" : "max_batch_size"), 1u);
  }
  EXPECT_EQ(serving, 4u);  // three batching configurations and the cache
  // Feature reduction: a control retrained with every input, then fewer inputs, smaller requests.
  std::vector<const CandidateResult*> features;
  for (const auto& candidate : report->candidates) {
    if (candidate.technique == "features") features.push_back(&candidate);
  }
  ASSERT_EQ(features.size(), 3u);
  EXPECT_EQ(features[0]->name, "features:all");
  EXPECT_EQ(features[0]->request_bytes, baseline.request_bytes);
  EXPECT_LT(features[1]->request_bytes, features[0]->request_bytes);
  EXPECT_LT(features[2]->request_bytes, features[1]->request_bytes);
  EXPECT_EQ(features[2]->bundle->preprocessor().features().size(), 22u - 11u);
  // ... and accepts the baseline's requests: the inputs it dropped are accepted, unused.
  EXPECT_EQ(features[2]->bundle->manifest().unused_inputs.size(), 11u);
  EXPECT_TRUE(features[0]->bundle->manifest().unused_inputs.empty());
  // Distilled students answer the teacher's question: probabilities of its classes.
  std::size_t students = 0;
  for (const auto& candidate : report->candidates) {
    if (candidate.technique != "distill") continue;
    ++students;
    EXPECT_EQ(candidate.bundle->task(), model::Task::kBinaryClassification);
    EXPECT_EQ(candidate.bundle->manifest().class_labels, gbdt->manifest().class_labels);
    auto scores = candidate.bundle->predict(*golden_set);
    ASSERT_TRUE(scores.ok());
    for (float score : scores->scores) ASSERT_TRUE(score >= 0.0f && score <= 1.0f) << score;
    EXPECT_GT(candidate.quality, 0.6) << candidate.name;  // it learned something
  }
  EXPECT_EQ(students, 3u);  // gbdt, mlp and linear
  // What meets the SLO is registered, nothing else: not the rows that miss a clause, not the int8
  // and sparse rows (not applicable to trees), not serving configurations.
  std::size_t shippable = 0;
  for (std::size_t index = 1; index < report->candidates.size(); ++index) {
    const CandidateResult& candidate = report->candidates[index];
    bool ships = candidate.meets_slo && candidate.error.empty() && candidate.technique != "serving";
    shippable += ships ? 1 : 0;
    EXPECT_EQ(candidate.version.empty(), !ships) << candidate.name;
  }
  EXPECT_EQ(registered.size(), shippable);
  // Those that meet the SLO were measured again in interleaved rounds: a median within a range.
  for (const auto& candidate : report->candidates) {
    SCOPED_TRACE(candidate.name);
    if (!candidate.meets_slo || !candidate.error.empty()) {
      EXPECT_EQ(candidate.throughput_rounds, 0);
      continue;
    }
    // A round whose load test failed a request (a slow sanitizer build) counts for nothing.
    EXPECT_GE(candidate.throughput_rounds, 1);
    EXPECT_LE(candidate.throughput_rounds, 5);
    EXPECT_LE(candidate.throughput_low, candidate.throughput_median);
    EXPECT_LE(candidate.throughput_median, candidate.throughput_high);
    EXPECT_GT(candidate.throughput_low, 0.0);
  }
  EXPECT_NE(report->reason.find("interleaved rounds"), std::string::npos) << report->reason;
  // The fastest median leads; a candidate with fewer changes than the one chosen lost only by
  // being clearly slower than the leader (its range below the leader's), not by noise.
  ASSERT_GE(report->recommended, 0);
  const CandidateResult& chosen = report->candidates[static_cast<std::size_t>(report->recommended)];
  const CandidateResult* leader = &chosen;
  for (const auto& candidate : report->candidates) {
    if (candidate.throughput_rounds > 0 && candidate.throughput_median > leader->throughput_median) {
      leader = &candidate;
    }
  }
  EXPECT_GE(chosen.throughput_high, leader->throughput_low);
  for (const auto& candidate : report->candidates) {
    if (candidate.throughput_rounds == 0 || candidate.changes >= chosen.changes) continue;
    EXPECT_LT(candidate.throughput_high, leader->throughput_low) << candidate.name << " lost to " << chosen.name;
  }
  EXPECT_EQ(report->prune_curve.back().first, 40u);
  ASSERT_GE(report->recommended, 0);
  EXPECT_TRUE(report->candidates[static_cast<std::size_t>(report->recommended)].meets_slo);
  EXPECT_FALSE(report->reason.empty());
}

TEST_F(OptimizeTest, GuardsKeepACandidateFromBeingRecommended) {
  OptimizeOptions options = quick(gbdt);
  options.techniques = {"prune"};
  options.tolerance = 0.0;  // any changed output is refused
  options.slo = *parse_slo("p95<=50ms@100rps,auc_drop<=0.5");
  std::vector<std::string> registered;
  options.on_candidate = [&](const CandidateResult& candidate) -> Result<std::string> {
    registered.push_back(candidate.name);
    return "lending@" + std::to_string(registered.size() + 1);
  };
  auto report = optimize_model(options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  // A candidate that misses a clause is not registered (it would become the newest version).
  EXPECT_TRUE(registered.empty()) << registered.front();
  options.on_candidate = nullptr;
  for (const auto& candidate : report->candidates) {
    if (candidate.technique != "prune" || !candidate.error.empty()) continue;
    EXPECT_FALSE(candidate.meets_slo);
    ASSERT_FALSE(candidate.failures.empty());
    EXPECT_NE(candidate.failures.back().find("golden rows differ"), std::string::npos) << candidate.failures.back();
  }
  // An impossible latency: nothing meets it, and the table says why.
  options.tolerance.reset();
  options.techniques = {"quantize"};
  options.slo = *parse_slo("p50<=0.000001ms@100rps");
  report = optimize_model(options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->recommended, -1);
  EXPECT_NE(report->candidates[0].failures.at(0).find("p50"), std::string::npos) << report->candidates[0].failures[0];
}

// An SLO without a quality clause still holds quality: a candidate whose RMSE grows by more than
// 1% of the baseline's misses the default bound, and the recommendation says the bound applied.
TEST_F(OptimizeTest, WithoutAQualityClauseTheDefaultBoundHolds) {
  RegressionTeacher chicago;
  ASSERT_NO_FATAL_FAILURE(chicago.train_teacher());
  OptimizeOptions options = chicago.options();
  auto report = optimize_model(options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  double limit = 0.01 * report->candidates[0].quality;
  std::size_t held_back = 0;
  for (const auto& candidate : report->candidates) {
    if (!candidate.error.empty() || !(candidate.quality_drop > limit)) continue;
    ++held_back;
    EXPECT_FALSE(candidate.meets_slo) << candidate.name;
    bool named = std::any_of(candidate.failures.begin(), candidate.failures.end(), [](const std::string& failure) {
      return failure.find("the default bound") != std::string::npos;
    });
    EXPECT_TRUE(named) << candidate.name;
  }
  EXPECT_GT(held_back, 0u) << "no student lost more than 1% of the teacher's RMSE: the test shows nothing";
  EXPECT_NE(report->reason.find("no rmse_drop clause"), std::string::npos) << report->reason;
  if (report->recommended >= 0) {
    EXPECT_LE(report->candidates[static_cast<std::size_t>(report->recommended)].quality_drop, limit);
  }
}

// A regression teacher's students regress its predictions: no temperature applies (it would
// scale their outputs), and with alpha 1 they track the teacher.
TEST_F(OptimizeTest, RegressionStudentsTrackTheirTeacher) {
  RegressionTeacher chicago;
  ASSERT_NO_FATAL_FAILURE(chicago.train_teacher());
  OptimizeOptions options = chicago.options();
  options.distill_alpha = 1.0;
  options.distill_temperature = 3.0;
  auto report = optimize_model(options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->quality_metric, "rmse");
  double teacher_rmse = report->candidates[0].quality;
  for (std::size_t index = 1; index < report->candidates.size(); ++index) {
    const auto& student = report->candidates[index];
    ASSERT_EQ(student.error, "") << student.name;
    EXPECT_LT(student.quality, 2 * teacher_rmse + 1.0) << student.name;  // ~3x off with the temperature applied
  }
}

// An MLP's candidates: bf16, int8 per row and calibrated, units pruned with and without
// fine-tuning, and a smaller MLP distilled from it; each measured in the same table.
TEST_F(OptimizeTest, MlpCandidatesAreBuiltAndMeasured) {
  auto network = train::fit(*train_set, train::TrainRequest{.target = "Class",
                                                            .model_family = "mlp",
                                                            .params = {{"hidden_units", "64,32"}, {"epochs", "4"}}});
  ASSERT_TRUE(network.ok()) << network.status().message();
  OptimizeOptions options = quick(network->bundle);
  options.techniques = {"quantize", "int8", "prune", "distill"};
  options.calibration = train_set;
  auto report = optimize_model(options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  std::map<std::string, const CandidateResult*> by_name;
  for (const auto& candidate : report->candidates) by_name[candidate.name] = &candidate;
  for (const char* name :
       {"quantize:bf16", "int8:dynamic", "int8:calibrated-max", "int8:calibrated-p99.99", "prune:units-25%",
        "prune:units-25%+finetune", "prune:units-50%", "prune:units-50%+finetune", "distill:mlp-32"}) {
    ASSERT_EQ(by_name.count(name), 1u) << name;
    const CandidateResult& candidate = *by_name[name];
    EXPECT_EQ(candidate.error, "") << name;
    EXPECT_GT(candidate.max_rate, 0.0) << name;
  }
  const double baseline_auc = report->candidates[0].quality;
  for (const char* name : {"quantize:bf16", "int8:dynamic", "int8:calibrated-max"}) {
    EXPECT_NEAR(by_name[name]->quality, baseline_auc, 0.02) << name;
    EXPECT_LT(by_name[name]->loaded_bytes, report->candidates[0].loaded_bytes) << name;
  }
  EXPECT_EQ(by_name["prune:units-50%"]->settings.at("hidden_units"), "32,16");
  EXPECT_EQ(by_name["prune:units-25%+finetune"]->settings.at("hidden_units"), "48,24");
}

// A resumed run takes the records of what an earlier run measured (retrained candidates are not
// trained again), and measures what changed.
TEST_F(OptimizeTest, AResumedRunReusesWhatWasMeasured) {
  std::map<std::string, std::pair<std::string, std::map<std::string, std::string>>> registered;
  OptimizeOptions options = quick(gbdt);
  options.techniques = {"features"};
  options.on_candidate = [&](const CandidateResult& candidate) -> Result<std::string> {
    std::string version = "lending@" + std::to_string(registered.size() + 2);
    registered[candidate.name] = {version, candidate.bundle->manifest().optimization};
    return version;
  };
  auto first = optimize_model(options);
  ASSERT_TRUE(first.ok()) << first.status().message();
  ASSERT_EQ(registered.size(), 3u);

  int registrations = 0;
  options.on_candidate = [&](const CandidateResult&) -> Result<std::string> {
    return "lending@" + std::to_string(100 + ++registrations);
  };
  options.find_finished =
      [&](const std::string& name) -> std::optional<std::pair<std::string, std::map<std::string, std::string>>> {
    auto found = registered.find(name);
    if (found == registered.end()) return std::nullopt;
    return found->second;
  };
  auto resumed = optimize_model(options);
  ASSERT_TRUE(resumed.ok()) << resumed.status().message();
  EXPECT_EQ(registrations, 0);
  ASSERT_EQ(resumed->candidates.size(), first->candidates.size());
  for (std::size_t index = 1; index < resumed->candidates.size(); ++index) {
    const auto& again = resumed->candidates[index];
    const auto& before = first->candidates[index];
    EXPECT_EQ(again.error, "");
    EXPECT_EQ(again.version, before.version);
    EXPECT_EQ(again.bundle, nullptr);  // not trained again
    EXPECT_NEAR(again.quality, before.quality, 1e-5);
    EXPECT_EQ(again.meets_slo, before.meets_slo);
  }

  // Other settings: measured again.
  registered.begin()->second.second["setting.inputs"] = "999";
  auto changed = optimize_model(options);
  ASSERT_TRUE(changed.ok());
  EXPECT_EQ(registrations, 1);
}

TEST_F(OptimizeTest, InapplicableCandidatesAreRowsAndBadRequestsAreRefused) {
  auto report = optimize_model(quick(linear));
  ASSERT_TRUE(report.ok()) << report.status().message();
  // baseline, quantize, prune, prune:depth, features, three distilled students, int8, two sparse,
  // three serving configurations
  ASSERT_EQ(report->candidates.size(), 14u);
  for (const auto& candidate : report->candidates) {
    if (candidate.technique == "sparse") {
      // Fewer weights, each kept one exact: a small, measured drop.
      EXPECT_EQ(candidate.error, "");
      EXPECT_LT(std::abs(candidate.quality_drop), 0.05) << candidate.name;
      EXPECT_NE(candidate.settings.at("kept").find(" of "), std::string::npos);
      EXPECT_EQ(candidate.bundle->manifest().optimization.at("setting.kept"), candidate.settings.at("kept"));
    }
    if (candidate.technique == "int8") {
      // 8-bit weights: close to the baseline, not equal.
      EXPECT_EQ(candidate.error, "");
      EXPECT_LT(std::abs(candidate.quality_drop), 0.01);
      EXPECT_LT(candidate.max_abs_difference, 0.05);
      EXPECT_LT(candidate.bundle_bytes, report->candidates[0].bundle_bytes);
    }
    bool trees_only =
        candidate.technique == "quantize" || candidate.technique == "prune" || candidate.technique == "features";
    EXPECT_EQ(candidate.error.find("not applicable") != std::string::npos, trees_only) << candidate.name;
  }

  // A spent budget leaves rows that say so; the baseline is always measured.
  OptimizeOptions budgeted = quick(gbdt);
  budgeted.techniques = {"quantize", "serving"};
  budgeted.budget = std::chrono::milliseconds(1);
  auto out_of_time = optimize_model(budgeted);
  ASSERT_TRUE(out_of_time.ok()) << out_of_time.status().message();
  EXPECT_EQ(out_of_time->candidates[0].error, "");
  EXPECT_GT(out_of_time->candidates[0].p50_ms, 0.0);
  for (std::size_t index = 1; index < out_of_time->candidates.size(); ++index) {
    EXPECT_NE(out_of_time->candidates[index].error.find("--budget"), std::string::npos)
        << out_of_time->candidates[index].name << ": " << out_of_time->candidates[index].error;
  }

  OptimizeOptions options = quick(gbdt);
  options.techniques = {"features"};
  options.train = nullptr;
  auto untrained = optimize_model(options);
  ASSERT_TRUE(untrained.ok());
  EXPECT_NE(untrained->candidates.at(1).error.find("--train"), std::string::npos) << untrained->candidates.at(1).error;

  // Distillation from rows the teacher labels alone.
  data::Table unlabelled_rows;
  for (const auto& column : golden_set->columns()) {
    if (column.name == "Class") continue;
    ASSERT_TRUE(unlabelled_rows.add_column(column).ok());
  }
  options = quick(gbdt);
  options.techniques = {"distill"};
  options.train = nullptr;
  options.unlabeled = &unlabelled_rows;
  options.distill_temperature = 2.0;
  auto distilled = optimize_model(options);
  ASSERT_TRUE(distilled.ok()) << distilled.status().message();
  ASSERT_EQ(distilled->candidates.size(), 4u);  // the baseline and three students
  EXPECT_EQ(distilled->candidates[1].error, "");
  EXPECT_EQ(distilled->candidates[1].settings.at("rows"), "500");

  options = quick(gbdt);
  options.techniques = {"distill-magic"};
  EXPECT_FALSE(optimize_model(options).ok());
  options = quick(gbdt);
  options.slo = *parse_slo("cost<=0.01/1k");
  auto no_price = optimize_model(options);
  ASSERT_FALSE(no_price.ok());
  EXPECT_NE(no_price.status().message().find("price"), std::string::npos);
  data::Table unlabelled;
  for (const auto& column : golden_set->columns()) {
    if (column.name == "Class") continue;
    ASSERT_TRUE(unlabelled.add_column(column).ok());
  }
  options = quick(gbdt);
  options.golden = &unlabelled;
  EXPECT_FALSE(optimize_model(options).ok());
}

}  // namespace
}  // namespace slipway::optimize
