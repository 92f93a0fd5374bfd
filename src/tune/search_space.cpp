// Search spaces: the YAML form, the default space per family, and the checks against the
// training parameters' declarations.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <span>
#include <sstream>

#include <fmt/format.h>

#include "slipway/train.h"
#include "slipway/tune.h"

namespace slipway::tune {
namespace {

std::vector<std::string> parameter_names(const std::string& family) {
  std::vector<std::string> names;
  for (const auto& declaration : train::parameter_declarations()) {
    if (std::find(declaration.families.begin(), declaration.families.end(), family) != declaration.families.end()) {
      names.push_back(declaration.name);
    }
  }
  return names;
}

std::string_view kind_name(ParamKind kind) {
  switch (kind) {
    case ParamKind::kFloat:
      return "float";
    case ParamKind::kInt:
      return "int";
    case ParamKind::kCategorical:
      return "categorical";
  }
  return "float";
}

Status check_range(const std::string& family, const ParamRange& param, std::span<const ParamRange> earlier) {
  auto refuse = [&](const std::string& why) {
    return invalid_argument(fmt::format("search space: parameter '{}' {}", param.name, why));
  };
  const train::ParamDeclaration* declaration = train::parameter_declaration(family, param.name);
  if (declaration == nullptr) {
    auto names = parameter_names(family);
    std::string message = fmt::format("search space: unknown parameter '{}' for model '{}'", param.name, family);
    if (auto suggestion = closest_name(param.name, names)) message += fmt::format("; did you mean '{}'?", *suggestion);
    return invalid_argument(message + " (known: " + join(names, ", ") + ")");
  }
  if (param.name == "positive_class" || param.name == "objective" || param.name == "eval_metric") {
    return refuse("says what is learned or measured, not how well: it is not tuned");
  }
  switch (declaration->type) {
    case train::ParamType::kChoice:
      if (param.kind != ParamKind::kCategorical) return refuse("is a choice: give it type categorical and choices");
      break;
    case train::ParamType::kInt:
      if (param.kind == ParamKind::kCategorical) return refuse("is an integer: give it type int with low and high");
      if (param.kind == ParamKind::kFloat) return refuse("is an integer: give it type int, not float");
      break;
    case train::ParamType::kDouble:
      if (param.kind != ParamKind::kFloat) return refuse("is a number: give it type float with low and high");
      break;
  }
  if (param.kind == ParamKind::kCategorical) {
    if (param.choices.empty()) return refuse("has no choices");
    for (std::size_t i = 0; i < param.choices.size(); ++i) {
      const auto& choice = param.choices[i];
      if (std::find(declaration->choices.begin(), declaration->choices.end(), choice) == declaration->choices.end()) {
        return refuse(fmt::format("has no choice '{}' (it takes {})", choice, join(declaration->choices, ", ")));
      }
      if (std::find(param.choices.begin(), param.choices.begin() + static_cast<std::ptrdiff_t>(i), choice) !=
          param.choices.begin() + static_cast<std::ptrdiff_t>(i)) {
        return refuse(fmt::format("lists the choice '{}' twice", choice));
      }
    }
  } else {
    if (!std::isfinite(param.low) || !std::isfinite(param.high)) return refuse("needs finite low and high");
    if (param.low >= param.high) {
      return refuse(fmt::format("has an empty or inverted range: low {} must be below high {}",
                                format_config_number(param.low), format_config_number(param.high)));
    }
    if (param.kind == ParamKind::kInt && (param.low != std::floor(param.low) || param.high != std::floor(param.high))) {
      return refuse("is an integer: low and high must be whole numbers");
    }
    if (param.low < declaration->minimum || param.high > declaration->maximum) {
      return refuse(fmt::format("ranges over [{}, {}], outside what it accepts, [{}, {}]",
                                format_config_number(param.low), format_config_number(param.high),
                                format_config_number(declaration->minimum),
                                format_config_number(declaration->maximum)));
    }
    if (param.log && param.low <= 0) return refuse("is log-scaled: its range must lie above zero");
  }
  if (!param.parent.empty()) {
    auto parent =
        std::find_if(earlier.begin(), earlier.end(), [&](const ParamRange& p) { return p.name == param.parent; });
    if (parent == earlier.end()) {
      return refuse(fmt::format("depends on '{}', which is not a parameter listed before it", param.parent));
    }
    if (parent->kind != ParamKind::kCategorical) {
      return refuse(fmt::format("depends on '{}', which is not categorical", param.parent));
    }
    if (param.parent_values.empty())
      return refuse(fmt::format("depends on '{}' but names none of its choices", param.parent));
    for (const auto& value : param.parent_values) {
      if (std::find(parent->choices.begin(), parent->choices.end(), value) == parent->choices.end()) {
        return refuse(fmt::format("depends on '{}' being '{}', which is not one of its choices ({})", param.parent,
                                  value, join(parent->choices, ", ")));
      }
    }
  }
  return {};
}

ParamRange number_range(std::string name, ParamKind kind, double low, double high, bool log) {
  ParamRange range;
  range.name = std::move(name);
  range.kind = kind;
  range.low = low;
  range.high = high;
  range.log = log;
  return range;
}

Result<ParamRange> read_range(const std::string& name, const YAML::Node& node, std::string_view source) {
  auto refuse = [&](const std::string& why) {
    return invalid_argument(
        fmt::format("{}:{}: parameter '{}' {}", source, node.Mark().line + 1, name.substr(0, 128), why));
  };
  if (!node.IsMap()) return refuse("must be a mapping: {type: float|int|categorical, ...}");
  static const std::vector<std::string> kKeys = {"type", "low", "high", "log", "choices", "when"};
  ParamRange range;
  range.name = name;
  try {
    for (const auto& entry : node) {
      auto key = entry.first.as<std::string>();
      if (std::find(kKeys.begin(), kKeys.end(), key) == kKeys.end()) {
        std::string message = fmt::format("has an unknown key '{}'", key.substr(0, 64));
        if (auto suggestion = closest_name(key, kKeys)) message += fmt::format("; did you mean '{}'?", *suggestion);
        return refuse(message + " (keys: " + join(kKeys, ", ") + ")");
      }
    }
    if (!node["type"]) return refuse("needs a type: float, int or categorical");
    auto type = node["type"].as<std::string>();
    if (type == "float") {
      range.kind = ParamKind::kFloat;
    } else if (type == "int") {
      range.kind = ParamKind::kInt;
    } else if (type == "categorical") {
      range.kind = ParamKind::kCategorical;
    } else {
      return refuse(fmt::format("has type '{}'; expected float, int or categorical", type.substr(0, 64)));
    }
    if (range.kind == ParamKind::kCategorical) {
      if (node["low"] || node["high"] || node["log"])
        return refuse("is categorical: it takes choices, not low/high/log");
      if (!node["choices"] || !node["choices"].IsSequence()) return refuse("needs choices: a list");
      for (const auto& choice : node["choices"]) range.choices.push_back(choice.as<std::string>());
    } else {
      if (node["choices"]) return refuse(fmt::format("is {}: it takes low and high, not choices", type));
      if (!node["low"] || !node["high"]) return refuse("needs low and high");
      range.low = node["low"].as<double>();
      range.high = node["high"].as<double>();
      if (node["log"]) range.log = node["log"].as<bool>();
    }
    if (node["when"]) {
      YAML::Node when = node["when"];
      if (!when.IsMap() || when.size() != 1) return refuse("has a when that is not one {PARAMETER: [CHOICES]}");
      // Copies: an iterator's pair is a temporary, which a range-for over its member would outlive.
      YAML::Node parent = when.begin()->first;
      YAML::Node values = when.begin()->second;
      range.parent = parent.as<std::string>();
      if (values.IsSequence()) {
        for (const auto& value : values) range.parent_values.push_back(value.as<std::string>());
      } else {
        range.parent_values.push_back(values.as<std::string>());
      }
    }
  } catch (const YAML::Exception& error) {
    return refuse(fmt::format("has a value of the wrong kind ({})", error.msg));
  }
  return range;
}

}  // namespace

Status check_search_space(const SearchSpace& space) {
  const auto& families = train::model_families();
  if (std::find(families.begin(), families.end(), space.family) == families.end()) {
    return invalid_argument(fmt::format("search space: unknown model '{}'; expected one of {}", space.family,
                                        join(train::model_families(), ", ")));
  }
  if (space.params.empty()) return invalid_argument("search space: no parameters to tune");
  for (std::size_t i = 0; i < space.params.size(); ++i) {
    const auto& param = space.params[i];
    std::span<const ParamRange> earlier(space.params.data(), i);
    for (const auto& before : earlier) {
      if (before.name == param.name) {
        return invalid_argument(fmt::format("search space: parameter '{}' is listed twice", param.name));
      }
    }
    SLIPWAY_RETURN_IF_ERROR(check_range(space.family, param, earlier));
  }
  return {};
}

Result<SearchSpace> parse_search_space(std::string_view yaml, std::string_view source, const std::string& family) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml));
  } catch (const YAML::Exception& error) {
    return invalid_argument(fmt::format("{}:{}: not YAML: {}", source, error.mark.line + 1, error.msg));
  }
  if (!root.IsMap()) return invalid_argument(fmt::format("{}: a search space is a mapping with params:", source));
  SearchSpace space;
  space.family = family;
  try {
    for (const auto& entry : root) {
      auto key = entry.first.as<std::string>();
      if (key != "family" && key != "params") {
        return invalid_argument(fmt::format("{}:{}: unknown key '{}' (keys: family, params)", source,
                                            entry.first.Mark().line + 1, key.substr(0, 64)));
      }
    }
    if (root["family"]) {
      auto named = root["family"].as<std::string>();
      if (!family.empty() && named != family) {
        return invalid_argument(
            fmt::format("{}: the space is for model '{}', not '{}'", source, named.substr(0, 64), family));
      }
      space.family = named;
    }
    if (!root["params"] || !root["params"].IsMap()) {
      return invalid_argument(fmt::format("{}: params: must map each parameter to its range", source));
    }
    for (const auto& entry : root["params"]) {
      SLIPWAY_ASSIGN_OR_RETURN(auto range, read_range(entry.first.as<std::string>(), entry.second, source));
      space.params.push_back(std::move(range));
    }
  } catch (const YAML::Exception& error) {
    return invalid_argument(fmt::format("{}:{}: {}", source, error.mark.line + 1, error.msg));
  }
  if (space.family.empty()) return invalid_argument(fmt::format("{}: name the model family (family: gbdt)", source));
  auto checked = check_search_space(space);
  if (!checked.ok()) return invalid_argument(fmt::format("{}: {}", source, checked.message()));
  return space;
}

