#include "optimize/candidates.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "slipway/eval.h"
#include "slipway/train.h"

namespace slipway::optimize {
namespace {

const model::TreeEnsembleModel* trees_of(const model::Bundle& bundle) {
  return dynamic_cast<const model::TreeEnsembleModel*>(&bundle.model());
}

// The ensemble's first `tree_count` trees, with only their nodes (renumbered).
model::TreeEnsembleData first_trees(const model::TreeEnsembleModel& trees, std::size_t tree_count) {
  model::TreeEnsembleData all = trees.to_data();
  model::TreeEnsembleData kept;
  kept.input_width = all.input_width;
  kept.base_margin = all.base_margin;
  kept.category_sets = all.category_sets;
  kept.group_count = all.group_count;
  bool statistics = !all.cover.empty();
  std::vector<std::uint32_t> renumbered(all.nodes.size(), 0);
  for (std::size_t tree = 0; tree < tree_count; ++tree) {
    if (!all.tree_groups.empty()) kept.tree_groups.push_back(all.tree_groups[tree]);
    kept.roots.push_back(static_cast<std::uint32_t>(kept.nodes.size()));
    // Breadth first, so children follow their parents and each index is known when it is set.
    std::vector<std::uint32_t> order = {all.roots[tree]};
    for (std::size_t at = 0; at < order.size(); ++at) {
      const model::TreeNode& node = all.nodes[order[at]];
      if (!node.is_leaf()) {
        order.push_back(node.left);
        order.push_back(node.right);
      }
    }
    auto first = static_cast<std::uint32_t>(kept.nodes.size());
    for (std::size_t at = 0; at < order.size(); ++at) renumbered[order[at]] = first + static_cast<std::uint32_t>(at);
    for (std::uint32_t index : order) {
      model::TreeNode node = all.nodes[index];
      if (!node.is_leaf()) {
        node.left = renumbered[node.left];
        node.right = renumbered[node.right];
      }
      kept.nodes.push_back(node);
      if (statistics) {
        kept.cover.push_back(all.cover[index]);
        kept.gain.push_back(all.gain[index]);
      }
    }
  }
  return kept;
}

// The baseline's bundle around another model. Its lineage stays (the same training run made
// both); its metrics go, being the baseline's: the candidate's own are in its optimization record.
std::shared_ptr<const model::Bundle> with_model(const model::Bundle& baseline,
                                                std::shared_ptr<const model::Model> model) {
  model::Manifest manifest = baseline.manifest();
  manifest.metrics.clear();
  return std::make_shared<const model::Bundle>(std::move(manifest), baseline.preprocessor(), std::move(model));
}

}  // namespace

std::vector<BuiltCandidate> serving_candidates(const std::shared_ptr<const model::Bundle>& baseline,
                                               double repeat_rate) {
  struct Config {
    const char* max_batch_size;
    const char* max_queue_delay_us;
    const char* instances;
  };
  static constexpr Config kConfigs[] = {{"8", "100", "1"}, {"32", "500", "1"}, {"64", "1000", "2"}};
  std::vector<BuiltCandidate> candidates;
  for (const Config& config : kConfigs) {
    std::map<std::string, std::string> keys = {{"max_batch_size", config.max_batch_size},
                                               {"max_queue_delay_us", config.max_queue_delay_us},
                                               {"instances", config.instances}};
    BuiltCandidate candidate{
        fmt::format("serving:b{}/{}us/x{}", config.max_batch_size, config.max_queue_delay_us, config.instances),
        "serving",
        keys,
        baseline,
        "",
        1};
    candidate.serving_config = keys;
    candidates.push_back(std::move(candidate));
  }
  if (repeat_rate > 0) {
    // A hit skips the model but not the request's parse and hash: only measuring says whether it
    // pays at this repeat rate.
    BuiltCandidate cached{"serving:cache", "serving", {{"cache", "true"}}, baseline, "", 1};
    cached.serving_config = {{"cache", "true"}};
    candidates.push_back(std::move(cached));
  }
  return candidates;
}

namespace {

// The training parameters of `family` the manifest records; the rest of its params are lineage
// (split, ...).
std::map<std::string, std::string> training_params(const model::Manifest& manifest, const std::string& family) {
  std::map<std::string, std::string> params;
  for (const auto& declaration : train::parameter_declarations()) {
    auto given = manifest.params.find(declaration.name);
    bool applies =
        std::find(declaration.families.begin(), declaration.families.end(), family) != declaration.families.end();
    if (given != manifest.params.end() && applies) params[declaration.name] = given->second;
  }
  return params;
}

// Trains `candidate` from `request` on `rows`, unless an earlier run measured it (then it is
// marked resumed and not trained again); a failure becomes its error.
void retrain(BuiltCandidate& candidate, const data::Table& rows, const train::TrainRequest& request,
             const AlreadyMeasured& already_measured) {
  if (already_measured && already_measured(candidate)) {
    candidate.resumed = true;
    return;
  }
  auto trained = train::fit(rows, request);
  if (trained.ok()) {
    candidate.bundle = trained->bundle;
  } else {
    candidate.error = "retraining failed: " + trained.status().message();
  }
}

}  // namespace

std::vector<BuiltCandidate> depth_candidates(const model::Bundle& baseline, const data::Table* train,
                                             const AlreadyMeasured& already_measured) {
  auto refuse = [](std::string why) {
    return std::vector<BuiltCandidate>{{"prune:depth", "prune", {}, nullptr, std::move(why), 3}};
  };
  const model::Manifest& manifest = baseline.manifest();
  auto family = manifest.params.find("model");
  if (trees_of(baseline) == nullptr || family == manifest.params.end() || family->second != "gbdt") {
    return refuse("not applicable: refitting with a depth cap needs a GBDT slipway trained");
  }
  if (train == nullptr) return refuse("not applicable: refitting with a depth cap retrains the model; give --train");
  std::map<std::string, std::string> params = training_params(manifest, family->second);
  int depth = 6;  // max_depth's default
  if (auto given = params.find("max_depth"); given != params.end()) depth = std::atoi(given->second.c_str());
  if (depth <= 1) return refuse("not applicable: the trees are at most " + std::to_string(depth) + " deep already");
  std::vector<std::string> inputs;
  for (const auto& input : baseline.preprocessor().features()) inputs.push_back(input.name);
  std::vector<BuiltCandidate> candidates;
  for (int cap : {std::max(1, depth - 2), std::max(1, depth / 2)}) {
    if (cap >= depth || (!candidates.empty() && candidates.back().settings.at("max_depth") == std::to_string(cap))) {
      continue;
    }
    BuiltCandidate candidate{"prune:depth-" + std::to_string(cap),
                             "prune",
                             {{"max_depth", std::to_string(cap)}, {"was", std::to_string(depth)}},
                             nullptr,
                             "",
                             3};
    std::map<std::string, std::string> capped = params;
    capped["max_depth"] = std::to_string(cap);
    retrain(candidate, *train,
            {.target = manifest.target,
             .model_family = family->second,
             .features = inputs,
             .params = capped,
             .seed = manifest.seed},
            already_measured);
    candidates.push_back(std::move(candidate));
  }
  return candidates;
}

std::vector<BuiltCandidate> feature_candidates(const model::Bundle& baseline, const data::Table* train,
                                               const AlreadyMeasured& already_measured) {
  auto refuse = [](std::string why) {
    return std::vector<BuiltCandidate>{{"features", "features", {}, nullptr, std::move(why), 3}};
  };
  const model::TreeEnsembleModel* trees = trees_of(baseline);
  if (trees == nullptr) return refuse("not applicable: the model is not a tree ensemble");
  if (train == nullptr) return refuse("not applicable: feature reduction retrains the model; give --train FILE");
  const model::Manifest& manifest = baseline.manifest();
  auto family = manifest.params.find("model");
  if (family == manifest.params.end()) {
    return refuse("not applicable: the model was not trained by slipway (its manifest has no training parameters)");
  }
  const auto& inputs = baseline.preprocessor().features();
  for (const auto& input : inputs) {
    if (input.width() != 1) return refuse("not applicable: input '" + input.name + "' spans several features");
  }
  if (inputs.size() < 2) return refuse("not applicable: the model has a single input");
  std::map<std::string, std::string> params = training_params(manifest, family->second);
  model::TreeEnsembleModel::Importance importance = trees->importance();
  std::vector<std::size_t> order(inputs.size());
  for (std::size_t index = 0; index < order.size(); ++index) order[index] = index;
  auto score = [&](std::size_t input) {
    return importance.total_gain.empty() ? static_cast<double>(importance.splits[input]) : importance.total_gain[input];
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t left, std::size_t right) { return score(left) < score(right); });

