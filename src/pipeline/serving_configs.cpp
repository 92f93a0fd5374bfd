// A model's serving config, read and set: what `slipway serving-config` and
// /api/models/NAME/serving-config share, checked by the server's own rules.
#include "pipeline/operation_support.h"
#include "slipway/pipeline.h"
#include "slipway/serve.h"

namespace slipway::pipeline {

Result<ServingConfigView> serving_config(registry::Registry& registry, const std::string& model) {
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(model));
  SLIPWAY_RETURN_IF_ERROR(registry.models().list_versions(model).status());
  ServingConfigView view;
  SLIPWAY_ASSIGN_OR_RETURN(view.stored, registry.serving_configs().get(model));
  SLIPWAY_ASSIGN_OR_RETURN(auto effective, serve::apply_serving_config({}, view.stored));
  view.effective = serve::serving_config_values(effective);
  return view;
}

Result<ServingConfigView> set_serving_config(registry::Registry& registry, const std::string& model,
                                             const std::map<std::string, std::string>& given, bool reset,
                                             const Caller& caller) {
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(model));
  SLIPWAY_RETURN_IF_ERROR(registry.models().list_versions(model).status());
  SLIPWAY_ASSIGN_OR_RETURN(auto stored, registry.serving_configs().get(model));
  std::map<std::string, std::string> merged = reset ? given : stored;
  for (const auto& [key, value] : given) merged[key] = value;
  // Checked whole, so that a stored config always applies.
  SLIPWAY_RETURN_IF_ERROR(serve::apply_serving_config({}, merged).status());
  act_as(registry, caller);
  SLIPWAY_RETURN_IF_ERROR(registry.serving_configs().set(model, given, reset));
  return serving_config(registry, model);
}

}  // namespace slipway::pipeline
