// ONNX export with Debian's libonnx: the graph is built as protobuf messages and checked by
// onnx::checker before any byte leaves (so a file we write loads in ONNX Runtime).
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "model/interchange.h"
#include "slipway/model.h"

namespace slipway::model {
namespace {

constexpr int kOpset = 17;
constexpr int kMlOpset = 3;

class GraphBuilder {
 public:
  explicit GraphBuilder(onnx::GraphProto& graph) : graph_(graph) {}

  // A float tensor initializer; returns its name.
  std::string constant(std::span<const float> values, const std::vector<std::int64_t>& dims, const std::string& hint) {
    onnx::TensorProto* tensor = graph_.add_initializer();
    std::string name = unique(hint);
    tensor->set_name(name);
    tensor->set_data_type(onnx::TensorProto::FLOAT);
    for (std::int64_t dim : dims) tensor->add_dims(dim);
    tensor->set_raw_data(std::string(reinterpret_cast<const char*>(values.data()), values.size_bytes()));
    return name;
  }
  std::string scalar(float value, const std::string& hint) { return constant(std::span(&value, 1), {}, hint); }

  // A node of `op` on `inputs`; returns its (first) output's name.
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs, const std::string& output_hint,
                        const std::string& domain = "") {
    onnx::NodeProto* node = graph_.add_node();
    node->set_op_type(op);
    node->set_name(unique(op));
    if (!domain.empty()) node->set_domain(domain);
    for (const auto& input : inputs) node->add_input(input);
    node->add_output(unique(output_hint));
    return *node;
  }
  std::string apply(const std::string& op, const std::vector<std::string>& inputs, const std::string& output_hint) {
    return node(op, inputs, output_hint).output(0);
  }

  void value_info(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* into, const std::string& name,
                  std::size_t columns) {
    onnx::ValueInfoProto* info = into->Add();
    info->set_name(name);
    auto* tensor = info->mutable_type()->mutable_tensor_type();
    tensor->set_elem_type(onnx::TensorProto::FLOAT);
    tensor->mutable_shape()->add_dim()->set_dim_param("rows");
    tensor->mutable_shape()->add_dim()->set_dim_value(static_cast<std::int64_t>(columns));
  }

  // Renames the last node's output (the graph's output needs a fixed name).
  void rename_output(const std::string& from, const std::string& to) {
    for (auto& node : *graph_.mutable_node()) {
      for (auto& output : *node.mutable_output()) {
        if (output == from) output = to;
      }
    }
  }

 private:
  std::string unique(const std::string& hint) { return hint + "_" + std::to_string(counter_++); }

