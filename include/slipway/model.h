// slipway/model.h — the bundle: everything serving needs to reproduce training-time scoring.
//
// A Bundle is preprocessing (imputation, categorical encoding, standardization) + a Model (the
// learned function over the preprocessed matrix) + postprocessing (sigmoid, label names) + a
// manifest (lineage and metrics). It is immutable once built, so a loaded bundle may be shared by
// any number of threads; every const method is thread-safe.
//
// File format v1 (docs/formats.md): magic, version, JSON manifest, 64-byte-aligned binary
// sections, and a trailer holding the sha256 of everything before it. The bundle's identity is
// the sha256 of the whole file. Each model family writes and reads its own manifest fields and
// sections (src/model/model_family.h); a bundle loaded from a file views those sections in place.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "slipway/core.h"
#include "slipway/data.h"
#include "slipway/kernels.h"

namespace slipway::model {

enum class Task { kBinaryClassification, kMulticlassClassification, kRegression };
std::string_view task_name(Task task);

enum class CategoricalEncoding { kOneHot, kOrdinal };

// How one input column becomes preprocessed features.
struct FeatureTransform {
  std::string name;
  data::ColumnType type = data::ColumnType::kNumeric;
  // Numeric: x' = ((missing ? impute_value : x) - center) / scale.
  double impute_value = 0.0;
  double center = 0.0;
  double scale = 1.0;
  // Categorical: known levels, most frequent first. One-hot adds one slot per level plus an
  // "other" slot for unseen, infrequent and missing values; ordinal maps level i to i and the
  // rest to levels.size(), then centers and scales like a number.
  CategoricalEncoding encoding = CategoricalEncoding::kOneHot;
  std::vector<std::string> levels;

  std::size_t width() const;
};

struct PreprocessOptions {
  CategoricalEncoding encoding = CategoricalEncoding::kOneHot;
  // Levels beyond this many (the rarest) share the "other" slot.
  std::size_t max_categories = 100;
  bool standardize = true;
  // false: missing numbers stay NaN (tree models route them), impute_value is NaN.
  bool impute_missing = true;
};

// String keys found by std::string_view, without building a std::string per lookup.
struct TransparentStringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view text) const noexcept { return std::hash<std::string_view>{}(text); }
};
template <typename Value>
using StringMap = std::unordered_map<std::string, Value, TransparentStringHash, std::equal_to<>>;

// One input column for Preprocessor::transform_columns: `numbers` (NaN = missing) for a numeric
// feature, `texts` (nullopt = missing) for a categorical one.
struct ColumnInput {
  std::span<const float> numbers;
  std::span<const std::optional<std::string_view>> texts;
};

class Preprocessor {
 public:
  Preprocessor() = default;
  explicit Preprocessor(std::vector<FeatureTransform> features);

  // Learns the transform from `table`'s columns named in `feature_names`.
  static Result<Preprocessor> fit(const data::Table& table, const std::vector<std::string>& feature_names,
                                  const PreprocessOptions& options);

  const std::vector<FeatureTransform>& features() const { return features_; }
  // Bytes held by the transforms and their level lookups (an estimate of the heap they use).
  std::size_t memory_bytes() const;
  std::size_t output_width() const { return output_width_; }
  // Names of the output features: "col" for numbers, "col=level" and "col=<other>" for one-hot.
  std::vector<std::string> output_names() const;

  // Writes batch.row_count() x output_width() floats, row-major, into `out` (resized).
  // Columns are matched by name; extra columns are ignored. InvalidArgument naming the column if
  // one is missing or has the wrong type.
  Status transform(const data::Table& batch, std::vector<float>& out) const;
  // The same from one column per feature, in features() order, each of `rows` values: the path
  // of online requests, which builds no table. InvalidArgument naming the feature when a column
  // has the wrong kind or length.
  Status transform_columns(std::span<const ColumnInput> columns, std::size_t rows, std::vector<float>& out) const;
  // The position of the feature called `name` in features(); nullopt when there is none.
  std::optional<std::size_t> feature_index(std::string_view name) const;