  std::vector<BuiltCandidate> candidates;
  // The first retrains with every input: the control that shows what retraining on these rows
  // alone changes (a baseline trained with a held-out split saw fewer of them).
  std::optional<std::size_t> previous;
  for (double fraction : {0.0, 0.25, 0.5}) {
    std::size_t drop =
        fraction == 0.0
            ? 0
            : std::max<std::size_t>(1, static_cast<std::size_t>(fraction * static_cast<double>(inputs.size())));
    drop = std::min(drop, inputs.size() - 1);
    if (drop == previous) continue;
    previous = drop;
    std::vector<std::string> kept, dropped;
    for (std::size_t rank = 0; rank < order.size(); ++rank) {
      (rank < drop ? dropped : kept).push_back(inputs[order[rank]].name);
    }
    std::string dropped_text;
    for (const auto& name : dropped) dropped_text += (dropped_text.empty() ? "" : ",") + name;
    BuiltCandidate candidate{drop == 0 ? std::string("features:all") : "features:-" + std::to_string(drop),
                             "features",
                             {{"dropped", dropped_text}, {"inputs", std::to_string(kept.size())}},
                             nullptr,
                             "",
                             3};
    retrain(candidate, *train,
            {.target = manifest.target,
             .model_family = family->second,
             .features = kept,
             .params = params,
             .seed = manifest.seed},
            already_measured);
    candidates.push_back(std::move(candidate));
  }
  return candidates;
}

