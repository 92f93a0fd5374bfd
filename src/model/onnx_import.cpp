// ONNX import with Debian's libonnx: the graphs PyTorch and other tools export for MLPs, read as
// a chain of dense layers. What lies between two products (PyTorch writes GELU as Div, Erf, Add,
// Mul, Mul) is recognized by what it computes: the elementwise nodes are evaluated on probe points
// and compared with the activations an MlpLayer has, so any order of the same arithmetic imports.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numbers>
#include <set>

#include "slipway/model.h"

namespace slipway::model {
namespace {

constexpr std::size_t kMaxLayers = 64;
// Elements in one tensor: far above any MLP Slipway serves, far below what overflows.
constexpr std::int64_t kMaxTensorElements = std::int64_t{1} << 31;

struct Tensor {
  std::vector<std::int64_t> dims;
  std::vector<float> values;
  std::size_t size() const { return values.size(); }
};

Status bad_graph(const std::string& what) { return invalid_argument("ONNX model: " + what); }

Result<Tensor> tensor_of(const onnx::TensorProto& proto) {
  Tensor tensor;
  std::int64_t count = 1;
  for (std::int64_t dim : proto.dims()) {
    // An empty tensor is no layer's weights; refusing it keeps a shape like [0, 2^40] from passing.
    if (dim <= 0 || count > kMaxTensorElements / dim) {
      return bad_graph("tensor '" + proto.name() + "' has an impossible shape");
    }
    count *= dim;
    tensor.dims.push_back(dim);
  }
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    return bad_graph("tensor '" + proto.name() + "' keeps its data in an external file, which is not supported");
  }
  auto expect = [&](std::size_t have) -> Status {
    if (have != static_cast<std::size_t>(count)) {
      return bad_graph("tensor '" + proto.name() + "' holds " + std::to_string(have) + " values for a shape of " +
                       std::to_string(count));
    }
    return {};
  };
  switch (proto.data_type()) {
    case onnx::TensorProto::FLOAT:
      if (proto.has_raw_data()) {
        SLIPWAY_RETURN_IF_ERROR(expect(proto.raw_data().size() / sizeof(float)));
        if (proto.raw_data().size() % sizeof(float) != 0) return bad_graph("a float tensor has a partial value");
        tensor.values.resize(static_cast<std::size_t>(count));
        std::memcpy(tensor.values.data(), proto.raw_data().data(), proto.raw_data().size());
      } else {
        SLIPWAY_RETURN_IF_ERROR(expect(static_cast<std::size_t>(proto.float_data_size())));
        tensor.values.assign(proto.float_data().begin(), proto.float_data().end());
      }
      break;
    case onnx::TensorProto::DOUBLE:
      if (proto.has_raw_data()) {
        SLIPWAY_RETURN_IF_ERROR(expect(proto.raw_data().size() / sizeof(double)));
        for (std::size_t i = 0; i < static_cast<std::size_t>(count); ++i) {
          double value = 0;
          std::memcpy(&value, proto.raw_data().data() + i * sizeof(double), sizeof(double));
          tensor.values.push_back(static_cast<float>(value));
        }
      } else {
        SLIPWAY_RETURN_IF_ERROR(expect(static_cast<std::size_t>(proto.double_data_size())));
        for (double value : proto.double_data()) tensor.values.push_back(static_cast<float>(value));
      }
      break;
    default:
      return bad_graph("tensor '" + proto.name() + "' is not float (ONNX data type " +
                       std::to_string(proto.data_type()) + ")");
  }
  return tensor;
}

const onnx::AttributeProto* attribute(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& item : node.attribute()) {
    if (item.name() == name) return &item;
  }
  return nullptr;
}
std::int64_t int_attribute(const onnx::NodeProto& node, const std::string& name, std::int64_t fallback) {
  const auto* found = attribute(node, name);
  return found != nullptr ? found->i() : fallback;
}
float float_attribute(const onnx::NodeProto& node, const std::string& name, float fallback) {
  const auto* found = attribute(node, name);
  return found != nullptr ? found->f() : fallback;
}