 private:
  std::vector<FeatureTransform> features_;
  std::size_t output_width_ = 0;
  // Per feature, level -> index in `levels`, built once so scoring a row does no hashing setup.
  std::vector<StringMap<std::uint32_t>> level_index_;
  StringMap<std::size_t> feature_index_;
};

// A read-only array that either owns its elements or views elements that a shared owner keeps
// alive: the mapping of a bundle file (Bundle::load), so a loaded model's large arrays are used
// from the file without a copy. Copies share the elements. Immutable, so any number of threads may
// read it.
template <typename T>
class SharedArray {
 public:
  SharedArray() = default;
  // Owns `values` (moved in: no element is copied).
  explicit SharedArray(std::vector<T> values) {
    auto owned = std::make_shared<const std::vector<T>>(std::move(values));
    elements_ = std::span<const T>(*owned);
    held_bytes_ = owned->capacity() * sizeof(T);
    owner_ = std::move(owned);
  }
  // Views `elements`, which `owner` keeps valid for as long as any copy of this array lives.
  SharedArray(std::span<const T> elements, std::shared_ptr<const void> owner)
      : owner_(std::move(owner)), elements_(elements), held_bytes_(elements.size_bytes()) {}

  std::span<const T> span() const { return elements_; }
  operator std::span<const T>() const { return elements_; }
  const T* data() const { return elements_.data(); }
  std::size_t size() const { return elements_.size(); }
  bool empty() const { return elements_.empty(); }
  const T& operator[](std::size_t index) const { return elements_[index]; }
  auto begin() const { return elements_.begin(); }
  auto end() const { return elements_.end(); }
  std::vector<T> to_vector() const { return {elements_.begin(), elements_.end()}; }
  // Bytes held: the owned buffer, or the viewed elements (their mapped pages count too).
  std::size_t memory_bytes() const { return held_bytes_; }

 private:
  std::shared_ptr<const void> owner_;
  std::span<const T> elements_;
  std::size_t held_bytes_ = 0;
};

// The learned function over the preprocessed matrix. Implementations are immutable after
// construction and thread-safe.
class Model {
 public:
  virtual ~Model() = default;
  virtual std::string_view family() const = 0;
  virtual std::size_t input_width() const = 0;
  // Margins per row: 1, or one per class for a multiclass model.
  virtual std::size_t output_count() const { return 1; }
  // Raw scores (margins) for `rows` rows of `features` (rows x input_width(), row-major) into
  // `out` (rows x output_count(), row-major).
  virtual void predict_margin(std::span<const float> features, std::size_t rows, std::span<float> out) const = 0;
  // Bytes the model holds in memory (its arrays), for serving's memory accounting.
  virtual std::size_t memory_bytes() const = 0;
};

// score = bias + sum(weights[i] * x[i]).
class LinearModel final : public Model {
 public:
  LinearModel(std::vector<double> weights, double bias);
  // The weights owned or viewed (a loaded bundle's "linear.weights" section).
  LinearModel(SharedArray<double> weights, double bias);
  // Weights stored as int8 with one scale: weight i is int8_weights[i] x scale, and the score
  // bias + scale x sum(int8_weights[i] x x[i]).
  LinearModel(SharedArray<std::int8_t> int8_weights, double scale, double bias);
  std::string_view family() const override { return "linear"; }
  std::size_t input_width() const override { return int8_ ? int8_weights_.size() : weights_.size(); }
  void predict_margin(std::span<const float> features, std::size_t rows, std::span<float> out) const override;
  std::size_t memory_bytes() const override {
    return sizeof(*this) + weights_.memory_bytes() + int8_weights_.memory_bytes();
  }
  // The float64 weights; empty for an int8 model.
  std::span<const double> weights() const { return weights_; }
  double bias() const { return bias_; }
  bool has_int8_weights() const { return int8_; }
  std::span<const std::int8_t> int8_weights() const { return int8_weights_; }
  double weight_scale() const { return scale_; }
  // The same model with int8 weights: scale = max |weight| / 127, each weight rounded to the
  // nearest multiple of it. Its error is measured, not promised (slipway optimize).
  std::shared_ptr<const LinearModel> with_int8_weights() const;

 private:
  SharedArray<double> weights_;
  SharedArray<std::int8_t> int8_weights_;
  bool int8_ = false;
  double scale_ = 1.0;
  double bias_;
};