namespace {

constexpr const char* kTeacherColumn = "__teacher_margin";

double logit(double probability) {
  double clipped = std::clamp(probability, 1e-6, 1.0 - 1e-6);
  return std::log(clipped / (1.0 - clipped));
}

// `rows` without the target and with the student's target: the margin to regress. Labelled rows
// mix the teacher with their label; unlabelled rows (no target column, or an empty value) take
// the teacher's alone.
Result<data::Table> student_rows(const model::Bundle& teacher, const data::Table& rows,
                                 const DistillSettings& settings) {
  const model::Manifest& manifest = teacher.manifest();
  SLIPWAY_ASSIGN_OR_RETURN(model::Predictions predicted, teacher.predict(rows));
  const data::Column* target = rows.find(manifest.target);
  bool binary = manifest.task == model::Task::kBinaryClassification;
  if (target != nullptr && !binary && target->type != data::ColumnType::kNumeric) {
    return invalid_argument("the target '" + manifest.target + "' holds text, but the model is a regression");
  }
  // Both the teacher and the labels are softened by the temperature, so the student's margin,
  // scaled back by it, is the mix the temperature was applied to.
  auto soften = [&](double probability) { return 1.0 / (1.0 + std::exp(-logit(probability) / settings.temperature)); };
  data::Column margins{kTeacherColumn, data::ColumnType::kNumeric, {}, {}, {}};
  margins.numbers.resize(rows.row_count());
  for (std::size_t row = 0; row < rows.row_count(); ++row) {
    double teacher_value = predicted.scores[row];
    if (binary) teacher_value = soften(teacher_value);
    double mixed = teacher_value;
    if (target != nullptr && !target->is_missing(row)) {
      double label = 0.0;
      if (binary) {
        std::string text = target->text_at(row);
        if (text != manifest.class_labels[0] && text != manifest.class_labels[1]) {
          return invalid_argument("the target '" + manifest.target + "' has the label '" + text +
                                  "', which the model does not know (it knows '" + manifest.class_labels[0] +
                                  "' and '" + manifest.class_labels[1] + "')");
        }
        label = soften(text == manifest.class_labels[1] ? 1.0 : 0.0);
      } else {
        label = target->numbers[row];
      }
      mixed = settings.alpha * teacher_value + (1.0 - settings.alpha) * label;
    }
    margins.numbers[row] = static_cast<float>(binary ? logit(mixed) : mixed);
  }
  data::Table table;
  for (const auto& column : rows.columns()) {
    if (column.name != manifest.target) SLIPWAY_RETURN_IF_ERROR(table.add_column(column));
  }
  SLIPWAY_RETURN_IF_ERROR(table.add_column(std::move(margins)));
  return table;
}

// The rows of `first` and then `second`, on the teacher's inputs and the target (matched by
// name; other columns are left out). `second` may lack the target (or hold it empty, which reads
// as another type): its rows are then unlabelled.
Result<data::Table> concatenated(const data::Table& first, const data::Table& second, const model::Bundle& teacher) {
  const std::string& target = teacher.manifest().target;
  data::Table joined;
  for (const auto& column : first.columns()) {
    if (column.name != target && !teacher.preprocessor().feature_index(column.name)) continue;
    const data::Column* other = second.find(column.name);
    if (column.name == target && (other == nullptr || other->type != column.type)) {
      data::Column both = column;
      if (column.type == data::ColumnType::kNumeric) {
        both.numbers.resize(both.numbers.size() + second.row_count(), std::numeric_limits<float>::quiet_NaN());
      } else {
        both.codes.resize(both.codes.size() + second.row_count(), data::Column::kMissingCode);
      }
      SLIPWAY_RETURN_IF_ERROR(joined.add_column(std::move(both)));
      continue;
    }
    if (other == nullptr || other->type != column.type) {
      return invalid_argument("the unlabeled rows need the column '" + column.name + "' (" +
                              std::string(data::column_type_name(column.type)) + ")");
    }
    data::Column both = column;
    if (column.type == data::ColumnType::kNumeric) {
      both.numbers.insert(both.numbers.end(), other->numbers.begin(), other->numbers.end());
    } else {
      // Re-code the second table's categories into the first's dictionary, once per category.
      std::map<std::string, std::int32_t> code_of;
      for (std::size_t code = 0; code < both.dictionary.size(); ++code) {
        code_of.emplace(both.dictionary[code], static_cast<std::int32_t>(code));
      }
      std::vector<std::int32_t> recoded(other->dictionary.size());
      for (std::size_t code = 0; code < other->dictionary.size(); ++code) {
        auto [found, added] =
            code_of.emplace(other->dictionary[code], static_cast<std::int32_t>(both.dictionary.size()));
        if (added) both.dictionary.push_back(other->dictionary[code]);
        recoded[code] = found->second;
      }
      for (std::size_t row = 0; row < other->size(); ++row) {
        both.codes.push_back(other->is_missing(row) ? data::Column::kMissingCode
                                                    : recoded[static_cast<std::size_t>(other->codes[row])]);
      }
    }
    SLIPWAY_RETURN_IF_ERROR(joined.add_column(std::move(both)));
  }
  return joined;
}

}  // namespace

