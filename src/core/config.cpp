// Configuration declarations: checking values against their keys, unknown-key suggestions and
// the Markdown tables the docs are generated from.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <utility>

#include "slipway/core.h"

namespace slipway {
namespace {

bool read_integer(std::string_view text, std::int64_t& number) {
  auto parsed = std::from_chars(text.data(), text.data() + text.size(), number);
  return parsed.ec == std::errc() && parsed.ptr == text.data() + text.size();
}

bool read_number(std::string_view text, double& number) {
  auto parsed = std::from_chars(text.data(), text.data() + text.size(), number);
  return parsed.ec == std::errc() && parsed.ptr == text.data() + text.size() && std::isfinite(number);
}

// Integer bounds as integers (3600000000, not 3.6e+09).
std::string bound_text(const ConfigKey& key, double bound) {
  if (key.type == ConfigType::kNumber) return format_config_number(bound);
  return std::to_string(static_cast<std::int64_t>(bound));
}

bool in_range(const ConfigKey& key, double number) { return number >= key.minimum && number <= key.maximum; }

std::size_t edit_distance(std::string_view left, std::string_view right) {
  std::vector<std::size_t> previous(right.size() + 1), current(right.size() + 1);
  for (std::size_t column = 0; column <= right.size(); ++column) previous[column] = column;
  for (std::size_t row = 1; row <= left.size(); ++row) {
    current[0] = row;
    for (std::size_t column = 1; column <= right.size(); ++column) {
      std::size_t substitution = previous[column - 1] + (left[row - 1] == right[column - 1] ? 0 : 1);
      current[column] = std::min({previous[column] + 1, current[column - 1] + 1, substitution});
    }
    std::swap(previous, current);
  }
  return previous[right.size()];
}

}  // namespace

std::string format_config_number(double number) {
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, number);
  return std::string(buffer, result.ptr);
}

std::string_view config_type_name(ConfigType type) {
  switch (type) {
    case ConfigType::kInt:
      return "integer";
    case ConfigType::kNumber:
      return "number";
    case ConfigType::kBool:
      return "boolean";
    case ConfigType::kChoice:
      return "choice";
    case ConfigType::kText:
      return "text";
    case ConfigType::kIntList:
      return "integer list";
  }
  return "text";
}

std::string config_allowed_text(const ConfigKey& key) {
  switch (key.type) {
    case ConfigType::kInt:
    case ConfigType::kNumber:
      return bound_text(key, key.minimum) + " to " + bound_text(key, key.maximum);
    case ConfigType::kIntList:
      return "integers from " + bound_text(key, key.minimum) + " to " + bound_text(key, key.maximum) +
             ", comma-separated";
    case ConfigType::kBool:
      return "true or false";
    case ConfigType::kChoice:
      return key.choices.empty() ? "any" : join(key.choices, ", ");
    case ConfigType::kText:
      return "any";
  }
  return "any";
}

