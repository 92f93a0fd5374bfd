#include <charconv>
#include <cmath>
#include <cstdlib>

#include "slipway/train.h"
#include "train/gbdt_metric.h"
#include "train/gbdt_objective.h"
#include "train/training_params.h"

namespace slipway::train {
namespace {

bool applies_to(const ParamDeclaration& declaration, const std::string& family) {
  for (const auto& name : declaration.families) {
    if (name == family) return true;
  }
  return false;
}

ConfigKey config_key(const ParamDeclaration& declaration) {
  ConfigKey key;
  key.name = declaration.name;
  key.type = declaration.type == ParamType::kInt      ? ConfigType::kInt
             : declaration.type == ParamType::kDouble ? ConfigType::kNumber
                                                      : ConfigType::kChoice;
  key.default_value = declaration.default_value;
  key.minimum = declaration.minimum;
  key.maximum = declaration.maximum;
  key.choices = declaration.choices;
  key.help = declaration.description;
  return key;
}

// "auto" and then every name of an objective or metric table, in table order: a new objective
// or metric becomes a choice where it is defined.
template <typename Definition>
std::vector<std::string> auto_and_names(std::span<const Definition> definitions) {
  std::vector<std::string> choices = {"auto"};
  for (const auto& definition : definitions) choices.emplace_back(definition.name);
  return choices;
}

}  // namespace

const std::vector<std::string>& model_families() {
  static const std::vector<std::string> kFamilies = {"logistic", "linear", "gbdt", "mlp"};
  return kFamilies;
}

const std::vector<ParamDeclaration>& parameter_declarations() {
  // clang-format off: one declaration per block reads as a table.
  static const std::vector<ParamDeclaration> kDeclarations = {
      {"l2",
       ParamType::kDouble,
       "1.0",
       0.0,
       1e12,
       {},
       {"logistic", "linear"},
       "L2 penalty on the weights (not the intercept): the objective is sum of losses + l2/2 * sum of squared "
       "weights; l2=1 matches scikit-learn's LogisticRegression(C=1) and Ridge(alpha=1)."},
      {"max_iterations",
       ParamType::kInt,
       "500",
       1,
       100000,
       {},
       {"logistic", "linear"},
       "Most L-BFGS iterations before stopping."},
      {"tolerance",
       ParamType::kDouble,
       "1e-7",
       0.0,
       1.0,
       {},
       {"logistic", "linear"},
       "Stop when the largest gradient component, divided by the row count, is below this."},
      {"lbfgs_history",
       ParamType::kInt,
       "10",
       1,
       100,
       {},
       {"logistic", "linear"},
       "Correction pairs L-BFGS keeps to approximate the curvature."},
      {"categorical_encoding",
       ParamType::kChoice,
       "onehot",
       0,
       0,
       {"onehot", "ordinal"},
       {"logistic", "linear"},
       "How categorical columns become numbers: one slot per level (plus an 'other' slot for unseen, rare and "
       "missing values), or the level's frequency rank."},
      {"max_categories",
       ParamType::kInt,
       "100",
       1,
       100000,
       {},
       {"logistic", "linear", "gbdt", "mlp"},
       "Levels kept per categorical column, most frequent first; the rest share the 'other' slot."},
      {"standardize",
       ParamType::kChoice,
       "true",
       0,
       0,
       {"true", "false"},
       {"logistic", "linear"},
       "Center and scale numeric inputs by the training mean and standard deviation."},
      {"positive_class",
       ParamType::kChoice,
       "auto",
       0,
       0,
       {},
       {"logistic", "gbdt", "mlp"},
       "The label whose probability is the score; auto picks 1/yes/true when present, else the rarer class."},
      {"objective",
       ParamType::kChoice,
       "auto",
       0,
       0,
       auto_and_names(objective_definitions()),
       {"gbdt"},
       "What the trees fit; auto: binary:logistic for a target with two values, multi:softmax for a text target "
       "with more, else reg:squarederror. The base score (the starting margin) comes from the data: log-odds of the "
       "positive rate, the mean, or for the absolute and pseudo-Huber losses the median."},
      {"eval_metric",
       ParamType::kChoice,
       "auto",
       0,
       0,
       auto_and_names(metric_definitions()),
       {"gbdt"},
       "The metric recorded per round and used by early stopping (lower is better); auto: the objective's own "
       "(logloss, mlogloss, rmse, mae, mphe)."},
      {"rounds", ParamType::kInt, "100", 1, 100000, {}, {"gbdt"}, "Boosting rounds (trees, or trees per class)."},
      {"learning_rate", ParamType::kDouble, "0.1", 1e-6, 1.0, {}, {"gbdt"}, "Shrinkage applied to every leaf (eta)."},
      {"grow_policy",
       ParamType::kChoice,
       "depthwise",
       0,
       0,
       {"depthwise", "lossguide"},
       {"gbdt"},
       "depthwise: split every node of a level before the next; lossguide: always split the leaf with the largest "
       "loss reduction (leaf-wise, as LightGBM), up to max_leaves."},
      {"max_depth",
       ParamType::kInt,
       "6",
       0,
       32,
       {},
       {"gbdt"},
       "Deepest a tree may grow; 0 for no limit (with lossguide or max_leaves)."},
      {"max_leaves", ParamType::kInt, "0", 0, 65536, {}, {"gbdt"}, "Most leaves per tree; 0 for no limit."},
      {"lambda", ParamType::kDouble, "1.0", 0.0, 1e6, {}, {"gbdt"}, "L2 penalty on leaf weights."},
      {"alpha", ParamType::kDouble, "0", 0.0, 1e6, {}, {"gbdt"}, "L1 penalty on leaf weights."},
      {"gamma", ParamType::kDouble, "0", 0.0, 1e12, {}, {"gbdt"}, "Least loss reduction a split must bring."},
      {"min_child_weight",
       ParamType::kDouble,
       "1.0",
       0.0,
       1e12,
       {},
       {"gbdt"},
       "Least hessian sum in each child of a split."},
      {"subsample",
       ParamType::kDouble,
       "1.0",
       1e-6,
       1.0,
       {},
       {"gbdt"},
       "Share of the rows each tree is grown on, drawn per tree from the seed."},
      {"colsample_bytree",
       ParamType::kDouble,
       "1.0",
       1e-6,
       1.0,
       {},
       {"gbdt"},
       "Share of the features each tree may split on, drawn per tree from the seed."},
      {"huber_slope",
       ParamType::kDouble,
       "1.0",
       1e-9,
       1e12,
       {},
       {"gbdt"},
       "Delta of reg:pseudohubererror: errors beyond it count linearly."},
      {"max_bin",
       ParamType::kInt,
       "255",
       2,
       255,
       {},
       {"gbdt"},
       "Histogram bins per numeric feature (quantile cuts); missing values have a bin of their own."},
      {"categorical_splits",
       ParamType::kChoice,
       "ordinal",
       0,
       0,
       {"partition", "ordinal"},
       {"gbdt"},
       "partition: a split sends any subset of a categorical column's levels right (chosen by sorting the levels on "
       "their gradient statistics, as LightGBM and XGBoost's enable_categorical do); ordinal: levels are numbered by "
       "frequency and split by threshold. Partition splits can overfit many-level columns (see docs/benchmarks.md), "
       "so like XGBoost they are opt-in. At most 253 levels are kept per column."},
      {"cat_smooth",
       ParamType::kDouble,
       "10",
       0.0,
       1e12,
       {},
       {"gbdt"},
       "Hessian added to each category's statistics when ordering categories for a partition split (damps rare "
       "levels)."},
      {"cat_l2", ParamType::kDouble, "10", 0.0, 1e12, {}, {"gbdt"}, "Extra L2 penalty when scoring a partition split."},
      {"early_stopping_rounds",
       ParamType::kInt,
       "0",
       0,
       100000,
       {},
       {"gbdt"},
       "Stop when the validation metric has not improved for this many rounds and keep the trees up to the best "
       "round; 0: off. Validation rows are held out of the training split (validation_fraction)."},
      {"validation_fraction",
       ParamType::kDouble,
       "0.1",
       0.01,
       0.9,
       {},
       {"gbdt", "mlp"},
       "Share of the training rows held out, by seed, to judge early stopping."},
      {"hidden_units",
       ParamType::kChoice,
       "64,64",
       0,
       0,
       {},
       {"mlp"},
       "Units of each hidden layer, comma-separated (\"128,64\": two layers); \"none\" for no hidden layer."},
      {"activation",
       ParamType::kChoice,
       "relu",
       0,
       0,
       {"relu", "gelu", "gelu_tanh", "tanh"},
       {"mlp"},
       "Activation after each hidden layer (gelu: the exact erf form; gelu_tanh: its tanh approximation)."},
      {"layer_norm",
       ParamType::kChoice,
       "false",
       0,
       0,
       {"true", "false"},
       {"mlp"},
       "Layer normalization of each hidden layer's outputs, before its activation."},
      {"dropout",
       ParamType::kDouble,
       "0",
       0.0,
       0.9,
       {},
       {"mlp"},
       "Share of each hidden layer's outputs zeroed in training (the rest scaled by 1 / (1 - dropout))."},
      {"epochs", ParamType::kInt, "20", 1, 100000, {}, {"mlp"}, "Passes over the training rows."},
      {"batch_size", ParamType::kInt, "256", 1, 65536, {}, {"mlp"}, "Rows per optimizer step."},
      {"learning_rate",
       ParamType::kDouble,
       "0.001",
       1e-7,
       1.0,
       {},
       {"mlp"},
       "AdamW's peak step size, reached after the warm-up and decayed to zero along a cosine."},
      {"weight_decay",
       ParamType::kDouble,
       "0.01",
       0.0,
       1.0,
       {},
       {"mlp"},
       "AdamW's decoupled weight decay on the dense weights (not on biases or normalization)."},
      {"warmup_fraction",
       ParamType::kDouble,
       "0.05",
       0.0,
       0.5,
       {},
       {"mlp"},
       "Share of the optimizer steps over which the learning rate rises linearly from zero."},
      {"early_stopping_rounds",
       ParamType::kInt,
       "0",
       0,
       100000,
       {},
       {"mlp"},
       "Stop when the validation loss has not improved for this many epochs, keeping the best epoch's "
       "weights; 0 trains every epoch. Holds out validation_fraction of the training rows."},
      {"objective",
       ParamType::kChoice,
       "auto",
       0,
       0,
       {"auto", "binary:logistic", "multi:softmax", "reg:squarederror"},
       {"mlp"},
       "The loss: auto takes binary:logistic for two classes, multi:softmax for more than two text "
       "labels and reg:squarederror (on the standardized target) for numbers."},
      {"precision",
       ParamType::kChoice,
       "float32",
       0,
       0,
       {"float32", "bfloat16"},
       {"mlp"},
       "Compute precision of the matrix products: bfloat16 multiplies in bf16 (AVX-512 BF16) with float32 "
       "sums and float32 master weights; on a CPU without it training falls back to float32 and says so."},
  };
  // clang-format on
  return kDeclarations;
}

const ParamDeclaration* parameter_declaration(const std::string& family, const std::string& name) {
  for (const auto& declaration : parameter_declarations()) {
    if (declaration.name == name && applies_to(declaration, family)) return &declaration;
  }
  return nullptr;
}

Result<std::map<std::string, std::string>> resolve_parameters(const std::string& family,
                                                              const std::map<std::string, std::string>& given) {
  bool known_family = false;
  for (const auto& name : model_families()) known_family = known_family || name == family;
  if (!known_family) {
    return invalid_argument("unknown model '" + family + "'; expected one of " + join(model_families(), ", "));
  }
  std::map<std::string, std::string> resolved;
  for (const auto& declaration : parameter_declarations()) {
    if (applies_to(declaration, family)) resolved[declaration.name] = declaration.default_value;
  }
  for (const auto& [name, value] : given) {
    // A name may be declared once per family (learning_rate's default differs for gbdt and mlp).
    const ParamDeclaration* match = nullptr;
    for (const auto& declaration : parameter_declarations()) {
      if (declaration.name == name && (match == nullptr || applies_to(declaration, family))) match = &declaration;
    }
    if (match == nullptr) {
      std::vector<std::string> names;
      names.reserve(resolved.size());
      for (const auto& entry : resolved) names.push_back(entry.first);
      std::string message = "unknown parameter '" + name + "' for model '" + family + "'";
      if (auto suggestion = closest_name(name, names)) message += "; did you mean '" + *suggestion + "'?";
      return invalid_argument(message + " (known: " + join(names, ", ") + ")");
    }
    if (!applies_to(*match, family)) {
      return invalid_argument("parameter '" + name + "' does not apply to model '" + family + "'");
    }
    // positive_class declares no choices (it names a label, which only the data can check).
    SLIPWAY_RETURN_IF_ERROR(check_config_value("parameter", config_key(*match), value));
    resolved[name] = value;
  }
  return resolved;
}

std::string_view parameter_type_name(ParamType type) {
  switch (type) {
    case ParamType::kDouble:
      return "number";
    case ParamType::kInt:
      return "integer";
    case ParamType::kChoice:
      return "choice";
  }
  return "number";
}

std::string parameter_allowed_values(const ParamDeclaration& declaration) {
  if (declaration.type == ParamType::kChoice) {
    return declaration.choices.empty() ? "a class label" : join(declaration.choices, ", ");
  }
  char low[32];
  char high[32];
  auto low_end = std::to_chars(low, low + sizeof low, declaration.minimum).ptr;
  auto high_end = std::to_chars(high, high + sizeof high, declaration.maximum).ptr;
  return "[" + std::string(low, low_end) + ", " + std::string(high, high_end) + "]";
}

std::string parameters_markdown() {
  std::string out =
      "# Training parameters\n\n"
      "Generated by `slipway params --markdown` from the declarations in src/train/parameters.cpp; a test\n"
      "fails when this file and the code disagree. Pass them as `--param KEY=VALUE` or under `params:` in a spec.\n\n"
      "| parameter | models | type | default | allowed | description |\n|---|---|---|---|---|---|\n";
  for (const auto& declaration : parameter_declarations()) {
    out += "| `" + declaration.name + "` | " + join(declaration.families, ", ") + " | " +
           std::string(parameter_type_name(declaration.type)) + " | `" + declaration.default_value + "` | " +
           parameter_allowed_values(declaration) + " | " + declaration.description + " |\n";
  }
  return out;
}

namespace {

// The declaration of `name` for `family`, or for any family when `family` is empty.
const ParamDeclaration& declaration_named(std::string_view name, std::string_view family = {}) {
  for (const auto& declaration : parameter_declarations()) {
    if (declaration.name == name && (family.empty() || applies_to(declaration, std::string(family)))) {
      return declaration;
    }
  }
  std::abort();  // a binding of an undeclared parameter: a programmer's mistake
}

// Binds the declared parameter `name` to `member` (of `inner`).
template <typename Struct, typename Member>
ConfigField<Struct> bound(std::string_view name, Member Struct::*member) {
  return config_field(config_key(declaration_named(name)), member);
}
template <typename Struct, typename Inner, typename Member>
ConfigField<Struct> bound(std::string_view name, Inner Struct::*inner, Member Inner::*member) {
  return config_field(config_key(declaration_named(name)), inner, member);
}
template <typename Member>
ConfigField<MlpParams> mlp_bound(std::string_view name, Member MlpParams::*member) {
  return config_field(config_key(declaration_named(name, "mlp")), member);
}

}  // namespace

const ConfigSchema<LinearParams>& linear_params_schema() {
  using P = LinearParams;
  static const ConfigSchema<P> kSchema("parameter", {
                                                        bound("l2", &P::l2),
                                                        bound("max_iterations", &P::max_iterations),
                                                        bound("tolerance", &P::tolerance),
                                                        bound("lbfgs_history", &P::lbfgs_history),
                                                        bound("categorical_encoding", &P::categorical_encoding),
                                                        bound("max_categories", &P::max_categories),
                                                        bound("standardize", &P::standardize),
                                                        bound("positive_class", &P::positive_class),
                                                    });
  return kSchema;
}

const ConfigSchema<GbdtParams>& gbdt_params_schema() {
  using P = GbdtParams;
  static const ConfigSchema<P> kSchema(
      "parameter", {
                       bound("max_categories", &P::max_categories),
                       bound("positive_class", &P::positive_class),
                       bound("objective", &P::objective),
                       bound("eval_metric", &P::eval_metric),
                       bound("rounds", &P::tree, &GbdtOptions::rounds),
                       bound("learning_rate", &P::tree, &GbdtOptions::learning_rate),
                       bound("grow_policy", &P::tree, &GbdtOptions::grow_policy),
                       bound("max_depth", &P::tree, &GbdtOptions::max_depth),
                       bound("max_leaves", &P::tree, &GbdtOptions::max_leaves),
                       bound("lambda", &P::tree, &GbdtOptions::lambda),
                       bound("alpha", &P::tree, &GbdtOptions::alpha),
                       bound("gamma", &P::tree, &GbdtOptions::gamma),
                       bound("min_child_weight", &P::tree, &GbdtOptions::min_child_weight),
                       bound("subsample", &P::tree, &GbdtOptions::subsample),
                       bound("colsample_bytree", &P::tree, &GbdtOptions::colsample_bytree),
                       bound("huber_slope", &P::tree, &GbdtOptions::huber_slope),
                       bound("max_bin", &P::tree, &GbdtOptions::max_bin),
                       bound("categorical_splits", &P::categorical_splits),
                       bound("cat_smooth", &P::tree, &GbdtOptions::cat_smooth),
                       bound("cat_l2", &P::tree, &GbdtOptions::cat_l2),
                       bound("early_stopping_rounds", &P::tree, &GbdtOptions::early_stopping_rounds),
                       bound("validation_fraction", &P::validation_fraction),
                   });
  return kSchema;
}

const ConfigSchema<MlpParams>& mlp_params_schema() {
  using P = MlpParams;
  static const ConfigSchema<P> kSchema("parameter", {
                                                        mlp_bound("max_categories", &P::max_categories),
                                                        mlp_bound("positive_class", &P::positive_class),
                                                        mlp_bound("validation_fraction", &P::validation_fraction),
                                                        mlp_bound("hidden_units", &P::hidden_units),
                                                        mlp_bound("activation", &P::activation),
                                                        mlp_bound("layer_norm", &P::layer_norm),
                                                        mlp_bound("dropout", &P::dropout),
                                                        mlp_bound("epochs", &P::epochs),
                                                        mlp_bound("batch_size", &P::batch_size),
                                                        mlp_bound("learning_rate", &P::learning_rate),
                                                        mlp_bound("weight_decay", &P::weight_decay),
                                                        mlp_bound("warmup_fraction", &P::warmup_fraction),
                                                        mlp_bound("early_stopping_rounds", &P::early_stopping),
                                                        mlp_bound("objective", &P::objective),
                                                        mlp_bound("precision", &P::precision),
                                                    });
  return kSchema;
}

Result<LinearParams> linear_params(const std::map<std::string, std::string>& resolved) {
  LinearParams params = linear_params_schema().defaults();
  SLIPWAY_RETURN_IF_ERROR(linear_params_schema().apply(params, resolved));
  return params;
}

Result<GbdtParams> gbdt_params(const std::map<std::string, std::string>& resolved) {
  GbdtParams params = gbdt_params_schema().defaults();
  SLIPWAY_RETURN_IF_ERROR(gbdt_params_schema().apply(params, resolved));
  return params;
}

Result<MlpParams> mlp_params(const std::map<std::string, std::string>& resolved) {
  MlpParams params = mlp_params_schema().defaults();
  SLIPWAY_RETURN_IF_ERROR(mlp_params_schema().apply(params, resolved));
  SLIPWAY_ASSIGN_OR_RETURN(params.hidden, parse_hidden_units(params.hidden_units));
  return params;
}

Result<std::vector<std::size_t>> parse_hidden_units(const std::string& text) {
  constexpr std::size_t kMaxHiddenLayers = 32;
  constexpr std::size_t kMaxUnits = 16384;
  std::vector<std::size_t> units;
  if (text == "none") return units;
  std::size_t position = 0;
  while (position <= text.size()) {
    std::size_t end = std::min(text.find(',', position), text.size());
    std::string item = text.substr(position, end - position);
    std::size_t value = 0;
    auto [next, error] = std::from_chars(item.data(), item.data() + item.size(), value);
    if (item.empty() || error != std::errc() || next != item.data() + item.size() || value == 0 || value > kMaxUnits) {
      return invalid_argument("hidden_units must be comma-separated layer widths from 1 to " +
                              std::to_string(kMaxUnits) + " (e.g. 128,64) or none, not '" + text + "'");
    }
    units.push_back(value);
    if (units.size() > kMaxHiddenLayers) {
      return invalid_argument("hidden_units names more than " + std::to_string(kMaxHiddenLayers) + " layers");
    }
    position = end + 1;
  }
  return units;
}

}  // namespace slipway::train