// A decision-tree ensemble (gradient-boosted trees) over raw numeric features, stored for
// prediction: every tree's nodes in one flat array, 16 bytes a node.
//
// At a numeric node a row goes left when its feature is NaN and default_left is set, or when
// `x < threshold` (strict, in float32: XGBoost's rule). At a categorical node the feature holds a
// category code; NaN follows default_left, codes in the node's category set go right and every
// other code (unseen ones included) goes left, as in XGBoost. margin = base_margin + the leaf
// values reached, accumulated in float32 in tree order, per output group (class).
struct TreeNode {
  static constexpr std::uint32_t kLeafFlag = 1U << 31;
  static constexpr std::uint32_t kDefaultLeftFlag = 1U << 30;
  static constexpr std::uint32_t kCategoricalFlag = 1U << 29;
  static constexpr std::uint32_t kFeatureMask = kCategoricalFlag - 1;

  // The threshold, the leaf value at a leaf, or at a categorical node the bit pattern of an
  // offset into the ensemble's category_sets.
  float value = 0.0f;
  std::uint32_t feature_and_flags = 0;
  std::uint32_t left = 0;   // absolute node index of the left child
  std::uint32_t right = 0;  // absolute node index of the right child

  bool is_leaf() const { return (feature_and_flags & kLeafFlag) != 0; }
  bool default_left() const { return (feature_and_flags & kDefaultLeftFlag) != 0; }
  bool is_categorical() const { return (feature_and_flags & kCategoricalFlag) != 0; }
  std::uint32_t feature() const { return feature_and_flags & kFeatureMask; }
  std::uint32_t category_set() const;
  static float category_set_value(std::uint32_t offset);
};
static_assert(sizeof(TreeNode) == 16);

// Whether a row whose feature value is `x` goes to `node`'s left child. `category_sets` is the
// ensemble's, read only at categorical nodes.
bool goes_left(const TreeNode& node, float x, std::span<const std::uint32_t> category_sets);

// Everything that defines a tree ensemble; TreeEnsembleModel adds evaluation layouts over it.
struct TreeEnsembleData {
  std::vector<TreeNode> nodes;
  std::vector<std::uint32_t> roots;  // roots[t]: index in `nodes` of tree t's root
  std::size_t input_width = 0;
  float base_margin = 0.0f;
  // Optional, empty or one value per node: training hessian sum (cover) and loss reduction of
  // each split (gain). Explanations need cover; importance uses both.
  std::vector<float> cover;
  std::vector<float> gain;
  // Per categorical node, at its offset: the word count n, then n 32-bit words whose set bits
  // are the categories that go right.
  std::vector<std::uint32_t> category_sets;
  // Multiclass: the output group (class) of each tree, and the number of groups. Empty groups
  // and group_count 1 for a single output.
  std::vector<std::uint32_t> tree_groups;
  std::size_t group_count = 1;
};

// The same ensemble as TreeEnsembleModel holds it: read-only arrays, owned or viewing a loaded
// bundle's sections (see SharedArray).
struct TreeEnsembleArrays {
  TreeEnsembleArrays() = default;
  // Owns `data`'s vectors (moved in).
  explicit TreeEnsembleArrays(TreeEnsembleData data);
  // A copy as vectors, to build on (a warm start or a resumed checkpoint).
  TreeEnsembleData to_data() const;

  SharedArray<TreeNode> nodes;
  SharedArray<std::uint32_t> roots;
  std::size_t input_width = 0;
  float base_margin = 0.0f;
  SharedArray<float> cover;
  SharedArray<float> gain;
  SharedArray<std::uint32_t> category_sets;
  SharedArray<std::uint32_t> tree_groups;
  std::size_t group_count = 1;
};

class CompleteTrees;   // a prediction layout for shallow trees, private to model
class QuantizedTrees;  // its quantized form, private to model

