// The linear family's part of a bundle: "bias" in the manifest and the weights as float64 in the
// section "linear.weights" (docs/formats.md).
#include "model/model_family.h"

namespace slipway::model {
namespace {

constexpr std::string_view kWeightsSection = "linear.weights";

void write_linear(const Model& model, FamilyWriter& out) {
  const auto& linear = static_cast<const LinearModel&>(model);
  out.fields().key("bias").value(linear.bias());
  out.fields().key("weights_section").value(kWeightsSection);
  out.fields().key("weights_dtype").value("float64");
  out.add_section(kWeightsSection, linear.weights());
}

Result<std::shared_ptr<const Model>> read_linear(const FamilyReader& in) {
  double bias = 0.0;
  SLIPWAY_RETURN_IF_ERROR(in.fields_reader().double_field(in.fields(), "bias", bias));
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