std::string describe(const onnx::NodeProto& node) {
  return "'" + node.op_type() + "'" + (node.name().empty() ? "" : " (node '" + node.name() + "')");
}

const std::set<std::string>& elementwise_operators() {
  static const std::set<std::string> kOperators = {"Add",  "Sub",     "Mul",  "Div",  "Pow",  "Erf",
                                                   "Tanh", "Sigmoid", "Relu", "Gelu", "Sqrt", "Identity",
                                                   "Cast", "Dropout", "Neg",  "Exp",  "Abs"};
  return kOperators;
}

constexpr const char* kSupported =
    "supported: Gemm, MatMul, Add, Sub, Mul, Div, Relu, Sigmoid, Tanh, Gelu (or its Erf form with Pow, Sqrt, Neg, "
    "Exp, Abs), Softmax, Flatten, Identity, Dropout, LayerNormalization, Cast to float, Constant, and "
    "Where(IsNaN(x), values, x) before the first layer";

// Inputs wider than this are no MLP Slipway serves (and a declared width sizes arrays).
constexpr std::int64_t kMaxInputs = 1 << 20;

// What every node must have before any of it is read: outputs, a first input (but Constant), no
// empty inputs but the optional ones, and a Cast only to float.
Status check_node(const onnx::NodeProto& node) {
  if (node.output_size() == 0 || node.output(0).empty()) return bad_graph("node " + describe(node) + " has no output");
  if (!node.domain().empty() && node.domain() != "ai.onnx") {
    return bad_graph("node " + describe(node) + " is from the operator domain '" + node.domain() +
                     "', which is not supported");
  }
  if (node.op_type() == "Constant") return {};
  if (node.input_size() == 0 || node.input(0).empty()) return bad_graph("node " + describe(node) + " has no input");
  bool optional_inputs = node.op_type() == "Gemm" || node.op_type() == "LayerNormalization";
  for (const auto& input : node.input()) {
    if (input.empty() && !optional_inputs) return bad_graph("node " + describe(node) + " has an empty input");
  }
  if (node.op_type() == "Cast") {
    std::int64_t to = int_attribute(node, "to", 0);
    if (to != onnx::TensorProto::FLOAT && to != onnx::TensorProto::DOUBLE) {
      return bad_graph("node " + describe(node) + " casts to ONNX type " + std::to_string(to) +
                       "; only casts to float are supported");
    }
  }
  return {};
}

// The graph read as an MLP.
class MlpReader {
 public:
  explicit MlpReader(const onnx::GraphProto& graph) : graph_(graph) {}

