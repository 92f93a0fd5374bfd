// Serving configuration per model: key/value rows that `serve` validates and applies.
#include "registry/store_context.h"

namespace slipway::registry {

Status ServingConfigStore::set(const std::string& model, const std::map<std::string, std::string>& values,
                               bool replace) {
  SLIPWAY_RETURN_IF_ERROR(validate_model_name(model));
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    if (replace) {
      SLIPWAY_RETURN_IF_ERROR(sql.execute("DELETE FROM serving_configs WHERE model = ?", {model}).status());
    }
    std::string detail = model;
    for (const auto& [key, value] : values) {
      SLIPWAY_RETURN_IF_ERROR(sql.execute("INSERT INTO serving_configs(model, key, value) VALUES (?, ?, ?) "
                                          "ON CONFLICT(model, key) DO UPDATE SET value = excluded.value",
                                          {model, key, value})
                                  .status());
      detail.append(" ").append(key).append("=").append(value);
    }
    return append_audit(sql, *context_, replace ? "serving_config.replace" : "serving_config.set", detail);
  });
}

Result<std::map<std::string, std::string>> ServingConfigStore::get(const std::string& model) {
  std::map<std::string, std::string> values;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto rows,
                             sql.query("SELECT key, value FROM serving_configs WHERE model = ? ORDER BY key", {model}));
    for (const auto& row : rows) values[row.text(0)] = row.text(1);
    return {};
  }));
  return values;
}

}  // namespace slipway::registry