std::vector<BuiltCandidate> distill_candidates(const model::Bundle& baseline, const data::Table* train,
                                               const data::Table* unlabeled, const DistillSettings& settings,
                                               const AlreadyMeasured& already_measured) {
  auto refuse = [](std::string why) {
    return std::vector<BuiltCandidate>{{"distill", "distill", {}, nullptr, std::move(why), 3}};
  };
  const model::Manifest& manifest = baseline.manifest();
  if (manifest.task == model::Task::kMulticlassClassification) {
    return refuse("not applicable: distillation takes binary classification and regression models");
  }
  if (train == nullptr && unlabeled == nullptr) {
    return refuse("not applicable: distillation trains a student; give --train FILE (and --unlabeled FILE)");
  }
  if (!(settings.alpha >= 0 && settings.alpha <= 1) || !(settings.temperature > 0) ||
      !std::isfinite(settings.temperature)) {
    return refuse("alpha must be in [0, 1] and the temperature > 0");
  }
  // The student learns from the rows given, labelled and not; the teacher labels them all.
  Result<data::Table> rows = invalid_argument("no rows");
  if (train != nullptr && unlabeled != nullptr) {
    auto joined = concatenated(*train, *unlabeled, baseline);
    if (!joined.ok()) return refuse(joined.status().message());
    rows = student_rows(baseline, *joined, settings);
  } else {
    rows = student_rows(baseline, train != nullptr ? *train : *unlabeled, settings);
  }
  if (!rows.ok()) return refuse("the teacher cannot score the rows: " + rows.status().message());
  std::vector<std::string> inputs;
  for (const auto& input : baseline.preprocessor().features()) inputs.push_back(input.name);
  struct Student {
    const char* name;
    const char* family;
    std::map<std::string, std::string> params;
  };
  // A regression objective, said outright: a margin column with two distinct values would
  // otherwise be taken for a binary target.
  const Student students[] = {
      {"distill:gbdt-50x4", "gbdt", {{"rounds", "50"}, {"max_depth", "4"}, {"objective", "reg:squarederror"}}},
      {"distill:mlp-32",
       "mlp",
       {{"hidden_units", "32"}, {"epochs", "30"}, {"learning_rate", "0.003"}, {"objective", "reg:squarederror"}}},
      {"distill:linear", "linear", {}}};
  std::vector<BuiltCandidate> candidates;
  for (const Student& student : students) {
    BuiltCandidate candidate{student.name,
                             "distill",
                             {{"student", student.family},
                              {"alpha", fmt::format("{}", settings.alpha)},
                              {"temperature", fmt::format("{}", settings.temperature)},
                              {"rows", std::to_string(rows->row_count())}},
                             nullptr,
                             "",
                             3};
    for (const auto& [key, value] : student.params) candidate.settings["student." + key] = value;
    if (already_measured && already_measured(candidate)) {
      candidate.resumed = true;
      candidates.push_back(std::move(candidate));
      continue;
    }
    train::TrainRequest request{.target = kTeacherColumn,
                                .model_family = student.family,
                                .features = inputs,
                                .params = student.params,
                                .seed = manifest.seed};
    auto trained = train::fit(*rows, request);
    if (!trained.ok()) {
      candidate.error = "training the student failed: " + trained.status().message();
      candidates.push_back(std::move(candidate));
      continue;
    }
    // The student predicts the teacher's margin (softened by the temperature): scaled back, and
    // wrapped as the teacher's task, the bundle's link turns it into the teacher's output.
    std::shared_ptr<const model::Model> student_model = trained->bundle->shared_model();
    if (manifest.task == model::Task::kBinaryClassification && settings.temperature != 1.0) {
      if (const auto* trees = dynamic_cast<const model::TreeEnsembleModel*>(student_model.get())) {
        model::TreeEnsembleData data = trees->to_data();
        data.base_margin *= static_cast<float>(settings.temperature);
        for (auto& node : data.nodes) {
          if (node.is_leaf()) node.value *= static_cast<float>(settings.temperature);
        }
        student_model = std::make_shared<const model::TreeEnsembleModel>(std::move(data));
      } else if (const auto* linear = dynamic_cast<const model::LinearModel*>(student_model.get())) {
        std::vector<double> weights(linear->weights().begin(), linear->weights().end());
        for (double& weight : weights) weight *= settings.temperature;
        student_model =
            std::make_shared<const model::LinearModel>(std::move(weights), linear->bias() * settings.temperature);
      } else if (const auto* mlp = dynamic_cast<const model::MlpModel*>(student_model.get())) {
        std::vector<model::MlpLayer> layers = mlp->layers();
        auto scaled = [&](const model::SharedArray<float>& values) {
          std::vector<float> out = values.to_vector();
          for (float& value : out) value *= static_cast<float>(settings.temperature);
          return model::SharedArray<float>(std::move(out));
        };
        layers.back().weights = scaled(layers.back().weights);
        layers.back().bias = scaled(layers.back().bias);
        auto rescaled = model::MlpModel::make(std::move(layers), mlp->precision());
        if (!rescaled.ok()) {
          candidate.error = "scaling the student by the temperature failed: " + rescaled.status().message();
          candidates.push_back(std::move(candidate));
          continue;
        }
        student_model = *rescaled;
      }
    }
    model::Manifest wrapped = trained->bundle->manifest();
    wrapped.task = manifest.task;
    wrapped.target = manifest.target;
    wrapped.class_labels = manifest.class_labels;
    wrapped.metrics.clear();
    candidate.bundle =
        std::make_shared<const model::Bundle>(std::move(wrapped), trained->bundle->preprocessor(), student_model);
    candidates.push_back(std::move(candidate));
  }
  return candidates;
}