  Status read() {
    for (const auto& initializer : graph_.initializer()) {
      SLIPWAY_ASSIGN_OR_RETURN(constants_[initializer.name()], tensor_of(initializer));
    }
    std::vector<const onnx::ValueInfoProto*> inputs;
    for (const auto& input : graph_.input()) {
      if (constants_.count(input.name()) == 0) inputs.push_back(&input);
    }
    if (inputs.size() != 1) {
      return bad_graph("the graph has " + std::to_string(inputs.size()) + " inputs; an MLP has one feature matrix");
    }
    if (graph_.output_size() < 1) return bad_graph("the graph has no output");
    current_ = inputs.front()->name();
    const auto& type = inputs.front()->type();
    auto element = type.tensor_type().elem_type();
    if (type.has_tensor_type() && element != onnx::TensorProto::FLOAT && element != onnx::TensorProto::DOUBLE &&
        element != onnx::TensorProto::UNDEFINED) {
      return bad_graph("the input '" + current_ + "' is not a float tensor (ONNX type " + std::to_string(element) +
                       ")");
    }
    const auto& shape = type.tensor_type().shape();
    // A matrix [rows, inputs], or more dimensions that a Flatten(axis=1) turns into one.
    const onnx::NodeProto* first = nullptr;
    for (const auto& node : graph_.node()) {
      if (node.op_type() != "Constant") {
        first = &node;
        break;
      }
    }
    bool flattened = first != nullptr && first->op_type() == "Flatten" && int_attribute(*first, "axis", 1) == 1;
    if (type.tensor_type().has_shape() && shape.dim_size() != 2 && !(flattened && shape.dim_size() > 2)) {
      return bad_graph("the input '" + current_ + "' has " + std::to_string(shape.dim_size()) +
                       " dimensions; an MLP takes a matrix [rows, inputs] (or more dimensions flattened first)");
    }
    if (type.tensor_type().has_shape() && shape.dim_size() >= 2) {
      // The product of the dimensions after the rows, 0 when one is unnamed; past kMaxInputs it
      // stops growing (no overflow), and is refused.
      std::int64_t width = 1;
      for (int dim = 1; dim < shape.dim_size() && width > 0 && width <= kMaxInputs; ++dim) {
        std::int64_t value = shape.dim(dim).has_dim_value() ? shape.dim(dim).dim_value() : 0;
        if (value < 0) return bad_graph("the input has a negative dimension");
        width = value > kMaxInputs ? value : width * value;
      }
      if (width < 0 || width > kMaxInputs) {
        return bad_graph("the input declares " + std::to_string(width) + " columns or more");
      }
      declared_width_ = width;
    }
    for (const auto& node : graph_.node()) SLIPWAY_RETURN_IF_ERROR(check_node(node));

    const auto& nodes = graph_.node();
    std::size_t index = 0;
    while (index < static_cast<std::size_t>(nodes.size())) {
      const onnx::NodeProto& node = nodes[static_cast<int>(index)];
      const std::string& op = node.op_type();
      if (op == "Constant") {
        SLIPWAY_RETURN_IF_ERROR(add_constant(node));
        ++index;
        continue;
      }
      if (!consumes_current(node)) {
        return bad_graph("node " + describe(node) +
                         " does not continue the chain of layers; only MLPs (one path "
                         "from input to output) are supported");
      }
      bool first_input = node.input(0) == current_;
      if ((op == "Gemm" || op == "MatMul") && first_input) {
        SLIPWAY_RETURN_IF_ERROR(dense(node, index));
      } else if ((op == "IsNaN" || op == "Where") && layers_.empty()) {
        SLIPWAY_RETURN_IF_ERROR(input_imputation(node));
        ++index;
      } else if (!first_input && elementwise_operators().count(op) == 0) {
        return bad_graph("node " + describe(node) + " takes the layer's values as its second input");
      } else if (op == "LayerNormalization") {
        SLIPWAY_RETURN_IF_ERROR(layer_norm(node));
        ++index;
      } else if (op == "Softmax") {
        if (layers_.empty()) return bad_graph("Softmax before any dense layer");
        std::int64_t axis = int_attribute(node, "axis", -1);
        if (axis != -1 && axis != 1) return bad_graph("Softmax over axis " + std::to_string(axis));
        softmax_ = true;
        current_ = node.output(0);
        ++index;
      } else if (op == "Flatten" || op == "Identity" || op == "Cast" || op == "Dropout") {
        current_ = node.output(0);
        ++index;
      } else if (elementwise_operators().count(op) != 0) {
        if (layers_.empty()) {
          SLIPWAY_RETURN_IF_ERROR(input_affine(node));
          ++index;
        } else {
          SLIPWAY_RETURN_IF_ERROR(activation(index));
        }
      } else {
        return invalid_argument("ONNX operator " + describe(node) + " is not supported; " + kSupported);
      }
      if (softmax_ && index < static_cast<std::size_t>(nodes.size())) {
        const auto& next = nodes[static_cast<int>(index)];
        if (next.op_type() != "Identity" && next.op_type() != "Cast") {
          return bad_graph("node " + describe(next) + " after Softmax is not supported");
        }
      }
    }
    if (layers_.empty()) return bad_graph("the graph has no Gemm or MatMul: not an MLP");
    if (declared_width_ > 0 && layers_.front().inputs != static_cast<std::size_t>(declared_width_)) {
      return bad_graph("the input declares " + std::to_string(declared_width_) + " columns but the first layer takes " +
                       std::to_string(layers_.front().inputs));
    }
    if (graph_.output_size() > 1) {
      log_warn("the ONNX graph has " + std::to_string(graph_.output_size()) + " outputs; importing the first, '" +
               graph_.output(0).name() + "'");
    }
    if (current_ != graph_.output(0).name()) {
      return bad_graph("the output '" + graph_.output(0).name() + "' is not the end of the chain of layers");
    }
    return {};
  }

