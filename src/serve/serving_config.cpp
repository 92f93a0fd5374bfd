// Serving configuration: the key/value form stored in the registry and written in --config files.
#include <yaml-cpp/yaml.h>

#include "slipway/serve.h"

namespace slipway::serve {
namespace {

constexpr double kMaxRows = 1 << 20;
constexpr double kMaxMicroseconds = 3600.0 * 1'000'000;

// Every serving config key, declared once: its parsing, validation, `serve` and
// `serving-config` flags, `serving-config --keys` and docs/serving-config.md come from here.
// Defaults are ModelServingConfig's.
const ConfigSchema<ModelServingConfig>& schema() {
  using C = ModelServingConfig;
  using B = BatchingConfig;
  constexpr auto kInt = ConfigType::kInt;
  static const ConfigSchema<C> kSchema(
      "serving config",
      {
          config_field({"max_batch_size",
                        kInt,
                        "",
                        0,
                        kMaxRows,
                        {},
                        "Dynamic batching: most rows per model call (0 or 1: no batching)"},
                       &C::batching, &B::max_batch_size),
          config_field(
              {"max_queue_delay_us",
               kInt,
               "",
               0,
               kMaxMicroseconds,
               {},
               "Dynamic batching: longest the oldest queued request waits for its batch to fill (microseconds)"},
              &C::batching, &B::max_queue_delay),
          config_field({"preferred_batch_sizes",
                        ConfigType::kIntList,
                        "",
                        1,
                        kMaxRows,
                        {},
                        "Dynamic batching: batch sizes to cut at, no larger than max_batch_size"},
                       &C::batching, &B::preferred_batch_sizes),
          config_field({"max_queue_size",
                        kInt,
                        "",
                        0,
                        kMaxRows,
                        {},
                        "Dynamic batching: queued requests per model version before 429 (0: unbounded)"},
                       &C::batching, &B::max_queue_size),
          config_field({"default_timeout_us",
                        kInt,
                        "",
                        0,
                        kMaxMicroseconds,
                        {},
                        "Dynamic batching: queue timeout of requests without parameters.timeout (microseconds; 0: "
                        "none)"},
                       &C::batching, &B::default_timeout),
          config_field({"priority_levels", kInt, "", 1, 64, {}, "Dynamic batching: priority levels"}, &C::batching,
                       &B::priority_levels),
          config_field({"default_priority",
                        kInt,
                        "",
                        1,
                        64,
                        {},
                        "Dynamic batching: priority of requests that give none (at most priority_levels)"},
                       &C::batching, &B::default_priority),
          config_field(
              {"instances", kInt, "", 1, 64, {}, "Dynamic batching: batches run in parallel per model version"},
              &C::batching, &B::instances),
          config_field(
              {"cache", ConfigType::kBool, "", 0, 0, {}, "Answer byte-identical JSON requests from the response cache"},
              &C::cache),
          config_field(
              {"idle_unload_s",
               kInt,
               "",
               0,
               365.0 * 24 * 3600,
               {},
               "Unload the model after this many seconds without a request (0: never); it loads again on the next one"},
              &C::idle_unload),
          config_field({"warmup_requests",
                        kInt,
                        "",
                        0,
                        10'000,
                        {},
                        "Single-row predictions run when a version loads, before it takes requests"},
                       &C::warmup_requests),
          config_field({"request_log_rate",
                        ConfigType::kNumber,
                        "",
                        0,
                        1,
                        {},
                        "Share of JSON infer requests written, with their answers, to the request log (0: none)"},
                       &C::request_log_rate),
      });
  return kSchema;
}

// What the keys alone cannot say: how they relate.
Status validate(const ModelServingConfig& config) {
  const BatchingConfig& batching = config.batching;
  if (batching.default_priority > batching.priority_levels) {
    return invalid_argument("serving config default_priority (" + std::to_string(batching.default_priority) +
                            ") must not exceed priority_levels (" + std::to_string(batching.priority_levels) + ")");
  }
  for (std::size_t size : batching.preferred_batch_sizes) {
    if (batching.max_batch_size > 1 && size > batching.max_batch_size) {
      return invalid_argument("serving config preferred batch size " + std::to_string(size) +
                              " is larger than max_batch_size " + std::to_string(batching.max_batch_size));
    }
  }
  return {};
}

}  // namespace

const std::vector<ConfigKey>& serving_config_declarations() {
  static const std::vector<ConfigKey> kKeys = schema().keys();
  return kKeys;
}

const std::vector<std::string>& serving_config_keys() {
  static const std::vector<std::string> kNames = schema().names();
  return kNames;
}

Result<ModelServingConfig> apply_serving_config(ModelServingConfig config,
                                                const std::map<std::string, std::string>& values) {
  SLIPWAY_RETURN_IF_ERROR(schema().apply(config, values));
  SLIPWAY_RETURN_IF_ERROR(validate(config));
  return config;
}

std::map<std::string, std::string> serving_config_values(const ModelServingConfig& config) {
  return schema().values(config);
}

std::string serving_config_markdown() {
  return "# Serving configuration\n\n"
         "Generated by `slipway serving-config --keys --markdown` from the declarations in\n"
         "src/serve/serving_config.cpp; a test fails when this file and the code disagree. Set them per model with\n"
         "`slipway serving-config NAME --KEY VALUE` (stored in the registry), for every model with\n"
         "`slipway serve --KEY VALUE`, or in the `serve --config` YAML file (see docs/api.md).\n\n" +
         schema().markdown_table();
}

namespace {

// One section of the file: a mapping of keys to scalars (lists become comma-separated).
Result<std::map<std::string, std::string>> read_section(const YAML::Node& node, const std::string& where) {
  if (!node.IsMap()) return invalid_argument(where + " must be a mapping of serving config keys to values");
  std::map<std::string, std::string> values;
  for (const auto& entry : node) {
    auto key = entry.first.as<std::string>();
    const YAML::Node& value = entry.second;
    if (value.IsSequence()) {
      std::string joined;
      for (const auto& item : value) joined += (joined.empty() ? "" : ",") + item.as<std::string>();
      values[key] = joined;
    } else if (value.IsScalar()) {
      values[key] = value.as<std::string>();
    } else {
      return invalid_argument(where + "." + key + " must be a value or a list of values");
    }
  }
  auto checked = apply_serving_config({}, values);
  if (!checked.ok()) return invalid_argument(where + ": " + checked.status().message());
  return values;
}

}  // namespace

Result<ServingConfigFile> read_serving_config_file(const std::string& path) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return not_found("cannot read serving config file '" + path + "'");
  } catch (const YAML::Exception& error) {
    return invalid_argument(path + ": " + error.what());
  }
  ServingConfigFile file;
  if (root.IsNull()) return file;
  if (!root.IsMap()) return invalid_argument(path + " must be a YAML mapping with 'defaults' and/or 'models'");
  try {
    for (const auto& entry : root) {
      auto key = entry.first.as<std::string>();
      if (key == "defaults") {
        SLIPWAY_ASSIGN_OR_RETURN(file.defaults, read_section(entry.second, path + ": defaults"));
      } else if (key == "models") {
        if (!entry.second.IsMap()) return invalid_argument(path + ": 'models' must map model names to configs");
        for (const auto& model : entry.second) {
          auto name = model.first.as<std::string>();
          Status valid_name = registry::validate_model_name(name);
          if (!valid_name.ok()) return invalid_argument(path + ": " + valid_name.message());
          SLIPWAY_ASSIGN_OR_RETURN(file.models[name], read_section(model.second, path + ": models." + name));
        }
      } else {
        return invalid_argument(path + ":" + std::to_string(entry.first.Mark().line + 1) + ": unknown key '" + key +
                                "'; use 'defaults' and 'models'");
      }
    }
  } catch (const YAML::Exception& error) {
    return invalid_argument(path + ": " + error.what());
  }
  return file;
}

}  // namespace slipway::serve