std::vector<BuiltCandidate> mlp_precision_candidates(const model::Bundle& baseline, const std::string& technique,
                                                     const data::Table* calibration) {
  const auto* mlp = dynamic_cast<const model::MlpModel*>(&baseline.model());
  auto failed = [&](const std::string& name, std::string why) {
    return BuiltCandidate{name, technique, {}, nullptr, std::move(why), 1};
  };
  if (mlp == nullptr) return {failed(technique, "not applicable: the model is not an MLP")};
  // The candidate's bundle around `model`, or the reason it could not be made.
  auto built = [&](BuiltCandidate candidate, const Result<std::shared_ptr<const model::MlpModel>>& model) {
    if (model.ok()) {
      candidate.bundle = with_model(baseline, *model);
    } else {
      candidate.error = model.status().message();
    }
    return candidate;
  };
  std::vector<BuiltCandidate> candidates;
  if (technique == "quantize") {
    return {built({"quantize:bf16", technique, {{"weights", "bfloat16"}, {"products", "bfloat16"}}, nullptr, "", 1},
                  mlp->with_precision(model::MlpPrecision::kBfloat16))};
  }
  candidates.push_back(
      built({"int8:dynamic", technique, {{"weights", "int8"}, {"activations", "int8 per row"}}, nullptr, "", 1},
            mlp->with_precision(model::MlpPrecision::kInt8)));
  if (calibration == nullptr || calibration->row_count() == 0) {
    candidates.push_back(failed("int8:calibrated", calibration == nullptr
                                                       ? "not built: calibrating activations needs --calibration FILE"
                                                       : "not built: the calibration file has no rows"));
    return candidates;
  }
  std::vector<float> features;
  if (auto status = baseline.preprocessor().transform(*calibration, features); !status.ok()) {
    candidates.push_back(failed("int8:calibrated", "the calibration rows do not fit the model: " + status.message()));
    return candidates;
  }
  for (double percentile : {100.0, 99.99}) {
    std::string method = percentile >= 100.0 ? "max" : "p" + format_config_number(percentile);
    BuiltCandidate candidate{
        "int8:calibrated-" + method,
        technique,
        {{"weights", "int8"},
         {"activations", "int8 static per layer"},
         {"calibration", method + " of |x| over " + std::to_string(calibration->row_count()) + " rows"}},
        nullptr,
        "",
        2};
    std::vector<float> scales = mlp->calibrate(features, calibration->row_count(), percentile);
    candidates.push_back(built(std::move(candidate), mlp->with_int8_calibration(scales)));
  }
  return candidates;
}