  std::vector<MlpLayer>& layers() { return layers_; }
  bool softmax() const { return softmax_; }
  std::size_t width() const { return layers_.front().inputs; }
  // Per input: x' = scale * x + shift, from element-wise nodes before the first layer.
  const std::vector<double>& input_scale() const { return input_scale_; }
  const std::vector<double>& input_shift() const { return input_shift_; }
  // Per input (or one for all): the value a missing input takes; empty when the graph has none.
  const std::vector<float>& impute() const { return impute_; }

 private:
  Status add_constant(const onnx::NodeProto& node) {
    const auto* value = attribute(node, "value");
    if (value == nullptr || !value->has_t()) return bad_graph(describe(node) + " holds no tensor");
    auto tensor = tensor_of(value->t());
    if (!tensor.ok()) return bad_graph("node " + describe(node) + ": " + tensor.status().message());
    constants_[node.output(0)] = std::move(*tensor);
    return {};
  }

  bool consumes_current(const onnx::NodeProto& node) const {
    for (const auto& input : node.input()) {
      if (input == current_) return true;
    }
    return false;
  }

  Result<const Tensor*> constant(const onnx::NodeProto& node, int input) const {
    if (node.input_size() <= input) return bad_graph(describe(node) + " lacks an input");
    auto found = constants_.find(node.input(input));
    if (found == constants_.end()) {
      return bad_graph(describe(node) + "'s input '" + node.input(input) + "' is not a constant (an initializer)");
    }
    return &found->second;
  }

  Status dense(const onnx::NodeProto& node, std::size_t& index) {
    if (layers_.size() == kMaxLayers) return bad_graph("more than 64 dense layers");
    SLIPWAY_ASSIGN_OR_RETURN(const Tensor* weights, constant(node, 1));
    if (weights->dims.size() != 2) return bad_graph(describe(node) + "'s weights are not a matrix");
    bool transposed = node.op_type() == "Gemm" && int_attribute(node, "transB", 0) != 0;
    if (node.op_type() == "Gemm" && int_attribute(node, "transA", 0) != 0) {
      return bad_graph(describe(node) + " transposes its input (transA=1)");
    }
    auto inputs = static_cast<std::size_t>(transposed ? weights->dims[1] : weights->dims[0]);
    auto outputs = static_cast<std::size_t>(transposed ? weights->dims[0] : weights->dims[1]);
    float alpha = node.op_type() == "Gemm" ? float_attribute(node, "alpha", 1.0f) : 1.0f;
    float beta = node.op_type() == "Gemm" ? float_attribute(node, "beta", 1.0f) : 1.0f;
    MlpLayer layer;
    layer.inputs = inputs;
    layer.outputs = outputs;
    std::vector<float> values(inputs * outputs);
    for (std::size_t output = 0; output < outputs; ++output) {
      for (std::size_t k = 0; k < inputs; ++k) {
        float weight = transposed ? weights->values[output * inputs + k] : weights->values[k * outputs + output];
        values[output * inputs + k] = alpha * weight;
      }
    }
    layer.weights = SharedArray<float>(std::move(values));
    std::vector<float> bias(outputs, 0.0f);
    if (node.op_type() == "Gemm" && node.input_size() > 2 && !node.input(2).empty()) {
      SLIPWAY_ASSIGN_OR_RETURN(const Tensor* c, constant(node, 2));
      SLIPWAY_RETURN_IF_ERROR(add_vector(*c, outputs, beta, bias, node));
    }
    current_ = node.output(0);
    ++index;
    // MatMul (or a Gemm without C) followed by the bias as an Add.
    const auto& nodes = graph_.node();
    if (index < static_cast<std::size_t>(nodes.size())) {
      const auto& next = nodes[static_cast<int>(index)];
      if (next.op_type() == "Add" && next.input_size() == 2 &&
          (next.input(0) == current_ || next.input(1) == current_)) {
        const std::string& other = next.input(0) == current_ ? next.input(1) : next.input(0);
        auto found = constants_.find(other);
        if (found != constants_.end() && found->second.size() == outputs) {
          SLIPWAY_RETURN_IF_ERROR(add_vector(found->second, outputs, 1.0f, bias, next));
          current_ = next.output(0);
          ++index;
        }
      }
    }
    layer.bias = SharedArray<float>(std::move(bias));
    layers_.push_back(std::move(layer));
    activation_seen_ = false;
    return {};
  }