  onnx::GraphProto& graph_;
  int counter_ = 0;
};

onnx::AttributeProto& add_attribute(onnx::NodeProto& node, const std::string& name,
                                    onnx::AttributeProto::AttributeType type) {
  auto* attribute = node.add_attribute();
  attribute->set_name(name);
  attribute->set_type(type);
  return *attribute;
}
void set_attribute(onnx::NodeProto& node, const std::string& name, std::int64_t value) {
  add_attribute(node, name, onnx::AttributeProto::INT).set_i(value);
}
void set_attribute(onnx::NodeProto& node, const std::string& name, float value) {
  add_attribute(node, name, onnx::AttributeProto::FLOAT).set_f(value);
}
void set_attribute(onnx::NodeProto& node, const std::string& name, const std::string& value) {
  add_attribute(node, name, onnx::AttributeProto::STRING).set_s(value);
}
void set_attribute(onnx::NodeProto& node, const std::string& name, const std::vector<std::int64_t>& values) {
  auto& attribute = add_attribute(node, name, onnx::AttributeProto::INTS);
  for (auto value : values) attribute.add_ints(value);
}
void set_attribute(onnx::NodeProto& node, const std::string& name, const std::vector<float>& values) {
  auto& attribute = add_attribute(node, name, onnx::AttributeProto::FLOATS);
  for (auto value : values) attribute.add_floats(value);
}
void set_attribute(onnx::NodeProto& node, const std::string& name, const std::vector<std::string>& values) {
  auto& attribute = add_attribute(node, name, onnx::AttributeProto::STRINGS);
  for (const auto& value : values) attribute.add_strings(value);
}

// The preprocessing of numeric inputs as nodes: NaN -> impute value (NaN for an input that keeps
// missing values missing), then (x - center) / scale.
// Returns the name of the model's input matrix.
std::string numeric_preprocessing(GraphBuilder& graph, const Preprocessor& preprocessor, const std::string& input) {
  const auto& features = preprocessor.features();
  std::vector<float> impute, center, inverse_scale;
  bool imputes = false, scales = false;
  for (const auto& feature : features) {
    impute.push_back(static_cast<float>(feature.impute_value));
    imputes = imputes || !std::isnan(feature.impute_value);
    center.push_back(static_cast<float>(feature.center));
    inverse_scale.push_back(static_cast<float>(1.0 / feature.scale));
    scales = scales || feature.center != 0.0 || feature.scale != 1.0;
  }
  auto width = static_cast<std::int64_t>(features.size());
  std::string value = input;
  if (imputes) {
    std::string missing = graph.apply("IsNaN", {value}, "missing");
    value = graph.apply("Where", {missing, graph.constant(impute, {1, width}, "impute"), value}, "imputed");
  }
  if (scales) {
    value = graph.apply("Sub", {value, graph.constant(center, {1, width}, "center")}, "centered");
    value = graph.apply("Mul", {value, graph.constant(inverse_scale, {1, width}, "inverse_scale")}, "scaled");
  }
  return value;
}

std::string activation(GraphBuilder& graph, kernels::Activation kind, const std::string& x) {
  switch (kind) {
    case kernels::Activation::kNone:
      return x;
    case kernels::Activation::kRelu:
      return graph.apply("Relu", {x}, "relu");
    case kernels::Activation::kTanh:
      return graph.apply("Tanh", {x}, "tanh");
    case kernels::Activation::kSigmoid:
      return graph.apply("Sigmoid", {x}, "sigmoid");
    case kernels::Activation::kGelu: {
      // Gelu is an operator from opset 20 on; before, its definition: 0.5 x (1 + erf(x / sqrt 2)).
      std::string erf = graph.apply(
          "Erf", {graph.apply("Mul", {x, graph.scalar(0.70710678118654752f, "inverse_sqrt2")}, "gelu_in")}, "erf");
      std::string one_plus = graph.apply("Add", {erf, graph.scalar(1.0f, "one")}, "gelu_sum");
      return graph.apply("Mul", {graph.apply("Mul", {x, graph.scalar(0.5f, "half")}, "gelu_half"), one_plus}, "gelu");
    }
    case kernels::Activation::kGeluTanh: {
      std::string cube = graph.apply("Mul", {graph.apply("Mul", {x, x}, "square"), x}, "cube");
      std::string inner =
          graph.apply("Add", {x, graph.apply("Mul", {cube, graph.scalar(0.044715f, "gelu_cubic")}, "cubic")}, "inner");
      std::string tanh = graph.apply(
          "Tanh", {graph.apply("Mul", {inner, graph.scalar(0.79788456080286536f, "sqrt_2_over_pi")}, "scaled")},
          "tanh");
      std::string one_plus = graph.apply("Add", {tanh, graph.scalar(1.0f, "one")}, "gelu_sum");
      return graph.apply("Mul", {graph.apply("Mul", {x, graph.scalar(0.5f, "half")}, "gelu_half"), one_plus}, "gelu");
    }
  }
  return x;
}

std::string mlp_nodes(GraphBuilder& graph, const MlpModel& mlp, std::string value) {
  for (const MlpLayer& layer : mlp.layers()) {
    auto inputs = static_cast<std::int64_t>(layer.inputs), outputs = static_cast<std::int64_t>(layer.outputs);
    auto& gemm = graph.node("Gemm",
                            {value, graph.constant(layer.weights, {outputs, inputs}, "weight"),
                             graph.constant(layer.bias, {outputs}, "bias")},
                            "dense");
    set_attribute(gemm, "transB", std::int64_t{1});
    value = gemm.output(0);
    if (layer.normalized()) {
      auto& norm = graph.node("LayerNormalization",
                              {value, graph.constant(layer.norm_scale, {outputs}, "norm_scale"),
                               graph.constant(layer.norm_shift, {outputs}, "norm_shift")},
                              "normalized");
      set_attribute(norm, "axis", std::int64_t{-1});
      set_attribute(norm, "epsilon", layer.norm_epsilon);
      value = norm.output(0);
    }
    value = activation(graph, layer.activation, value);
  }
  return value;
}

// A linear model as one Gemm: its weights in float32 (int8 weights times their scale, rounded to
// float32), computed in float32 where the bundle sums in double.
std::string linear_nodes(GraphBuilder& graph, const LinearModel& linear, const std::string& value) {
  std::vector<float> weights;
  if (linear.has_int8_weights()) {
    for (std::int8_t weight : linear.int8_weights())
      weights.push_back(static_cast<float>(weight * linear.weight_scale()));
  } else {
    for (double weight : linear.weights()) weights.push_back(static_cast<float>(weight));
  }
  float bias = static_cast<float>(linear.bias());
  auto width = static_cast<std::int64_t>(weights.size());
  auto& gemm = graph.node(
      "Gemm", {value, graph.constant(weights, {1, width}, "weight"), graph.constant(std::span(&bias, 1), {1}, "bias")},
      "linear");
  set_attribute(gemm, "transB", std::int64_t{1});
  return gemm.output(0);
}

Result<std::string> tree_nodes(GraphBuilder& graph, const TreeEnsembleModel& trees, const std::string& value) {
  const auto nodes = trees.nodes();
  std::vector<std::int64_t> tree_ids, node_ids, feature_ids, true_ids, false_ids, missing_tracks_true;
  std::vector<float> thresholds, hit_rates;
  std::vector<std::string> modes;
  std::vector<std::int64_t> target_tree_ids, target_node_ids, target_ids;
  std::vector<float> target_weights;
  for (std::size_t tree = 0; tree < trees.roots().size(); ++tree) {
    const LocalTree local_tree = breadth_first(nodes, trees.roots()[tree]);
    for (std::size_t local = 0; local < local_tree.nodes.size(); ++local) {
      const TreeNode& node = nodes[local_tree.nodes[local]];
      tree_ids.push_back(static_cast<std::int64_t>(tree));
      node_ids.push_back(static_cast<std::int64_t>(local));
      hit_rates.push_back(1.0f);
      if (node.is_leaf()) {
        modes.emplace_back("LEAF");
        feature_ids.push_back(0);
        thresholds.push_back(0.0f);
        true_ids.push_back(0);
        false_ids.push_back(0);
        missing_tracks_true.push_back(0);
        target_tree_ids.push_back(static_cast<std::int64_t>(tree));
        target_node_ids.push_back(static_cast<std::int64_t>(local));
        target_ids.push_back(trees.tree_group(tree));
        target_weights.push_back(node.value);
        continue;
      }
      if (node.is_categorical()) {
        return invalid_argument(
            "ONNX trees have no category-set splits; export this model as xgboost-json, or "
            "train it with categorical_splits=ordinal");
      }
      modes.emplace_back("BRANCH_LT");
      feature_ids.push_back(node.feature());
      thresholds.push_back(node.value);
      true_ids.push_back(local_tree.left[local]);
      false_ids.push_back(local_tree.right[local]);
      missing_tracks_true.push_back(node.default_left() ? 1 : 0);
    }
  }
  auto& ensemble = graph.node("TreeEnsembleRegressor", {value}, "margin", "ai.onnx.ml");
  set_attribute(ensemble, "n_targets", static_cast<std::int64_t>(trees.output_count()));
  set_attribute(ensemble, "base_values", std::vector<float>(trees.output_count(), trees.base_margin()));
  set_attribute(ensemble, "aggregate_function", std::string("SUM"));
  set_attribute(ensemble, "post_transform", std::string("NONE"));
  set_attribute(ensemble, "nodes_treeids", tree_ids);
  set_attribute(ensemble, "nodes_nodeids", node_ids);
  set_attribute(ensemble, "nodes_featureids", feature_ids);
  set_attribute(ensemble, "nodes_modes", modes);
  set_attribute(ensemble, "nodes_values", thresholds);
  set_attribute(ensemble, "nodes_hitrates", hit_rates);
  set_attribute(ensemble, "nodes_truenodeids", true_ids);
  set_attribute(ensemble, "nodes_falsenodeids", false_ids);
  set_attribute(ensemble, "nodes_missing_value_tracks_true", missing_tracks_true);
  set_attribute(ensemble, "target_treeids", target_tree_ids);
  set_attribute(ensemble, "target_nodeids", target_node_ids);
  set_attribute(ensemble, "target_ids", target_ids);
  set_attribute(ensemble, "target_weights", target_weights);
  return ensemble.output(0);
}

}  // namespace