namespace {

// The MLP without the hidden units whose weights matter least: `share` of each hidden layer.
Result<std::shared_ptr<const model::MlpModel>> without_smallest_units(const model::MlpModel& mlp, double share) {
  std::vector<model::MlpLayer> layers = mlp.layers();
  for (std::size_t index = 0; index + 1 < layers.size(); ++index) {
    model::MlpLayer& layer = layers[index];
    model::MlpLayer& next = layers[index + 1];
    std::size_t units = layer.outputs;
    auto removed = static_cast<std::size_t>(share * static_cast<double>(units));
    if (removed == 0 || removed >= units) continue;
    std::vector<std::pair<double, std::size_t>> scores;
    for (std::size_t unit = 0; unit < units; ++unit) {
      double incoming = 0.0, outgoing = 0.0;
      for (std::size_t k = 0; k < layer.inputs; ++k) incoming += std::pow(layer.weights[unit * layer.inputs + k], 2);
      for (std::size_t output = 0; output < next.outputs; ++output) {
        outgoing += std::pow(next.weights[output * next.inputs + unit], 2);
      }
      scores.emplace_back(std::sqrt(incoming) * std::sqrt(outgoing), unit);
    }
    std::stable_sort(scores.begin(), scores.end());
    std::vector<bool> keep(units, true);
    for (std::size_t rank = 0; rank < removed; ++rank) keep[scores[rank].second] = false;
    auto kept_rows = [&](const model::SharedArray<float>& values, std::size_t width) {
      std::vector<float> out;
      for (std::size_t unit = 0; unit < units; ++unit) {
        if (keep[unit])
          out.insert(out.end(), values.begin() + static_cast<std::ptrdiff_t>(unit * width),
                     values.begin() + static_cast<std::ptrdiff_t>((unit + 1) * width));
      }
      return model::SharedArray<float>(std::move(out));
    };
    layer.weights = kept_rows(layer.weights, layer.inputs);
    layer.bias = kept_rows(layer.bias, 1);
    if (layer.normalized()) {
      layer.norm_scale = kept_rows(layer.norm_scale, 1);
      layer.norm_shift = kept_rows(layer.norm_shift, 1);
    }
    std::vector<float> next_weights;
    for (std::size_t output = 0; output < next.outputs; ++output) {
      for (std::size_t unit = 0; unit < units; ++unit) {
        if (keep[unit]) next_weights.push_back(next.weights[output * next.inputs + unit]);
      }
    }
    next.weights = model::SharedArray<float>(std::move(next_weights));
    layer.outputs = units - removed;
    next.inputs = units - removed;
  }
  return model::MlpModel::make(std::move(layers), model::MlpPrecision::kFloat32);
}

}  // namespace