  static Status add_vector(const Tensor& c, std::size_t outputs, float beta, std::vector<float>& bias,
                           const onnx::NodeProto& node) {
    if (c.size() != outputs && c.size() != 1) {
      return bad_graph(describe(node) + "'s bias has " + std::to_string(c.size()) + " values for " +
                       std::to_string(outputs) + " outputs");
    }
    for (std::size_t output = 0; output < outputs; ++output) {
      bias[output] += beta * c.values[c.size() == 1 ? 0 : output];
    }
    return {};
  }

  Status layer_norm(const onnx::NodeProto& node) {
    if (layers_.empty() || activation_seen_ || layers_.back().normalized()) {
      return bad_graph(describe(node) + " must follow a dense layer directly (before its activation)");
    }
    std::int64_t axis = int_attribute(node, "axis", -1);
    if (axis != -1 && axis != 1) return bad_graph(describe(node) + " normalizes over axis " + std::to_string(axis));
    MlpLayer& layer = layers_.back();
    SLIPWAY_ASSIGN_OR_RETURN(const Tensor* scale, constant(node, 1));
    if (scale->size() != layer.outputs) return bad_graph(describe(node) + "'s scale does not match its layer");
    std::vector<float> shift(layer.outputs, 0.0f);
    if (node.input_size() > 2 && !node.input(2).empty()) {
      SLIPWAY_ASSIGN_OR_RETURN(const Tensor* bias, constant(node, 2));
      if (bias->size() != layer.outputs) return bad_graph(describe(node) + "'s bias does not match its layer");
      shift = bias->values;
    }
    layer.norm_scale = SharedArray<float>(scale->values);
    layer.norm_shift = SharedArray<float>(std::move(shift));
    layer.norm_epsilon = float_attribute(node, "epsilon", 1e-5f);
    current_ = node.output(0);
    return {};
  }

  // Sub, Add, Mul or Div by a constant before the first layer: the standardization of inputs,
  // kept as the preprocessing's centering and scaling.
  Status input_affine(const onnx::NodeProto& node) {
    const std::string& op = node.op_type();
    if ((op != "Add" && op != "Sub" && op != "Mul" && op != "Div") || node.input(0) != current_) {
      return bad_graph("node " + describe(node) + " before the first dense layer is not supported");
    }
    SLIPWAY_ASSIGN_OR_RETURN(const Tensor* c, constant(node, 1));
    if (input_scale_.empty()) {
      std::size_t width = declared_width_ > 0 ? static_cast<std::size_t>(declared_width_) : c->size();
      if (width > static_cast<std::size_t>(kMaxInputs)) return bad_graph("the input scaling is too wide");
      input_scale_.assign(width, 1.0);
      input_shift_.assign(width, 0.0);
    }
    if (c->size() != 1 && c->size() != input_scale_.size()) {
      return bad_graph(describe(node) + " before the first layer has " + std::to_string(c->size()) + " values for " +
                       std::to_string(input_scale_.size()) + " inputs");
    }
    for (std::size_t i = 0; i < input_scale_.size(); ++i) {
      double value = c->values[c->size() == 1 ? 0 : i];
      if (op == "Add") {
        input_shift_[i] += value;
      } else if (op == "Sub") {
        input_shift_[i] -= value;
      } else if (op == "Mul") {
        input_scale_[i] *= value;
        input_shift_[i] *= value;
      } else {
        input_scale_[i] /= value;
        input_shift_[i] /= value;
      }
    }
    current_ = node.output(0);
    return {};
  }