Result<SearchSpace> load_search_space(const std::string& path, const std::string& family) {
  std::ifstream in(path);
  if (!in) return not_found("cannot read search space '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return parse_search_space(text.str(), path, family);
}

std::string search_space_yaml(const SearchSpace& space) {
  std::string yaml = fmt::format("family: {}\nparams:\n", space.family);
  for (const auto& param : space.params) {
    yaml += fmt::format("  {}: {{type: {}", param.name, kind_name(param.kind));
    if (param.kind == ParamKind::kCategorical) {
      yaml += fmt::format(", choices: [{}]", join(param.choices, ", "));
    } else {
      yaml += fmt::format(", low: {}, high: {}", format_config_number(param.low), format_config_number(param.high));
      if (param.log) yaml += ", log: true";
    }
    if (!param.parent.empty())
      yaml += fmt::format(", when: {{{}: [{}]}}", param.parent, join(param.parent_values, ", "));
    yaml += "}\n";
  }
  return yaml;
}

Result<SearchSpace> narrow_search_space(const SearchSpace& space, const std::vector<Trial>& trials, Direction direction,
                                        double top_fraction) {
  if (!(top_fraction > 0 && top_fraction <= 1)) {
    return invalid_argument(
        fmt::format("the share of trials to narrow to must be in (0, 1], not {}", format_config_number(top_fraction)));
  }
  std::vector<const Trial*> completed;
  for (const auto& trial : trials) {
    if (trial.state == TrialState::kComplete && std::isfinite(trial.value)) completed.push_back(&trial);
  }
  if (completed.empty()) return invalid_argument("the study has no completed trial to narrow the space to");
  std::stable_sort(completed.begin(), completed.end(), [&](const Trial* a, const Trial* b) {
    return direction == Direction::kMinimize ? a->value < b->value : a->value > b->value;
  });
  auto keep = static_cast<std::size_t>(std::ceil(top_fraction * static_cast<double>(completed.size())));
  completed.resize(std::max<std::size_t>(keep, 1));

  SearchSpace narrowed;
  narrowed.family = space.family;
  for (const auto& param : space.params) {
    ParamRange range = param;
    if (!range.parent.empty()) {
      auto parent = std::find_if(narrowed.params.begin(), narrowed.params.end(),
                                 [&](const ParamRange& p) { return p.name == range.parent; });
      if (parent == narrowed.params.end()) continue;  // its parent was dropped
      std::vector<std::string> still;
      for (const auto& value : range.parent_values) {
        if (std::find(parent->choices.begin(), parent->choices.end(), value) != parent->choices.end()) {
          still.push_back(value);
        }
      }
      if (still.empty()) continue;  // never active any more
      range.parent_values = std::move(still);
    }
    if (range.kind == ParamKind::kCategorical) {
      std::vector<std::string> taken;
      for (const auto& choice : range.choices) {
        bool used = std::any_of(completed.begin(), completed.end(), [&](const Trial* trial) {
          auto value = trial->params.find(range.name);
          return value != trial->params.end() && value->second == choice;
        });
        if (used) taken.push_back(choice);
      }
      if (!taken.empty()) range.choices = std::move(taken);
      narrowed.params.push_back(std::move(range));
      continue;
    }
    auto internal = [&](double value) { return range.log ? std::log(value) : value; };
    double low = std::numeric_limits<double>::infinity();
    double high = -std::numeric_limits<double>::infinity();
    for (const auto* trial : completed) {
      auto value = trial->params.find(range.name);
      if (value == trial->params.end()) continue;
      auto number = parse_finite_number(value->second);
      if (!number || *number < param.low || *number > param.high) continue;
      low = std::min(low, internal(*number));
      high = std::max(high, internal(*number));
    }
    if (low <= high) {
      double margin = std::max(0.1 * (high - low), 0.05 * (internal(param.high) - internal(param.low)));
      auto external = [&](double value) { return range.log ? std::exp(value) : value; };
      range.low = std::max(param.low, external(low - margin));
      range.high = std::min(param.high, external(high + margin));
      if (range.kind == ParamKind::kInt) {
        range.low = std::floor(range.low);
        range.high = std::ceil(range.high);
        if (range.low == range.high) {
          if (range.high < param.high) {
            range.high += 1;
          } else {
            range.low -= 1;
          }
        }
      }
    }
    narrowed.params.push_back(std::move(range));
  }
  SLIPWAY_RETURN_IF_ERROR(check_search_space(narrowed));
  return narrowed;
}

Result<SearchSpace> default_search_space(const std::string& family) {
  // Ranges where the usual good settings lie (the declarations allow far more): XGBoost's and
  // LightGBM's tuning guides for trees, the usual AdamW ranges for MLPs.
  SearchSpace space;
  space.family = family;
  auto& params = space.params;
  if (family == "gbdt") {
    params.push_back(number_range("learning_rate", ParamKind::kFloat, 0.01, 0.3, true));
    params.push_back(number_range("max_depth", ParamKind::kInt, 2, 10, false));
    params.push_back(number_range("min_child_weight", ParamKind::kFloat, 0.1, 20, true));
    params.push_back(number_range("subsample", ParamKind::kFloat, 0.5, 1, false));
    params.push_back(number_range("colsample_bytree", ParamKind::kFloat, 0.5, 1, false));
    params.push_back(number_range("lambda", ParamKind::kFloat, 0.01, 10, true));
    params.push_back(number_range("alpha", ParamKind::kFloat, 1e-3, 1, true));
  } else if (family == "mlp") {
    params.push_back(number_range("learning_rate", ParamKind::kFloat, 1e-4, 1e-2, true));
    params.push_back(number_range("weight_decay", ParamKind::kFloat, 1e-5, 0.1, true));
    params.push_back(number_range("dropout", ParamKind::kFloat, 0, 0.5, false));
    params.push_back(number_range("batch_size", ParamKind::kInt, 32, 512, true));
  } else if (family == "logistic" || family == "linear") {
    params.push_back(number_range("l2", ParamKind::kFloat, 1e-4, 100, true));
  } else {
    return not_found(fmt::format("no default search space for model '{}'; expected one of {}", family.substr(0, 64),
                                 join(train::model_families(), ", ")));
  }
  SLIPWAY_RETURN_IF_ERROR(check_search_space(space));
  return space;
}

}  // namespace slipway::tune