std::vector<BuiltCandidate> unit_prune_candidates(const model::Bundle& baseline, const data::Table* train,
                                                  const AlreadyMeasured& already_measured) {
  const auto* mlp = dynamic_cast<const model::MlpModel*>(&baseline.model());
  if (mlp == nullptr || mlp->layers().size() < 2) {
    return {BuiltCandidate{
        "prune:units",
        "prune",
        {},
        nullptr,
        mlp == nullptr ? "not applicable: the model is not an MLP" : "not applicable: the MLP has no hidden layer",
        2}};
  }
  const model::Manifest& manifest = baseline.manifest();
  std::vector<BuiltCandidate> candidates;
  for (double share : {0.25, 0.5}) {
    std::string percent = format_config_number(100 * share) + "%";
    auto pruned = without_smallest_units(*mlp, share);
    if (!pruned.ok()) {
      candidates.push_back({"prune:units-" + percent, "prune", {}, nullptr, pruned.status().message(), 2});
      continue;
    }
    std::string widths;
    for (std::size_t index = 0; index + 1 < (*pruned)->layers().size(); ++index) {
      widths += (widths.empty() ? "" : ",") + std::to_string((*pruned)->layers()[index].outputs);
    }
    auto pruned_bundle = with_model(baseline, *pruned);
    candidates.push_back({"prune:units-" + percent,
                          "prune",
                          {{"removed", percent + " of each hidden layer"}, {"hidden_units", widths}},
                          pruned_bundle,
                          "",
                          2});
    BuiltCandidate tuned{"prune:units-" + percent + "+finetune",
                         "prune",
                         {{"removed", percent + " of each hidden layer"}, {"hidden_units", widths}},
                         nullptr,
                         "",
                         3};
    auto family = manifest.params.find("model");
    if (family == manifest.params.end() || family->second != "mlp") {
      tuned.error = "not built: fine-tuning needs an MLP slipway trained (its parameters are in the manifest)";
    } else if (train == nullptr) {
      tuned.error = "not built: fine-tuning retrains the pruned model; give --train FILE";
    } else {
      std::map<std::string, std::string> params = training_params(manifest, "mlp");
      int epochs = params.count("epochs") != 0 ? std::atoi(params["epochs"].c_str()) : 20;
      params["epochs"] = std::to_string(std::max(2, epochs / 4));
      params["hidden_units"] = widths;
      params["early_stopping_rounds"] = "0";
      tuned.settings["epochs"] = params["epochs"];
      std::vector<std::string> inputs;
      for (const auto& input : baseline.preprocessor().features()) inputs.push_back(input.name);
      train::TrainRequest request{.target = manifest.target,
                                  .model_family = "mlp",
                                  .features = inputs,
                                  .params = params,
                                  .seed = manifest.seed};
      request.init_model = pruned_bundle;
      request.init_model_reference = "the baseline pruned by " + percent;
      retrain(tuned, *train, request, already_measured);
    }
    candidates.push_back(std::move(tuned));
  }
  return candidates;
}

BuiltCandidate int8_candidate(const model::Bundle& baseline) {
  BuiltCandidate candidate{"int8", "int8", {{"weights", "int8"}}, nullptr, "", 1};
  const auto* linear = dynamic_cast<const model::LinearModel*>(&baseline.model());
  if (linear == nullptr) {
    candidate.error = "not applicable: the model is not linear";
    return candidate;
  }
  auto quantized = linear->with_int8_weights();
  candidate.settings["scale"] = fmt::format("{:.6g}", quantized->weight_scale());
  candidate.bundle = with_model(baseline, quantized);
  return candidate;
}

std::vector<BuiltCandidate> sparse_candidates(const model::Bundle& baseline) {
  const auto* linear = dynamic_cast<const model::LinearModel*>(&baseline.model());
  if (linear == nullptr || linear->has_int8_weights()) {
    return {{"sparse",
             "sparse",
             {},
             nullptr,
             linear == nullptr ? "not applicable: the model is not linear"
                               : "not applicable: the weights are int8; sparsify the float model",
             1}};
  }
  std::span<const double> weights = linear->weights();
  double largest = 0.0;
  for (double weight : weights) {
    if (std::isfinite(weight)) largest = std::max(largest, std::abs(weight));
  }
  std::vector<BuiltCandidate> candidates;
  for (double share : {0.01, 0.05}) {
    std::string percent = format_config_number(100 * share) + "%";
    BuiltCandidate candidate{
        "sparse:" + percent, "sparse", {{"threshold", percent + " of the largest |weight|"}}, nullptr, "", 1};
    std::vector<double> kept(weights.begin(), weights.end());
    std::size_t dropped = 0;
    for (double& weight : kept) {
      if (std::abs(weight) < share * largest) {
        weight = 0.0;
        ++dropped;
      }
    }
    candidate.settings["kept"] = std::to_string(kept.size() - dropped) + " of " + std::to_string(kept.size());
    // Inputs whose every preprocessed column now has weight 0.
    std::string unused;
    std::size_t column = 0;
    for (const auto& feature : baseline.preprocessor().features()) {
      std::size_t width = feature.width();
      bool read = false;
      for (std::size_t offset = 0; offset < width && column + offset < kept.size(); ++offset) {
        read = read || kept[column + offset] != 0.0;
      }
      if (!read) unused += (unused.empty() ? "" : ",") + feature.name;
      column += width;
    }
    candidate.settings["unused_inputs"] = unused.empty() ? "none" : unused;
    candidate.bundle =
        with_model(baseline, std::make_shared<const model::LinearModel>(std::move(kept), linear->bias()));
    candidates.push_back(std::move(candidate));
  }
  return candidates;
}