Result<OnnxExport> export_onnx(const Bundle& bundle) {
  const auto* mlp = dynamic_cast<const MlpModel*>(&bundle.model());
  const auto* trees = dynamic_cast<const TreeEnsembleModel*>(&bundle.model());
  const auto* linear = dynamic_cast<const LinearModel*>(&bundle.model());
  if (mlp == nullptr && trees == nullptr && linear == nullptr) {
    return invalid_argument("ONNX export takes MLPs, tree ensembles and linear models; this bundle's model is " +
                            std::string(bundle.model().family()));
  }
  if (trees != nullptr && trees->quantized_layout()) {
    // The quantized layout predicts the same floats; only bf16 leaves change them.
    if (trees->bf16_leaves()) return invalid_argument("ONNX export of bf16 tree leaves is not supported");
  }
  OnnxExport exported;
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("slipway");
  model.set_producer_version(std::string(slipway_version()));
  model.set_doc_string("target '" + bundle.manifest().target + "', task " + std::string(task_name(bundle.task())));
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  if (trees != nullptr) {
    auto* ml = model.add_opset_import();
    ml->set_domain("ai.onnx.ml");
    ml->set_version(kMlOpset);
  }
  onnx::GraphProto& graph_proto = *model.mutable_graph();
  graph_proto.set_name("slipway");
  GraphBuilder graph(graph_proto);

  const Preprocessor& preprocessor = bundle.preprocessor();
  bool numeric = true;
  std::vector<std::string> categorical;
  for (const auto& feature : preprocessor.features()) {
    if (feature.type == data::ColumnType::kCategorical) {
      numeric = false;
      categorical.push_back(feature.name);
    }
  }
  if (linear != nullptr) {
    exported.warning =
        "the bundle sums a linear model in double; the ONNX graph in float32, so scores can differ "
        "in their last digits";
  }
  if (mlp != nullptr && mlp->precision() != MlpPrecision::kFloat32) {
    exported.warning = "the bundle computes in " + std::string(mlp_precision_name(mlp->precision())) +
                       "; the ONNX graph computes in float32 with the weights it was made from, so its scores "
                       "differ from the bundle's by the " +
                       std::string(mlp_precision_name(mlp->precision())) + " rounding";
  }
  std::string value;
  if (numeric) {
    graph.value_info(graph_proto.mutable_input(), "input", preprocessor.features().size());
    value = numeric_preprocessing(graph, preprocessor, "input");
  } else {
    graph.value_info(graph_proto.mutable_input(), "features", preprocessor.output_width());
    value = "features";
    exported.warning += std::string(exported.warning.empty() ? "" : "; ") + "the bundle has categorical inputs (" +
                        join(categorical, ", ") +
                        "), which ONNX cannot encode from text here: the graph's input 'features' is the "
                        "preprocessed matrix of " +
                        std::to_string(preprocessor.output_width()) + " columns";
  }
  if (mlp != nullptr) {
    value = mlp_nodes(graph, *mlp, value);
  } else if (linear != nullptr) {
    value = linear_nodes(graph, *linear, value);
  } else {
    SLIPWAY_ASSIGN_OR_RETURN(value, tree_nodes(graph, *trees, value));
  }
  std::size_t columns = bundle.model().output_count();
  if (bundle.task() == Task::kBinaryClassification) {
    value = graph.apply("Sigmoid", {value}, "probability");
  } else if (bundle.task() == Task::kMulticlassClassification) {
    auto& softmax = graph.node("Softmax", {value}, "probabilities");
    set_attribute(softmax, "axis", std::int64_t{1});
    value = softmax.output(0);
  } else {
    value = graph.apply("Identity", {value}, "prediction");
  }
  graph.rename_output(value, "scores");
  graph.value_info(graph_proto.mutable_output(), "scores", columns);

  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& error) {
    return internal_error(std::string("the exported ONNX graph fails onnx.checker: ") + error.what());
  }
  std::string bytes;
  if (!model.SerializeToString(&bytes)) return internal_error("the ONNX model could not be serialized");
  exported.bytes.resize(bytes.size());
  std::memcpy(exported.bytes.data(), bytes.data(), bytes.size());
  return exported;
}

}  // namespace slipway::model