Status check_config_value(std::string_view subject, const ConfigKey& key, std::string_view text) {
  auto refuse = [&](const std::string& expected) {
    return invalid_argument(std::string(subject) + " '" + key.name + "' must be " + expected + ", not '" +
                            std::string(text) + "'");
  };
  switch (key.type) {
    case ConfigType::kInt: {
      std::int64_t number = 0;
      if (!read_integer(text, number) || !in_range(key, static_cast<double>(number))) {
        return refuse("an integer from " + config_allowed_text(key));
      }
      return {};
    }
    case ConfigType::kNumber: {
      double number = 0;
      if (!read_number(text, number) || !in_range(key, number))
        return refuse("a number from " + config_allowed_text(key));
      return {};
    }
    case ConfigType::kIntList:
      for (const auto& item : config_detail::split_list(text)) {
        std::int64_t number = 0;
        if (!read_integer(item, number) || !in_range(key, static_cast<double>(number))) {
          return refuse("a comma-separated list of integers from " + bound_text(key, key.minimum) + " to " +
                        bound_text(key, key.maximum));
        }
      }
      return {};
    case ConfigType::kBool:
      if (text == "true" || text == "on" || text == "yes" || text == "1" || text == "false" || text == "off" ||
          text == "no" || text == "0") {
        return {};
      }
      return refuse("true or false");
    case ConfigType::kChoice:
      if (key.choices.empty() || std::find(key.choices.begin(), key.choices.end(), text) != key.choices.end())
        return {};
      return refuse("one of " + join(key.choices, ", "));
    case ConfigType::kText:
      return {};
  }
  return {};
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

std::optional<std::string> closest_name(std::string_view typed, const std::vector<std::string>& names) {
  std::optional<std::string> best;
  std::size_t best_distance = std::max<std::size_t>(2, typed.size() / 3) + 1;
  for (const auto& name : names) {
    std::size_t distance = edit_distance(typed, name);
    // A prefix of a longer name ("max_batch" of "max_batch_size") is close too.
    if (name.size() > typed.size() && !typed.empty() && name.compare(0, typed.size(), typed) == 0) {
      distance = std::min(distance, std::size_t{1});
    }
    if (distance < best_distance) {
      best_distance = distance;
      best = name;
    }
  }
  return best;
}

Status unknown_config_key(std::string_view subject, std::string_view name, const std::vector<std::string>& known) {
  std::string message = "unknown " + std::string(subject) + " key '" + std::string(name) + "'";
  if (auto suggestion = closest_name(name, known)) message += "; did you mean '" + *suggestion + "'?";
  return invalid_argument(message + (message.back() == '?' ? " " : "; ") + "the keys are: " + join(known, ", "));
}

std::string config_markdown_table(const std::vector<ConfigKey>& keys) {
  std::string out = "| key | type | default | allowed | description |\n|---|---|---|---|---|\n";
  for (const auto& key : keys) {
    std::string default_text = key.default_value.empty() ? "(none)" : "`" + key.default_value + "`";
    out += "| `" + key.name + "` | " + std::string(config_type_name(key.type)) + " | " + default_text + " | " +
           config_allowed_text(key) + " | " + key.help + " |\n";
  }
  return out;
}

namespace config_detail {

std::int64_t parse_integer(std::string_view text) {
  std::int64_t number = 0;
  read_integer(text, number);
  return number;
}

}  // namespace config_detail

std::optional<double> parse_finite_number(std::string_view text) {
  double number = 0;
  if (!read_number(text, number)) return std::nullopt;
  return number;
}

namespace config_detail {

double parse_number(std::string_view text) {
  double number = 0;
  read_number(text, number);
  return number;
}

bool parse_bool(std::string_view text) { return text == "true" || text == "on" || text == "yes" || text == "1"; }

std::vector<std::string> split_list(std::string_view text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t comma = text.find(',', start);
    std::string_view item =
        text.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    items.emplace_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return items;
}

}  // namespace config_detail
}  // namespace slipway

namespace slipway {

Result<std::chrono::milliseconds> parse_duration(std::string_view name, std::string_view text, double longest_days) {
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"ms", 1.0}, {"s", 1'000.0}, {"m", 60'000.0}, {"h", 3'600'000.0}, {"d", 86'400'000.0}};
  double scale = 1'000.0;
  std::string_view number = text;
  for (const auto& [suffix, milliseconds] : kUnits) {
    if (text.ends_with(suffix)) {
      scale = milliseconds;
      number.remove_suffix(suffix.size());
      break;
    }
  }
  std::optional<double> value = parse_finite_number(number);
  if (!value || *value < 0) {
    return invalid_argument(std::string(name) + " '" + std::string(text) +
                            "' is not a duration (examples: 30s, 500ms, 2m, 1h)");
  }
  if (*value * scale > longest_days * 86'400'000.0) {
    return invalid_argument(std::string(name) + " '" + std::string(text) + "' is longer than " +
                            (longest_days == 1 ? std::string("a day") : format_config_number(longest_days) + " days"));
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(*value * scale)));
}

}  // namespace slipway