// A multilayer perceptron: layers of a dense product, an optional layer normalization and an
// activation (the last layer's outputs are the margins, so it usually has none), run with the
// dense kernels (slipway/kernels.h) in one precision. The layers keep their float32 weights (what
// the bundle stores); bf16 and int8 layers are packed from them when the model is made, so a
// precision is a property of the model, not of the file's bytes.
enum class MlpPrecision { kFloat32, kBfloat16, kInt8 };
std::string_view mlp_precision_name(MlpPrecision precision);  // "float32", "bfloat16", "int8"
std::optional<MlpPrecision> mlp_precision_by_name(std::string_view name);

struct MlpLayer {
  std::size_t inputs = 0, outputs = 0;
  SharedArray<float> weights;  // outputs x inputs, row-major (PyTorch's Linear, ONNX Gemm with transB)
  SharedArray<float> bias;     // outputs
  // Layer normalization of the outputs before the activation (kernels::layer_norm): both empty
  // for none, else `outputs` values each.
  SharedArray<float> norm_scale, norm_shift;
  float norm_epsilon = 1e-5f;
  kernels::Activation activation = kernels::Activation::kNone;
  // int8 only: the static scale this layer's inputs are quantized with (calibrated ahead, see
  // MlpModel::calibrate); 0 quantizes each row by its own largest value.
  float input_scale = 0.0f;

  bool normalized() const { return !norm_scale.empty(); }
};

// Float arrays by name that a training checkpoint carries besides the weights (optimizer
// moments, the best weights so far); empty in a model to serve.
using MlpTrainingState = std::map<std::string, SharedArray<float>>;

class MlpModel final : public Model {
 public:
  // InvalidArgument unless each layer's inputs are the previous layer's outputs, the arrays have
  // their sizes, every weight, bias and normalization value is finite, epsilon is positive, and
  // (int8) no layer is deeper than the kernels' exact-sum limit.
  static Result<std::shared_ptr<const MlpModel>> make(std::vector<MlpLayer> layers, MlpPrecision precision,
                                                      MlpTrainingState training_state = {});

  std::string_view family() const override { return "mlp"; }
  std::size_t input_width() const override { return layers_.front().inputs; }
  std::size_t output_count() const override { return layers_.back().outputs; }
  // Finite features are the precondition (the preprocessor imputes missing values); each layer's
  // rows are rounded to bf16 or quantized per row for int8 as the kernels do.
  void predict_margin(std::span<const float> features, std::size_t rows, std::span<float> out) const override;
  std::size_t memory_bytes() const override;

  const std::vector<MlpLayer>& layers() const { return layers_; }
  MlpPrecision precision() const { return precision_; }
  const MlpTrainingState& training_state() const { return training_state_; }
  // The same layers in another precision, without training state (make()'s checks apply: int8
  // has a depth limit).
  Result<std::shared_ptr<const MlpModel>> with_precision(MlpPrecision precision) const;

  // Static int8 activation scales, one per layer, from the float32 forward pass over `rows` rows of
  // preprocessed `features`: each layer's inputs' largest |x| (percentile 100), or that percentile
  // of their |x| (e.g. 99.99, which lets rare outliers clip), divided by 127.
  std::vector<float> calibrate(std::span<const float> features, std::size_t rows, double percentile) const;
  // The same layers in int8 with those static scales.
  Result<std::shared_ptr<const MlpModel>> with_int8_calibration(std::span<const float> input_scales) const;

  struct Packed;  // the kernels' layouts of every layer
  // Use make(): this trusts the layers (make_shared needs it public).
  MlpModel(std::vector<MlpLayer> layers, MlpPrecision precision, MlpTrainingState training_state);
  ~MlpModel() override;

 private:
  std::vector<MlpLayer> layers_;
  MlpPrecision precision_;
  MlpTrainingState training_state_;
  std::unique_ptr<const Packed> packed_;
};

class TreeEnsembleModel final : public Model {
 public:
  // The caller guarantees the structure (children inside `nodes`, features < input_width, no
  // cycles, category sets inside category_sets); validate() checks it.
  explicit TreeEnsembleModel(TreeEnsembleData data);
  // `quantized_layout`: predict through the quantized layout (see with_quantized_layout) when the
  // ensemble fits it, else as usual; quantized_layout() tells which.
  // `bf16_leaves` (with the quantized layout): leaves as bfloat16, half their bytes, outputs
  // changed slightly (measured by `slipway compare`).
  explicit TreeEnsembleModel(TreeEnsembleArrays arrays, bool quantized_layout = false, bool bf16_leaves = false);
  ~TreeEnsembleModel() override;
  // InvalidArgument naming the first node or tree that breaks the structure.
  static Status validate(const TreeEnsembleData& data);
  static Status validate(const TreeEnsembleArrays& arrays);

