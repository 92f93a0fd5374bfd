// The linear family's part of a bundle: "bias" in the manifest and the weights as float64 in the
// section "linear.weights" (docs/formats.md).
#include <cmath>

#include "model/model_family.h"

namespace slipway::model {
namespace {

constexpr std::string_view kWeightsSection = "linear.weights";

void write_linear(const Model& model, FamilyWriter& out) {
  const auto& linear = static_cast<const LinearModel&>(model);
  out.fields().key("bias").value(linear.bias());
  out.fields().key("weights_section").value(kWeightsSection);
  if (linear.has_int8_weights()) {
    out.fields().key("weights_dtype").value("int8");
    out.fields().key("weights_scale").value(linear.weight_scale());
    out.add_section(kWeightsSection, linear.int8_weights());
    return;
  }
  out.fields().key("weights_dtype").value("float64");
  out.add_section(kWeightsSection, linear.weights());
}

Result<std::shared_ptr<const Model>> read_linear(const FamilyReader& in) {
  double bias = 0.0;
  SLIPWAY_RETURN_IF_ERROR(in.fields_reader().double_field(in.fields(), "bias", bias));
  std::string dtype = "float64";
  if (in.fields()["weights_dtype"].error() == simdjson::SUCCESS) {
    SLIPWAY_RETURN_IF_ERROR(in.fields_reader().string_field(in.fields(), "weights_dtype", dtype));
  }
  if (dtype == "int8") {
    double scale = 0.0;
    SLIPWAY_RETURN_IF_ERROR(in.fields_reader().double_field(in.fields(), "weights_scale", scale));
    if (!(scale > 0) || !std::isfinite(scale))
      return data_loss("the bundle's int8 weight scale is not a positive number");
    SLIPWAY_ASSIGN_OR_RETURN(auto int8_weights, in.section<std::int8_t>(kWeightsSection));
    if (int8_weights.size() != in.width()) return data_loss("the bundle's weight section has the wrong size");
    return std::shared_ptr<const Model>(std::make_shared<const LinearModel>(std::move(int8_weights), scale, bias));
  }
  if (dtype != "float64") return data_loss("unknown linear weights_dtype '" + dtype + "' in the bundle");
  SLIPWAY_ASSIGN_OR_RETURN(auto weights, in.section<double>(kWeightsSection));
  if (weights.size() != in.width()) return data_loss("the bundle's weight section has the wrong size");
  return std::shared_ptr<const Model>(std::make_shared<const LinearModel>(std::move(weights), bias));
}

}  // namespace

const ModelFamily& linear_family() {
  static constexpr ModelFamily kFamily{"linear", &write_linear, &read_linear};
  return kFamily;
}

}  // namespace slipway::model