  // Where(IsNaN(x), values, x) before the first layer: the imputation of missing inputs (by
  // values given in the input's own units, before any scaling the graph applies after it).
  Status input_imputation(const onnx::NodeProto& node) {
    if (node.op_type() == "IsNaN") {
      missing_mask_ = node.output(0);
      return {};  // current_ stays the inputs
    }
    if (node.input_size() != 3 || node.input(0) != missing_mask_ || node.input(2) != current_) {
      return bad_graph("node " + describe(node) + " is not Where(IsNaN(x), values, x)");
    }
    SLIPWAY_ASSIGN_OR_RETURN(const Tensor* values, constant(node, 1));
    if (!input_scale_.empty()) return bad_graph("imputation after scaling the inputs is not supported");
    impute_ = values->values;
    current_ = node.output(0);
    return {};
  }

  // The element-wise nodes from `index` on that depend only on the current tensor and scalar
  // constants, up to the next layer, Softmax or the output: which activation do they compute?
  Status activation(std::size_t& index) {
    const auto& nodes = graph_.node();
    std::set<std::string> region = {current_};
    std::vector<const onnx::NodeProto*> members;
    std::string last = current_;
    std::size_t end = index;
    for (; end < static_cast<std::size_t>(nodes.size()); ++end) {
      const auto& node = nodes[static_cast<int>(end)];
      if (node.op_type() == "Constant") {
        SLIPWAY_RETURN_IF_ERROR(add_constant(node));
        continue;
      }
      if (elementwise_operators().count(node.op_type()) == 0) break;
      bool inside = false;
      for (const auto& input : node.input()) {
        if (region.count(input) != 0) {
          inside = true;
        } else if (constants_.count(input) == 0 || constants_.at(input).size() != 1) {
          if (!input.empty()) {
            return bad_graph("node " + describe(node) + " mixes the layer's values with a non-scalar '" + input +
                             "': not an activation Slipway has");
          }
        }
      }
      if (!inside) break;
      members.push_back(&node);
      region.insert(node.output(0));
      last = node.output(0);
    }
    // The region's result is what the next node (or the graph) reads.
    std::string result = last;
    if (end < static_cast<std::size_t>(nodes.size())) result = nodes[static_cast<int>(end)].input(0);
    if (region.count(result) == 0)
      return bad_graph("the values after layer " + std::to_string(layers_.size()) +
                       " branch; only MLPs (one path) are supported");
    SLIPWAY_ASSIGN_OR_RETURN(kernels::Activation found, identify(members, result));
    if (activation_seen_ && found != kernels::Activation::kNone) {
      return bad_graph("two activations after layer " + std::to_string(layers_.size()));
    }
    if (found != kernels::Activation::kNone) {
      layers_.back().activation = found;
      activation_seen_ = true;
    }
    current_ = result;
    index = end;
    return {};
  }