  std::string_view family() const override { return "tree_ensemble"; }
  std::size_t input_width() const override { return data_.input_width; }
  std::size_t output_count() const override { return data_.group_count; }
  void predict_margin(std::span<const float> features, std::size_t rows, std::span<float> out) const override;
  std::size_t memory_bytes() const override;

  // The same ensemble predicting through the quantized layout (slipway/kernels.h): each input
  // mapped to its bin among the thresholds its feature splits on, and nodes packed into one word,
  // so a tree level reads half as much. Exact by construction: the same floats, bit for bit.
  // FailedPrecondition, saying why, when the trees do not fit the layout (categorical splits,
  // deeper than 10, over 32,768 inputs or 65,534 thresholds on one input).
  Result<std::shared_ptr<const TreeEnsembleModel>> with_quantized_layout(bool bf16_leaves = false) const;
  bool quantized_layout() const { return quantized_ != nullptr; }
  bool bf16_leaves() const;
  // The most distinct split thresholds on one input (up to 254 would fit 8-bit bins); 0 when not
  // quantized.
  std::size_t quantized_max_thresholds() const;

  // The ensemble's arrays; a bundle loaded by Bundle::load views its file's sections through them.
  const TreeEnsembleArrays& arrays() const { return data_; }
  // A copy as vectors, to build on (warm starts, resumed checkpoints).
  TreeEnsembleData to_data() const { return data_.to_data(); }
  std::span<const TreeNode> nodes() const { return data_.nodes; }
  std::span<const std::uint32_t> roots() const { return data_.roots; }
  float base_margin() const { return data_.base_margin; }
  std::span<const float> cover() const { return data_.cover; }
  std::span<const float> gain() const { return data_.gain; }
  bool has_statistics() const { return !data_.cover.empty(); }
  std::uint32_t tree_group(std::size_t tree) const { return data_.tree_groups.empty() ? 0 : data_.tree_groups[tree]; }

  // Exact path-dependent TreeSHAP (Lundberg et al. 2018) for one row of input_width() features:
  // writes output_count() blocks of input_width() + 1 values into `contributions`, the last of
  // each block being the bias (base margin plus each tree's cover-weighted mean leaf); a block
  // sums to the row's margin for that output. FailedPrecondition when the model has no covers.
  Status explain(std::span<const float> row, std::span<float> contributions) const;

  struct Importance {
    std::vector<std::uint64_t> splits;  // per feature: internal nodes that split on it
    std::vector<double> total_gain;     // empty without statistics
    std::vector<double> total_cover;    // empty without statistics
  };
  Importance importance() const;

  struct PathElement;  // TreeSHAP's working state, defined in tree_shap.cpp

 private:
  void tree_shap(std::span<const float> row, std::span<float> phi, std::uint32_t node_index, std::uint32_t unique_depth,
                 PathElement* parent_path, float parent_zero_fraction, float parent_one_fraction,
                 std::int64_t parent_feature) const;
  void predict_by_walking(std::span<const float> features, std::size_t rows, std::span<float> out) const;

  TreeEnsembleArrays data_;
  // The evaluation layout: nodes with every leaf pointing at itself, so a block of rows can take
  // exactly depth_[t] branch-free steps through tree t (rows that reach a leaf early stay). Empty
  // when the complete-tree kernel does every prediction, so no copy of the nodes is made then.
  std::vector<TreeNode> stepping_nodes_;
  std::vector<std::uint32_t> depth_;
  bool has_categorical_ = false;
  // Trees of depth <= 10 without categorical splits: the complete-tree layout and its vector
  // kernels; null otherwise.
  std::unique_ptr<const CompleteTrees> complete_;
  // The quantized layout when asked for and possible; it then does every prediction.
  std::unique_ptr<const QuantizedTrees> quantized_;
  std::vector<float> mean_value_;  // per node: cover-weighted mean of the leaves below (needs cover)
};

