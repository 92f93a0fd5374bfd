// Typed access to a bundle manifest's JSON fields (simdjson DOM), each error one sentence naming
// the field. Private to the model module: Bundle::parse and the model families use it.
#pragma once

#include <simdjson.h>

#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "slipway/core.h"

namespace slipway::model {

class ManifestReader {
 public:
  using Array = simdjson::dom::array;
  using Element = simdjson::dom::element;
  using Object = simdjson::dom::object;

  Status field(Object parent, std::string_view key, Element& out) const {
    if (parent[key].get(out) != simdjson::SUCCESS) return missing(key);
    return {};
  }
  Status string_field(Object parent, std::string_view key, std::string& out) const {
    std::string_view view;
    if (parent[key].get(view) != simdjson::SUCCESS) return missing(key);
    out = std::string(view);
    return {};
  }
  // A number, or null for NaN.
  Status double_field(Object parent, std::string_view key, double& out) const {
    Element value;
    if (parent[key].get(value) != simdjson::SUCCESS) return missing(key);
    if (value.is_null()) {
      out = std::nan("");
      return {};
    }
    if (value.get(out) != simdjson::SUCCESS) return missing(key);
    return {};
  }
  Status uint_field(Object parent, std::string_view key, std::uint64_t& out) const {
    if (parent[key].get(out) != simdjson::SUCCESS) return missing(key);
    return {};
  }
  Status object_field(Object parent, std::string_view key, Object& out) const {
    if (parent[key].get(out) != simdjson::SUCCESS) return missing(key);
    return {};
  }
  Status array_field(Object parent, std::string_view key, Array& out) const {
    if (parent[key].get(out) != simdjson::SUCCESS) return missing(key);
    return {};
  }
  Status strings_field(Object parent, std::string_view key, std::vector<std::string>& out) const {
    Array items;
    SLIPWAY_RETURN_IF_ERROR(array_field(parent, key, items));
    for (Element item : items) {
      std::string_view text;
      if (item.get(text) != simdjson::SUCCESS) return missing(key);
      out.emplace_back(text);
    }
    return {};
  }

 private:
  static Status missing(std::string_view key) {
    return data_loss("the bundle manifest's field '" + std::string(key) + "' is missing or has the wrong type");
  }
};

}  // namespace slipway::model
