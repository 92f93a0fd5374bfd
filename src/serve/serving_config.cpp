// Serving configuration: the key/value form stored in the registry and written in --config files.
#include <yaml-cpp/yaml.h>

#include <charconv>

#include "slipway/serve.h"

namespace slipway::serve {
namespace {

Result<std::int64_t> integer_value(const std::string& key, const std::string& text, std::int64_t low,
                                   std::int64_t high) {
  std::int64_t number = 0;
  auto parsed = std::from_chars(text.data(), text.data() + text.size(), number);
  if (parsed.ec != std::errc() || parsed.ptr != text.data() + text.size() || number < low || number > high) {
    return invalid_argument("serving config '" + key + "' must be an integer from " + std::to_string(low) + " to " +
                            std::to_string(high) + ", not '" + text + "'");
  }
  return number;
}

Result<bool> boolean_value(const std::string& key, const std::string& text) {
  if (text == "true" || text == "on" || text == "yes" || text == "1") return true;
  if (text == "false" || text == "off" || text == "no" || text == "0") return false;
  return invalid_argument("serving config '" + key + "' must be true or false, not '" + text + "'");
}

constexpr std::int64_t kMaxRows = 1 << 20;
constexpr std::int64_t kMaxMicroseconds = std::int64_t{3600} * 1'000'000;

}  // namespace

const std::vector<std::string>& serving_config_keys() {
  static const std::vector<std::string> keys = {
      "max_batch_size", "max_queue_delay_us", "preferred_batch_sizes", "max_queue_size", "default_timeout_us",
      "priority_levels", "default_priority", "instances", "cache", "idle_unload_s", "warmup_requests"};
  return keys;
}

Result<ModelServingConfig> apply_serving_config(ModelServingConfig config,
                                                const std::map<std::string, std::string>& values) {
  BatchingConfig& batching = config.batching;
  for (const auto& [key, text] : values) {
    if (key == "max_batch_size") {
      SLIPWAY_ASSIGN_OR_RETURN(auto rows, integer_value(key, text, 0, kMaxRows));
      batching.max_batch_size = static_cast<std::size_t>(rows);
    } else if (key == "max_queue_delay_us") {
      SLIPWAY_ASSIGN_OR_RETURN(auto delay, integer_value(key, text, 0, kMaxMicroseconds));
      batching.max_queue_delay = std::chrono::microseconds(delay);
    } else if (key == "preferred_batch_sizes") {
      batching.preferred_batch_sizes.clear();
      std::size_t start = 0;
      while (start < text.size()) {
        std::size_t comma = text.find(',', start);
        std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        while (!item.empty() && item.front() == ' ') item.erase(item.begin());
        while (!item.empty() && item.back() == ' ') item.pop_back();
        SLIPWAY_ASSIGN_OR_RETURN(auto size, integer_value(key, item, 1, kMaxRows));
        batching.preferred_batch_sizes.push_back(static_cast<std::size_t>(size));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (key == "max_queue_size") {
      SLIPWAY_ASSIGN_OR_RETURN(auto size, integer_value(key, text, 0, kMaxRows));
      batching.max_queue_size = static_cast<std::size_t>(size);
    } else if (key == "default_timeout_us") {
      SLIPWAY_ASSIGN_OR_RETURN(auto timeout, integer_value(key, text, 0, kMaxMicroseconds));
      batching.default_timeout = std::chrono::microseconds(timeout);
    } else if (key == "priority_levels") {
      SLIPWAY_ASSIGN_OR_RETURN(auto levels, integer_value(key, text, 1, 64));
      batching.priority_levels = static_cast<int>(levels);
    } else if (key == "default_priority") {
      SLIPWAY_ASSIGN_OR_RETURN(auto priority, integer_value(key, text, 1, 64));
      batching.default_priority = static_cast<int>(priority);
    } else if (key == "instances") {
      SLIPWAY_ASSIGN_OR_RETURN(auto instances, integer_value(key, text, 1, 64));
      batching.instances = static_cast<int>(instances);
    } else if (key == "cache") {
      SLIPWAY_ASSIGN_OR_RETURN(config.cache, boolean_value(key, text));
    } else if (key == "idle_unload_s") {
      SLIPWAY_ASSIGN_OR_RETURN(auto seconds, integer_value(key, text, 0, std::int64_t{365} * 24 * 3600));
      config.idle_unload = std::chrono::seconds(seconds);
    } else if (key == "warmup_requests") {
      SLIPWAY_ASSIGN_OR_RETURN(auto count, integer_value(key, text, 0, 10'000));
      config.warmup_requests = static_cast<int>(count);
    } else {
      std::string known;
      for (const auto& name : serving_config_keys()) known += (known.empty() ? "" : ", ") + name;
      return invalid_argument("unknown serving config key '" + key + "'; the keys are: " + known);
    }
  }
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
  return config;
}

std::map<std::string, std::string> serving_config_values(const ModelServingConfig& config) {
  const BatchingConfig& batching = config.batching;
  std::string preferred;
  for (std::size_t size : batching.preferred_batch_sizes) preferred += (preferred.empty() ? "" : ",") + std::to_string(size);
  return {{"max_batch_size", std::to_string(batching.max_batch_size)},
          {"max_queue_delay_us", std::to_string(batching.max_queue_delay.count())},
          {"preferred_batch_sizes", preferred},
          {"max_queue_size", std::to_string(batching.max_queue_size)},
          {"default_timeout_us", std::to_string(batching.default_timeout.count())},
          {"priority_levels", std::to_string(batching.priority_levels)},
          {"default_priority", std::to_string(batching.default_priority)},
          {"instances", std::to_string(batching.instances)},
          {"cache", config.cache ? "true" : "false"},
          {"idle_unload_s", std::to_string(config.idle_unload.count())},
          {"warmup_requests", std::to_string(config.warmup_requests)}};
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