// Lineage and evaluation that travel with the bundle. Everything here is a deterministic
// function of the spec, the data and the code version, so training twice with the same seed
// gives the same bytes.
// The distribution of one input, or of the predictions, over the training rows: what serving
// traffic is compared with (skew) by `slipway monitor`.
struct FeatureProfile {
  std::string name;
  data::ColumnType type = data::ColumnType::kNumeric;
  // Numeric: ascending edges (at least 2) cut at the training quantiles. Counted in slots: below
  // the first edge, each bin [edges[i-1], edges[i]) (the last with its upper edge), above the
  // last edge, so values outside the training range count apart.
  std::vector<double> edges;
  // Categorical: the most frequent levels (at most kMaxProfileLevels); the rest count as "other".
  std::vector<std::string> levels;
  std::vector<double> counts;  // per slot (edges.size() + 1); or per level, then "other"
  double missing = 0;          // rows without a value (not in counts)

  // Where `column`'s values fall in this profile's bins or levels, and how many are missing.
  // The column's type may differ (numbers as text for a categorical input, and back).
  std::vector<double> histogram(const data::Column& column, double* missing_count = nullptr) const;
  // The same for numbers (predictions).
  std::vector<double> histogram(std::span<const float> values) const;
};
constexpr std::size_t kMaxProfileLevels = 64;
constexpr std::size_t kProfileBins = 20;

struct DataProfile {
  std::vector<FeatureProfile> inputs;
  FeatureProfile prediction;  // the first score column (P(positive), the prediction, P(first class))
  // Tree models: each input's share of the mean |TreeSHAP| contribution (to the first output)
  // over the training rows, summing to 1; empty for other models.
  std::vector<double> attribution_shares;
  bool empty() const { return inputs.empty(); }
};
// The profile of `columns` of `table` (absent ones are skipped) and of `scores`.
DataProfile profile_of(const data::Table& table, const std::vector<std::string>& columns,
                       std::span<const float> scores);
FeatureProfile profile_of_numbers(std::string name, std::span<const float> values);

struct Manifest {
  Task task = Task::kRegression;
  std::string target;
  // Binary classification: {negative label, positive label}; the score is P(positive).
  // Multiclass: every label, in the order of the model's outputs.
  std::vector<std::string> class_labels;
  std::string created_by;
  std::string code_version;
  std::string data_fingerprint;
  std::uint64_t seed = 0;
  std::string split;
  std::size_t train_rows = 0;
  std::map<std::string, std::string> params;
  std::map<std::string, double> metrics;
  // Binary classification: the predicted label is the positive one when P(positive) is at least
  // this; chosen on held-out rows by `threshold_rule` ("f1", "precision>=0.9", "recall>=0.8",
  // "cost=5"; empty for the default 0.5 or a number given as is).
  double decision_threshold = 0.5;
  std::string threshold_rule;
  // Inputs a request may carry that the model does not use, accepted and left unused at serving:
  // columns trained with --ignore (an id the request log's label joins need) and, for a bundle
  // optimized from a baseline, the baseline's inputs it dropped, so the baseline's requests fit.
  std::vector<std::string> unused_inputs;
  // How `slipway optimize` made this bundle from a baseline: the technique, its settings, the
  // baseline, the measurements and the SLO, as flat keys ("technique", "baseline",
  // "setting.rounds", "measured.p95_ms", ...). Empty for a bundle that was not optimized.
  std::map<std::string, std::string> optimization;
  // The training data's distribution per input and of the predictions; empty for bundles made
  // before profiles (or imported).
  DataProfile profile;
};

struct Predictions {
  std::size_t rows = 0;
  std::size_t columns = 1;  // scores per row: the class count for multiclass, else 1
  // Row-major rows x columns. Regression: predictions. Binary classification: P(positive
  // label). Multiclass: P(class) per class, in class_labels order.
  std::vector<float> scores;
};

// In place: margins -> probabilities that sum to 1 (computed stably, in double).
void softmax(std::span<float> margins);

class Bundle {
 public:
  Bundle(Manifest manifest, Preprocessor preprocessor, std::shared_ptr<const Model> model);