  // Evaluates the region on probe points and names the activation it matches.
  Result<kernels::Activation> identify(const std::vector<const onnx::NodeProto*>& members, const std::string& result) {
    constexpr int kProbes = 121;
    std::vector<float> probes(kProbes);
    for (int i = 0; i < kProbes; ++i) probes[static_cast<std::size_t>(i)] = -6.0f + 0.1f * static_cast<float>(i);
    std::map<std::string, std::vector<double>> values;
    values[current_] = std::vector<double>(probes.begin(), probes.end());
    auto operand = [&](const std::string& name) -> std::vector<double> {
      if (auto found = values.find(name); found != values.end()) return found->second;
      return std::vector<double>(kProbes, constants_.at(name).values[0]);
    };
    for (const onnx::NodeProto* node : members) {
      const std::string& op = node->op_type();
      std::vector<double> a = operand(node->input(0));
      std::vector<double> b = node->input_size() > 1 && !node->input(1).empty() ? operand(node->input(1)) : a;
      std::vector<double> out(kProbes);
      for (std::size_t i = 0; i < static_cast<std::size_t>(kProbes); ++i) {
        double x = a[i], y = b[i];
        if (op == "Add")
          out[i] = x + y;
        else if (op == "Sub")
          out[i] = x - y;
        else if (op == "Mul")
          out[i] = x * y;
        else if (op == "Div")
          out[i] = x / y;
        else if (op == "Pow")
          out[i] = std::pow(x, y);
        else if (op == "Erf")
          out[i] = std::erf(x);
        else if (op == "Tanh")
          out[i] = std::tanh(x);
        else if (op == "Sigmoid")
          out[i] = 1.0 / (1.0 + std::exp(-x));
        else if (op == "Relu")
          out[i] = std::max(x, 0.0);
        else if (op == "Sqrt")
          out[i] = std::sqrt(x);
        else if (op == "Neg")
          out[i] = -x;
        else if (op == "Exp")
          out[i] = std::exp(x);
        else if (op == "Abs")
          out[i] = std::abs(x);
        else if (op == "Gelu") {
          const auto* approximate = attribute(*node, "approximate");
          out[i] = approximate != nullptr && approximate->s() == "tanh"
                       ? 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)))
                       : 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
        } else
          out[i] = x;  // Identity, Cast, Dropout at inference
      }
      values[node->output(0)] = std::move(out);
    }
    const std::vector<double>& computed = values.at(result);
    for (kernels::Activation candidate :
         {kernels::Activation::kNone, kernels::Activation::kRelu, kernels::Activation::kGelu,
          kernels::Activation::kGeluTanh, kernels::Activation::kTanh, kernels::Activation::kSigmoid}) {
      std::vector<float> expected = probes;
      kernels::activate(candidate, expected);
      bool same = true;
      for (std::size_t i = 0; i < expected.size() && same; ++i) {
        same = std::abs(computed[i] - expected[i]) <= 1e-5 * (1.0 + std::abs(expected[i]));
      }
      if (same) return candidate;
    }
    std::string names;
    for (const auto* node : members) names += (names.empty() ? "" : ", ") + node->op_type();
    return bad_graph("the element-wise nodes after layer " + std::to_string(layers_.size()) + " (" + names +
                     ") compute no activation Slipway has (ReLU, GELU, tanh, sigmoid)");
  }

  const onnx::GraphProto& graph_;
  std::map<std::string, Tensor> constants_;
  std::string current_;
  std::int64_t declared_width_ = 0;
  std::vector<MlpLayer> layers_;
  bool activation_seen_ = false;
  bool softmax_ = false;
  std::vector<double> input_scale_, input_shift_;
  std::string missing_mask_;
  std::vector<float> impute_;
};

}  // namespace

