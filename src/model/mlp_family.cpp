// The MLP family's part of a bundle: "precision" and "layers" (each layer's inputs, outputs,
// activation, layer-normalization epsilon and int8 input scale) in the manifest, each layer's
// float32 weights and bias in sections "mlp.N.weights" and "mlp.N.bias", its normalization in
// "mlp.N.norm_scale" and "mlp.N.norm_shift", and a checkpoint's training state in
// "mlp.state.NAME" (docs/formats.md). A bf16 or int8 model stores the float32 weights it was made
// from and packs them again at load: the packing is deterministic, so the model is the same.
#include "model/model_family.h"

namespace slipway::model {
namespace {

// Layers at most; each is a few sections, and a file cannot ask for more.
constexpr std::size_t kMaxLayers = 64;
constexpr std::size_t kMaxStateArrays = 1024;

std::string section_name(std::size_t layer, std::string_view part) {
  return "mlp." + std::to_string(layer) + "." + std::string(part);
}

void write_mlp(const Model& model, FamilyWriter& out) {
  const auto& mlp = static_cast<const MlpModel&>(model);
  out.fields().key("precision").value(mlp_precision_name(mlp.precision()));
  out.fields().key("layers").begin_array();
  for (const auto& layer : mlp.layers()) {
    out.fields().begin_object().key("inputs").value(static_cast<std::uint64_t>(layer.inputs));
    out.fields().key("outputs").value(static_cast<std::uint64_t>(layer.outputs));
    out.fields().key("activation").value(kernels::activation_name(layer.activation));
    if (layer.normalized()) out.fields().key("layer_norm_epsilon").value(static_cast<double>(layer.norm_epsilon));
    if (layer.input_scale > 0.0f) out.fields().key("input_scale").value(static_cast<double>(layer.input_scale));
    out.fields().end_object();
  }
  out.fields().end_array();
  for (std::size_t index = 0; index < mlp.layers().size(); ++index) {
    const MlpLayer& layer = mlp.layers()[index];
    out.add_section(section_name(index, "weights"), layer.weights.span());
    out.add_section(section_name(index, "bias"), layer.bias.span());
    if (layer.normalized()) {
      out.add_section(section_name(index, "norm_scale"), layer.norm_scale.span());
      out.add_section(section_name(index, "norm_shift"), layer.norm_shift.span());
    }
  }
  if (!mlp.training_state().empty()) {
    out.fields().key("training_state").begin_array();
    for (const auto& [name, values] : mlp.training_state()) out.fields().value(name);
    out.fields().end_array();
    for (const auto& [name, values] : mlp.training_state()) out.add_section("mlp.state." + name, values.span());
  }
}

Result<std::shared_ptr<const Model>> read_mlp(const FamilyReader& in) {
  std::string precision_name;
  SLIPWAY_RETURN_IF_ERROR(in.fields_reader().string_field(in.fields(), "precision", precision_name));
  std::optional<MlpPrecision> precision = mlp_precision_by_name(precision_name);
  if (!precision) return data_loss("unknown MLP precision '" + precision_name + "' in the bundle");
  simdjson::dom::array layers;
  if (in.fields()["layers"].get(layers) != simdjson::SUCCESS) return data_loss("the bundle's MLP has no layers array");
  std::vector<MlpLayer> read;
  // Bundles written before activations were named have ReLU between layers and none after.
  bool unnamed_activations = false;
  for (auto element : layers) {
    if (read.size() == kMaxLayers) return data_loss("the bundle's MLP has more than 64 layers");
    std::uint64_t inputs = 0, outputs = 0;
    if (element["inputs"].get(inputs) != simdjson::SUCCESS || element["outputs"].get(outputs) != simdjson::SUCCESS) {
      return data_loss("an MLP layer in the bundle lacks inputs or outputs");
    }
    MlpLayer layer;
    layer.inputs = static_cast<std::size_t>(inputs);
    layer.outputs = static_cast<std::size_t>(outputs);
    SLIPWAY_ASSIGN_OR_RETURN(layer.weights, in.section<float>(section_name(read.size(), "weights")));
    SLIPWAY_ASSIGN_OR_RETURN(layer.bias, in.section<float>(section_name(read.size(), "bias")));
    std::string_view activation;
    if (element["activation"].get(activation) == simdjson::SUCCESS) {
      if (!kernels::activation_by_name(activation, layer.activation)) {
        return data_loss("unknown activation '" + std::string(activation) + "' in the bundle's MLP");
      }
    } else {
      layer.activation = kernels::Activation::kRelu;
      unnamed_activations = true;
    }
    double input_scale = 0.0;
    if (element["input_scale"].get(input_scale) == simdjson::SUCCESS)
      layer.input_scale = static_cast<float>(input_scale);
    double epsilon = 0.0;
    if (element["layer_norm_epsilon"].get(epsilon) == simdjson::SUCCESS) {
      // Any positive float, as MlpModel::make takes (a value past float's range cannot be cast).
      if (!(epsilon > 0.0 && epsilon <= 1e30)) return data_loss("an MLP layer's layer_norm_epsilon is out of range");
      layer.norm_epsilon = static_cast<float>(epsilon);
      SLIPWAY_ASSIGN_OR_RETURN(layer.norm_scale, in.section<float>(section_name(read.size(), "norm_scale")));
      SLIPWAY_ASSIGN_OR_RETURN(layer.norm_shift, in.section<float>(section_name(read.size(), "norm_shift")));
    }
    // Sizes from the file must match the sections before anything multiplies them.
    if (layer.outputs == 0 || layer.bias.size() != layer.outputs ||
        layer.weights.size() / layer.outputs != layer.inputs || layer.weights.size() % layer.outputs != 0) {
      return data_loss("MLP layer " + std::to_string(read.size() + 1) + "'s sections do not have its shape");
    }
    read.push_back(std::move(layer));
  }
  if (read.empty() || read.front().inputs != in.width()) {
    return data_loss("the bundle's MLP does not take the preprocessing's " + std::to_string(in.width()) + " inputs");
  }
  if (unnamed_activations) read.back().activation = kernels::Activation::kNone;
  MlpTrainingState state;
  simdjson::dom::array state_names;
  if (in.fields()["training_state"].get(state_names) == simdjson::SUCCESS) {
    for (auto element : state_names) {
      std::string_view name;
      if (state.size() == kMaxStateArrays || element.get(name) != simdjson::SUCCESS) {
        return data_loss("the bundle's MLP training state is malformed");
      }
      SLIPWAY_ASSIGN_OR_RETURN(state[std::string(name)], in.section<float>("mlp.state." + std::string(name)));
    }
  }
  auto model = MlpModel::make(std::move(read), *precision, std::move(state));
  if (!model.ok()) return data_loss("the bundle's MLP is not valid: " + model.status().message());
  return std::shared_ptr<const Model>(*model);
}

}  // namespace

const ModelFamily& mlp_family() {
  static constexpr ModelFamily kFamily{"mlp", &write_mlp, &read_mlp};
  return kFamily;
}

}  // namespace slipway::model