  const Manifest& manifest() const { return manifest_; }
  const Preprocessor& preprocessor() const { return preprocessor_; }
  const Model& model() const { return *model_; }
  // The model, to build another bundle around it.
  std::shared_ptr<const Model> shared_model() const { return model_; }
  Task task() const { return manifest_.task; }

  // Scores a batch whose columns are matched to the schema by name.
  Result<Predictions> predict(const data::Table& batch) const;
  // Scores rows already preprocessed (rows x preprocessor().output_width()).
  Predictions predict_preprocessed(std::span<const float> features, std::size_t rows) const;
  // predict_preprocessed in its two steps, for profiling: the model's margins, then the task's
  // link applied in place (sigmoid for binary classification, softmax for multiclass).
  Predictions predict_margins(std::span<const float> features, std::size_t rows) const;
  void apply_link(Predictions& margins) const;
  // The predicted label of `row` (classification only): the positive label when its score is at
  // least the manifest's decision_threshold, for multiclass the most probable class (the first on
  // a tie).
  const std::string& predicted_label(const Predictions& predictions, std::size_t row) const;

  // Bytes the loaded bundle holds: the model's arrays (owned, or mapped from the file) and the
  // preprocessor's vocabularies.
  std::size_t memory_bytes() const;
  // The file load() mapped, whose sections the model's large arrays view; empty for a bundle built
  // in memory or parsed from bytes.
  std::span<const std::byte> mapped_file() const {
    return mapping_ == nullptr ? std::span<const std::byte>() : mapping_->bytes();
  }

  // A copy with `metrics` recorded in the manifest, sharing this bundle's model.
  std::shared_ptr<const Bundle> with_metrics(std::map<std::string, double> metrics) const;
  // A copy with `optimization` recorded in the manifest, sharing this bundle's model.
  std::shared_ptr<const Bundle> with_optimization(std::map<std::string, std::string> optimization) const;
  std::shared_ptr<const Bundle> with_profile(DataProfile profile) const;
  // A copy with another manifest (its decision threshold, its unused inputs), sharing this
  // bundle's model and mapping.
  std::shared_ptr<const Bundle> with_manifest(Manifest manifest) const;

  // The bundle file's bytes. Deterministic: the same bundle gives the same bytes. The model's
  // family (src/model/model_families.cpp) writes its part.
  std::vector<std::byte> serialize() const;

  // Parses bundle bytes: checks the magic, the format version and the trailer's checksum; when
  // `expected_sha256` is given, the whole file's hash must equal it. All of this happens before
  // anything else is read. DataLoss on a mismatch or a truncated file, InvalidArgument on a file
  // that is not a bundle or whose model family this build does not know. The bundle copies what it
  // needs: `bytes` may be freed afterwards.
  static Result<std::shared_ptr<const Bundle>> parse(std::span<const std::byte> bytes,
                                                     std::optional<std::string_view> expected_sha256 = {});
  // Parses the file at `path` as parse() does, but maps it and keeps the mapping: the model's large
  // arrays (weights, tree nodes, statistics) view its sections instead of copying them. So only for
  // files nobody rewrites or truncates while the bundle lives (touching a page of a truncated
  // mapped file raises SIGBUS): the artifact store's, which are written once and never rewritten.
  // Read any other file into memory and parse() it. Errors are parse()'s, prefixed with the path.
  static Result<std::shared_ptr<const Bundle>> load(const std::string& path,
                                                    std::optional<std::string_view> expected_sha256 = {});

 private:
  static Result<std::shared_ptr<const Bundle>> parse_mapped(std::span<const std::byte> bytes,
                                                            std::shared_ptr<const MappedFile> mapping,
                                                            std::optional<std::string_view> expected_sha256);

  Manifest manifest_;
  Preprocessor preprocessor_;
  std::shared_ptr<const Model> model_;
  // The file load() mapped (null otherwise); the model's arrays share its ownership too.
  std::shared_ptr<const MappedFile> mapping_;
};

// The scores an endpoint's "constant:VALUE" fallback gives every row of `bundle`'s task:
// regression, VALUE as a number; binary classification, P(positive): a number in [0, 1], or a
// class label (1 for the positive one, 0 for the other); multiclass, a class label (probability
// 1). InvalidArgument, saying what fits, when VALUE does not.
Result<std::vector<float>> constant_fallback_scores(const Bundle& bundle, std::string_view value);