Result<std::shared_ptr<const Bundle>> import_onnx(std::span<const std::byte> bytes, const OnnxImportOptions& options) {
  onnx::ModelProto proto;
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()) ||
      !proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    return invalid_argument("not an ONNX model: the file is not a ModelProto");
  }
  if (!proto.has_graph()) return invalid_argument("not an ONNX model: it has no graph");
  for (const auto& opset : proto.opset_import()) {
    if (!opset.domain().empty() && opset.domain() != "ai.onnx") {
      return invalid_argument("ONNX model: operator domain '" + opset.domain() +
                              "' is not supported (tree ensembles import from XGBoost JSON)");
    }
  }
  MlpReader reader(proto.graph());
  SLIPWAY_RETURN_IF_ERROR(reader.read());
  std::vector<MlpLayer>& layers = reader.layers();
  MlpLayer& last = layers.back();
  Task task = Task::kRegression;
  if (reader.softmax()) {
    if (last.outputs < 2) return invalid_argument("ONNX model: Softmax over a single output");
    task = Task::kMulticlassClassification;
  } else if (last.activation == kernels::Activation::kSigmoid && last.outputs == 1) {
    task = Task::kBinaryClassification;  // the bundle applies the sigmoid to the margin
    last.activation = kernels::Activation::kNone;
  } else if (last.outputs != 1) {
    return invalid_argument("ONNX model: " + std::to_string(last.outputs) +
                            " outputs without a Softmax; Slipway serves one regression output or classes");
  }
  std::size_t width = reader.width();
  if (width > static_cast<std::size_t>(kMaxInputs)) {
    return invalid_argument("ONNX model: " + std::to_string(width) + " inputs are more than an MLP here may take");
  }
  // The layers' shapes and values are checked before anything is sized by the width.
  SLIPWAY_ASSIGN_OR_RETURN(auto mlp, MlpModel::make(std::move(layers), MlpPrecision::kFloat32));
  std::vector<std::string> names = options.feature_names;
  if (names.empty()) {
    for (std::size_t index = 0; index < width; ++index) names.push_back("f" + std::to_string(index));
  }
  if (names.size() != width) {
    return invalid_argument("the model takes " + std::to_string(width) + " inputs but " + std::to_string(names.size()) +
                            " feature names were given");
  }
  if (!reader.input_scale().empty() && reader.input_scale().size() != width) {
    return invalid_argument("ONNX model: the input scaling has " + std::to_string(reader.input_scale().size()) +
                            " values for " + std::to_string(width) + " inputs");
  }
  if (!reader.impute().empty() && reader.impute().size() != 1 && reader.impute().size() != width) {
    return invalid_argument("ONNX model: the imputation has " + std::to_string(reader.impute().size()) +
                            " values for " + std::to_string(width) + " inputs");
  }
  std::vector<FeatureTransform> inputs;
  for (std::size_t index = 0; index < width; ++index) {
    FeatureTransform input;
    input.name = names[index];
    // Without imputation in the graph a missing input makes the scores NaN, as in ONNX Runtime.
    input.impute_value =
        reader.impute().empty() ? std::nan("") : reader.impute()[reader.impute().size() == 1 ? 0 : index];
    if (!reader.input_scale().empty()) {
      // scale * x + shift = (x - center) / (1 / scale)
      double scale = reader.input_scale()[index];
      if (!(scale != 0.0) || !std::isfinite(scale)) return invalid_argument("ONNX model: an input is scaled by 0");
      input.scale = 1.0 / scale;
      input.center = -reader.input_shift()[index] / scale;
    }
    inputs.push_back(std::move(input));
  }
  Manifest manifest;
  manifest.task = task;
  manifest.target = options.target;
  if (task == Task::kBinaryClassification) manifest.class_labels = {"0", "1"};
  if (task == Task::kMulticlassClassification) {
    for (std::size_t label = 0; label < mlp->output_count(); ++label) {
      manifest.class_labels.push_back(std::to_string(label));
    }
  }
  if (!options.class_labels.empty()) {
    std::set<std::string> distinct(options.class_labels.begin(), options.class_labels.end());
    if (distinct.size() != options.class_labels.size() || distinct.count("") != 0) {
      return invalid_argument("the class labels must be distinct and not empty");
    }
    if (task == Task::kRegression || options.class_labels.size() != manifest.class_labels.size()) {
      return invalid_argument("the model has " + std::to_string(manifest.class_labels.size()) + " classes but " +
                              std::to_string(options.class_labels.size()) + " labels were given");
    }
    manifest.class_labels = options.class_labels;
  }
  manifest.created_by = "slipway " + std::string(slipway_version()) + " import onnx";
  manifest.code_version = std::string(slipway_code_version());
  manifest.split = "imported";
  manifest.params = {{"model", "onnx"},
                     {"source", options.source},
                     {"producer", proto.producer_name() + " " + proto.producer_version()},
                     {"layers", std::to_string(mlp->layers().size())}};
  return std::make_shared<const Bundle>(std::move(manifest), Preprocessor(std::move(inputs)), std::move(mlp));
}

}  // namespace slipway::model
