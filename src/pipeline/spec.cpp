// The YAML training spec: reading one (a file or a run's stored text) and writing the resolved one.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>

#include "slipway/pipeline.h"

namespace slipway::pipeline {
namespace {

std::string relative_to(const std::string& base_folder, const std::string& path) {
  if (path.empty() || std::filesystem::path(path).is_absolute()) return path;
  return (std::filesystem::path(base_folder) / path).lexically_normal().string();
}

}  // namespace

Result<std::map<std::string, std::string>> parse_key_values(const std::vector<std::string>& pairs) {
  std::map<std::string, std::string> values;
  for (const auto& pair : pairs) {
    auto equals = pair.find('=');
    if (equals == std::string::npos || equals == 0) {
      return invalid_argument("parameter '" + pair + "' must be written KEY=VALUE");
    }
    values[pair.substr(0, equals)] = pair.substr(equals + 1);
  }
  return values;
}

namespace {

std::string expected_type(const std::string& key) {
  if (key == "seed") return "a whole number from 0 to 2^64-1";
  if (key == "threads" || key == "checkpoint_every") return "a whole number";
  if (key == "test_fraction" || key == "threshold_fraction") return "a number";
  if (key == "ignore") return "a list of column names";
  if (key == "params") return "a mapping of names to values";
  return "text";
}

Status read_spec(const YAML::Node& spec, const std::string& path, const std::string& folder, TrainSpec& options) {
  static const std::vector<std::string> kKnownKeys = {"data",       "test",
                                                      "target",     "model",
                                                      "split",      "test_fraction",
                                                      "slice",      "seed",
                                                      "params",     "ignore",
                                                      "register",   "experiment",
                                                      "threads",    "weight",
                                                      "init_model", "checkpoint_every",
                                                      "threshold",  "threshold_fraction"};
  if (!spec.IsMap()) return invalid_argument("spec '" + path + "' must be a YAML mapping of keys to values");
  std::string reading;  // the key being converted, for the error
  auto has = [&](const char* key) {
    reading = key;
    return static_cast<bool>(spec[key]);
  };
  try {
    for (const auto& entry : spec) {
      auto key = entry.first.as<std::string>();
      if (std::find(kKnownKeys.begin(), kKnownKeys.end(), key) == kKnownKeys.end()) {
        std::string where = path + ":" + std::to_string(entry.first.Mark().line + 1);
        return invalid_argument(where.append(": unknown key '").append(key).append("'"));
      }
    }
    if (has("data")) options.data = relative_to(folder, spec["data"].as<std::string>());
    if (has("test")) options.test_data = relative_to(folder, spec["test"].as<std::string>());
    if (has("target")) options.target = spec["target"].as<std::string>();
    if (has("model")) options.model = spec["model"].as<std::string>();
    if (has("split")) options.split = spec["split"].as<std::string>();
    if (has("test_fraction")) options.test_fraction = spec["test_fraction"].as<double>();
    if (has("slice")) options.slice = spec["slice"].as<std::string>();
    if (has("seed")) options.seed = spec["seed"].as<std::uint64_t>();
    if (has("register")) options.register_as = spec["register"].as<std::string>();
    if (has("experiment")) options.experiment = spec["experiment"].as<std::string>();
    if (has("threads")) options.threads = spec["threads"].as<int>();
    if (has("ignore")) options.ignore = spec["ignore"].as<std::vector<std::string>>();
    if (has("weight")) options.weight_column = spec["weight"].as<std::string>();
    if (has("init_model")) options.init_model = spec["init_model"].as<std::string>();
    if (has("checkpoint_every")) options.checkpoint_every = spec["checkpoint_every"].as<int>();
    if (has("threshold")) options.threshold = spec["threshold"].as<std::string>();
    if (has("threshold_fraction")) options.threshold_fraction = spec["threshold_fraction"].as<double>();
    if (has("params")) {
      if (!spec["params"].IsMap()) return invalid_argument(path + ": 'params' must be a mapping of names to values");
      for (const auto& param : spec["params"]) {
        options.params.push_back(param.first.as<std::string>() + "=" + param.second.as<std::string>());
      }
    }
  } catch (const YAML::Exception& error) {
    // yaml-cpp says "bad conversion" without the key: the key being read says which.
    std::string where = path + ":" + std::to_string(error.mark.line + 1) + ": ";
    if (reading.empty()) return invalid_argument(where + error.msg);
    return invalid_argument(where + "'" + reading + "' must be " + expected_type(reading) + " (" + error.msg + ")");
  }
  return {};
}

}  // namespace

Status load_spec(const std::string& path, TrainSpec& options) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return std::filesystem::exists(path, error) ? invalid_argument("spec '" + path + "' is not a file")
                                                : not_found("no spec file '" + path + "'");
  }
  YAML::Node spec;
  try {
    spec = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return io_error("cannot read spec '" + path + "'");
  } catch (const YAML::Exception& error) {
    return invalid_argument(path + ":" + std::to_string(error.mark.line + 1) + ":" +
                            std::to_string(error.mark.column + 1) + ": " + error.msg);
  }
  return read_spec(spec, path, std::filesystem::path(path).parent_path().string(), options);
}

Status load_spec_text(const std::string& yaml, const std::string& source, TrainSpec& options) {
  YAML::Node spec;
  try {
    spec = YAML::Load(yaml);
  } catch (const YAML::Exception& error) {
    return invalid_argument(source + ":" + std::to_string(error.mark.line + 1) + ": " + error.msg);
  }
  return read_spec(spec, source, "", options);
}

std::string spec_yaml(const TrainSpec& options) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  auto absolute = [](const std::string& path) {
    return path.empty() ? path : std::filesystem::absolute(path).lexically_normal().string();
  };
  out << YAML::Key << "data" << YAML::Value << absolute(options.data);
  if (!options.test_data.empty()) out << YAML::Key << "test" << YAML::Value << absolute(options.test_data);
  out << YAML::Key << "target" << YAML::Value << options.target;
  out << YAML::Key << "model" << YAML::Value << options.model;
  if (options.test_data.empty()) {
    out << YAML::Key << "split" << YAML::Value << options.split;
    out << YAML::Key << "test_fraction" << YAML::Value << options.test_fraction;
  }
  if (!options.slice.empty()) out << YAML::Key << "slice" << YAML::Value << options.slice;
  out << YAML::Key << "seed" << YAML::Value << options.seed;
  if (!options.ignore.empty()) out << YAML::Key << "ignore" << YAML::Value << YAML::Flow << options.ignore;
  auto params = parse_key_values(options.params);
  if (params.ok() && !params->empty()) {
    out << YAML::Key << "params" << YAML::Value << YAML::BeginMap;
    for (const auto& [key, value] : *params) out << YAML::Key << key << YAML::Value << value;
    out << YAML::EndMap;
  }
  if (!options.weight_column.empty()) out << YAML::Key << "weight" << YAML::Value << options.weight_column;
  if (!options.init_model.empty()) out << YAML::Key << "init_model" << YAML::Value << options.init_model;
  if (options.checkpoint_every > 0) out << YAML::Key << "checkpoint_every" << YAML::Value << options.checkpoint_every;
  if (!options.threshold.empty()) {
    out << YAML::Key << "threshold" << YAML::Value << YAML::DoubleQuoted << options.threshold;
    out << YAML::Key << "threshold_fraction" << YAML::Value << options.threshold_fraction;
  }
  if (!options.register_as.empty()) out << YAML::Key << "register" << YAML::Value << options.register_as;
  out << YAML::Key << "experiment" << YAML::Value << options.experiment;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace slipway::pipeline