inline constexpr std::uint32_t kBundleFormatVersion = 1;

// ---------------------------------------------------------------------------------------------
// Importers.

struct XgboostImportOptions {
  // Input names in feature order, used when the model file has none (XGBoost saves names only
  // when they were given at training); empty means f0, f1, ...
  std::vector<std::string> feature_names;
  std::string source;            // recorded in the manifest's lineage (e.g. the file path)
  std::string target = "label";  // the label column's name, for `slipway eval` on the bundle
};

// ONNX import: the graphs PyTorch (torch.onnx.export) and others write for MLPs, read with Debian's
// libonnx: one input matrix; Gemm, or MatMul with an Add of the bias; LayerNormalization straight
// after a layer; activations as operators (Relu, Sigmoid, Tanh, Gelu) or as the element-wise
// arithmetic that computes them (PyTorch's GELU is Div, Erf, Add, Mul, Mul); Flatten, Identity,
// Dropout and Cast pass through; Add, Sub, Mul or Div by constants before the first layer become
// the preprocessing's centering and scaling. A final Sigmoid on one output makes a binary
// classifier, a final Softmax a multiclass one; else the output is a regression. InvalidArgument
// naming the operator (and node) for anything else.
struct OnnxImportOptions {
  std::vector<std::string> feature_names;  // in input order; empty means f0, f1, ...
  std::vector<std::string> class_labels;   // classifiers: empty means 0, 1, ...
  std::string source;                      // recorded in the manifest (e.g. the file path)
  std::string target = "label";
};
Result<std::shared_ptr<const Bundle>> import_onnx(std::span<const std::byte> bytes, const OnnxImportOptions& options);

// Exports: a bundle's model in another system's format, predicting what the bundle predicts.
// XGBoost JSON (save_model's format, loaded by XGBoost 1.7 and later) takes tree ensembles whose
// preprocessing passes inputs through unchanged (gbdt, imported XGBoost models): categorical
// inputs become XGBoost categorical features holding the bundle's category codes (the order of
// FeatureTransform::levels). The base margin travels as a one-leaf tree per output.
Result<std::string> export_xgboost_json(const Bundle& bundle);
// ONNX (IR 8, opset 17; ai.onnx.ml 3 for trees): an MLP as Gemm, LayerNormalization and
// activation nodes; a linear model as one Gemm; a tree ensemble as TreeEnsembleRegressor (categorical partition splits
// have no ONNX form and are refused). Numeric preprocessing (imputing NaN, centering, scaling) is part of the graph,
// whose input "input" is [rows, inputs] float in the bundle's input order; a bundle with categorical inputs takes its
// preprocessed matrix as "features" instead (`warning` says so). The output "scores" is [rows, columns] as
// Bundle::predict gives it.
struct OnnxExport {
  std::vector<std::byte> bytes;
  std::string warning;  // empty, or what a user must know to feed the graph
};
Result<OnnxExport> export_onnx(const Bundle& bundle);

// Converts an XGBoost JSON model (save_model("m.json"), XGBoost 1.x to 3.x) into a bundle whose
// predictions equal XGBoost's: gbtree booster; objectives binary:logistic, binary:logitraw,
// reg:squarederror, reg:linear, reg:absoluteerror, reg:pseudohubererror, multi:softprob,
// multi:softmax; numeric and categorical splits (a categorical input must then carry XGBoost's
// category codes as numbers). InvalidArgument with one sentence for anything else (not XGBoost
// JSON, gblinear, dart, another objective, a feature-name count that does not match).
Result<std::shared_ptr<const Bundle>> import_xgboost_json(std::string_view json, const XgboostImportOptions& options);

// Each input's share of the mean |TreeSHAP| contribution to the first output, over at most
// `max_rows` rows of `table` taken evenly; empty when the model is not a tree ensemble with
// covers, or no row can be read.
std::vector<double> attribution_shares(const Bundle& bundle, const data::Table& table, std::size_t max_rows = 500);

}  // namespace slipway::model