BuiltCandidate quantize_candidate(const model::Bundle& baseline, bool bf16_leaves) {
  BuiltCandidate candidate{bf16_leaves ? "quantize:bf16-leaves" : "quantize",
                           "quantize",
                           {{"layout", "quantized"}},
                           nullptr,
                           "",
                           bf16_leaves ? 2 : 1};
  if (bf16_leaves) candidate.settings["leaves"] = "bf16";
  const model::TreeEnsembleModel* trees = trees_of(baseline);
  if (trees == nullptr) {
    candidate.error = "not applicable: the model is not a tree ensemble";
    return candidate;
  }
  auto quantized = trees->with_quantized_layout(bf16_leaves);
  if (!quantized.ok()) {
    candidate.error = quantized.status().message();
    return candidate;
  }
  candidate.settings["max_thresholds_per_input"] = std::to_string((*quantized)->quantized_max_thresholds());
  candidate.bundle = with_model(baseline, *quantized);
  return candidate;
}

std::vector<BuiltCandidate> prune_candidates(const model::Bundle& baseline, const data::Table& golden,
                                             std::optional<double> quality_budget, std::vector<PrunePoint>& curve) {
  const model::TreeEnsembleModel* trees = trees_of(baseline);
  if (trees == nullptr) {
    return {BuiltCandidate{"prune", "prune", {}, nullptr, "not applicable: the model is not a tree ensemble", 2}};
  }
  const std::size_t groups = trees->output_count();
  // Rounds of one tree per output, in output order, as Slipway and XGBoost (one parallel tree)
  // write them; anything else has no round to cut at.
  bool in_rounds = trees->roots().size() % groups == 0 && !trees->roots().empty();
  for (std::size_t tree = 0; in_rounds && tree < trees->roots().size(); ++tree) {
    in_rounds = trees->tree_group(tree) == tree % groups;
  }
  if (!in_rounds) {
    return {BuiltCandidate{
        "prune", "prune", {}, nullptr, "not applicable: the trees are not in rounds of one per output", 2}};
  }
  const std::size_t rounds = trees->roots().size() / groups;
  const std::string metric(eval::watched_metric(baseline.task()));
  // Up to 24 cut points, evenly spread, the whole model last.
  std::vector<std::size_t> cuts;
  std::size_t step = std::max<std::size_t>(1, rounds / 24);
  for (std::size_t cut = step; cut < rounds; cut += step) cuts.push_back(cut);
  cuts.push_back(rounds);
  curve.clear();
  std::vector<std::shared_ptr<const model::Bundle>> bundles;
  for (std::size_t cut : cuts) {
    auto model = std::make_shared<const model::TreeEnsembleModel>(first_trees(*trees, cut * groups));
    auto bundle = with_model(baseline, model);
    auto evaluation = eval::evaluate(*bundle, golden, "");
    if (!evaluation.ok()) {
      return {BuiltCandidate{"prune", "prune", {}, nullptr, evaluation.status().message(), 2}};
    }
    curve.push_back({cut, evaluation->overall.get(metric)});
    bundles.push_back(std::move(bundle));
  }
  const double whole = curve.back().quality;
  std::size_t best = curve.size() - 1;
  for (std::size_t index = 0; index < curve.size(); ++index) {
    if (eval::quality_drop(metric, curve[best].quality, curve[index].quality) < 0) best = index;
  }
  std::vector<BuiltCandidate> candidates;
  auto add = [&](std::size_t index, const std::string& why) {
    std::size_t cut = curve[index].rounds;
    for (const auto& existing : candidates) {
      if (existing.settings.at("rounds") == std::to_string(cut)) return;
    }
    candidates.push_back({"prune:" + std::to_string(cut),
                          "prune",
                          {{"rounds", std::to_string(cut)}, {"of_rounds", std::to_string(rounds)}, {"chosen", why}},
                          bundles[index],
                          "",
                          2});
  };
  if (curve[best].rounds < rounds) add(best, "best " + metric + " on the golden rows");
  if (quality_budget) {
    for (std::size_t index = 0; index + 1 < curve.size(); ++index) {
      if (eval::quality_drop(metric, whole, curve[index].quality) <= *quality_budget) {
        add(index, "fewest rounds within the quality budget");
        break;
      }
    }
  }
  if (candidates.empty()) {
    candidates.push_back({"prune",
                          "prune",
                          {},
                          nullptr,
                          "no cut earlier than the last round is better on the golden rows" +
                              std::string(quality_budget ? " or within the quality budget" : ""),
                          2});
  }
  return candidates;
}

}  // namespace slipway::optimize
