#include "train/mlp_trainer.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <numbers>
#include <numeric>

namespace slipway::train {
namespace {

constexpr double kAdamBeta1 = 0.9;
constexpr double kAdamBeta2 = 0.999;
constexpr double kAdamEpsilon = 1e-8;
// Rows per forward pass when scoring the validation rows.
constexpr std::size_t kEvaluationChunk = 4096;

// Random numbers as a function of a key: the same for a seed whatever the thread count, the
// order of batches or whether the run resumed.
std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
double unit_interval(std::uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

// Where each layer's parameters lie in the flat parameter vector.
struct LayerSlots {
  std::size_t inputs = 0, outputs = 0;
  bool normalized = false;
  kernels::Activation activation = kernels::Activation::kNone;
  std::size_t weights = 0, bias = 0, scale = 0, shift = 0;  // offsets
};

struct Network {
  std::vector<LayerSlots> layers;
  std::size_t parameter_count = 0;

  Network(std::size_t width, std::size_t outputs, const MlpOptions& options) {
    std::size_t inputs = width;
    auto add = [&](std::size_t units, bool hidden) {
      LayerSlots slots;
      slots.inputs = inputs;
      slots.outputs = units;
      slots.normalized = hidden && options.layer_norm;
      slots.activation = hidden ? options.activation : kernels::Activation::kNone;
      slots.weights = parameter_count;
      parameter_count += units * inputs;
      slots.bias = parameter_count;
      parameter_count += units;
      if (slots.normalized) {
        slots.scale = parameter_count;
        slots.shift = parameter_count + units;
        parameter_count += 2 * units;
      }
      layers.push_back(slots);
      inputs = units;
    };
    for (std::size_t units : options.hidden) add(units, true);
    add(outputs, false);
  }

  // Per parameter: 1 for a dense weight (AdamW decays only those), else 0.
  std::vector<float> decay_mask() const {
    std::vector<float> mask(parameter_count, 0.0f);
    for (const LayerSlots& layer : layers) {
      std::fill_n(mask.begin() + static_cast<std::ptrdiff_t>(layer.weights), layer.inputs * layer.outputs, 1.0f);
    }
    return mask;
  }
};

// out (columns x rows) = in (rows x columns) transposed, by tiles that stay in cache.
void transpose(std::span<const float> in, std::size_t rows, std::size_t columns, std::vector<float>& out) {
  constexpr std::size_t kTile = 16;
  out.resize(rows * columns);
  for (std::size_t row_tile = 0; row_tile < rows; row_tile += kTile) {
    std::size_t row_end = std::min(rows, row_tile + kTile);
    for (std::size_t column_tile = 0; column_tile < columns; column_tile += kTile) {
      std::size_t column_end = std::min(columns, column_tile + kTile);
      for (std::size_t row = row_tile; row < row_end; ++row) {
        for (std::size_t column = column_tile; column < column_end; ++column) {
          out[column * rows + row] = in[row * columns + column];
        }
      }
    }
  }
}

// How a product's weight matrix is held: outputs x depth (a layer's weights), or its transpose,
// depth x outputs (how the backward pass holds the matrices it multiplies by).
enum class WeightLayout { kRows, kTransposed };

// out (rows x outputs) = in (rows x depth) times the weights (as outputs x depth) transposed, plus
// bias: one dense-kernel call in the training precision.
class Products {
 public:
  Products(bool bf16, int threads) : bf16_(bf16), threads_(threads) {}

  void multiply(std::span<const float> weights, WeightLayout layout, std::span<const float> bias, std::size_t outputs,
                std::size_t depth, std::span<const float> in, std::size_t rows, std::span<float> out,
                bool relu = false) {
    bool rows_layout = layout == WeightLayout::kRows;
    if (bf16_) {
      kernels::PackedDenseBf16 packed = rows_layout
                                            ? kernels::pack_dense_bf16(weights, bias, outputs, depth, relu)
                                            : kernels::pack_dense_bf16_transposed(weights, bias, outputs, depth);
      kernels::round_rows_to_bf16(in.first(rows * depth), rows, depth, rounded_);
      kernels::dense_bf16(packed, rounded_, out.first(rows * outputs), threads_);
    } else {
      kernels::PackedDenseF32 packed = rows_layout ? kernels::pack_dense_f32(weights, bias, outputs, depth, relu)
                                                   : kernels::pack_dense_f32_transposed(weights, bias, outputs, depth);
      kernels::dense_f32(packed, in.first(rows * depth), rows, out.first(rows * outputs), threads_);
    }
  }

 private:
  bool bf16_;
  int threads_;
  kernels::Bf16Rows rounded_;
};

// What a forward pass keeps for the backward one, per layer.
struct LayerTrace {
  std::vector<float> normalized;  // x-hat, before scale and shift (layer norm only)
  std::vector<float> inverse_deviations;
  std::vector<float> before_activation;
  std::vector<float> output;   // after activation and dropout (the last layer: the margins)
  std::vector<float> dropout;  // per value: 0 or 1 / (1 - dropout)
};

// A mini-batch: its rows' features, labels and weights, copied together.
struct Batch {
  std::size_t rows = 0;
  std::vector<float> features;
  std::vector<double> labels;
  std::vector<double> weights;
};

class MlpTrainer {
 public:
  MlpTrainer(const Network& network, const MlpOptions& options, std::size_t width, MlpLoss loss)
      : network_(network),
        options_(options),
        width_(width),
        loss_(loss),
        products_(options.bf16, options.thread_count),
        traces_(network.layers.size()) {}

  std::vector<float>& parameters() { return parameters_; }

  void initialize(double label_mean, std::span<const double> class_shares) {
    parameters_.assign(network_.parameter_count, 0.0f);
    for (std::size_t index = 0; index < network_.layers.size(); ++index) {
      const LayerSlots& layer = network_.layers[index];
      bool last = index + 1 == network_.layers.size();
      // He's bound, sqrt(6 / fan_in), for every hidden layer whatever its activation (the form of
      // PyTorch's default for Linear), Glorot's for the output layer.
      double bound = last ? std::sqrt(6.0 / static_cast<double>(layer.inputs + layer.outputs))
                          : std::sqrt(6.0 / static_cast<double>(layer.inputs));
      std::uint64_t key = mix(options_.seed ^ (0x696e6974ULL + index));
      for (std::size_t i = 0; i < layer.inputs * layer.outputs; ++i) {
        parameters_[layer.weights + i] = static_cast<float>((2.0 * unit_interval(mix(key + i)) - 1.0) * bound);
      }
      if (layer.normalized) std::fill_n(parameters_.begin() + layer.scale, layer.outputs, 1.0f);
    }
    // The output biases start at the prior: the first steps need not learn the base rate.
    const LayerSlots& last = network_.layers.back();
    if (loss_ == MlpLoss::kLogistic) {
      double share = std::clamp(label_mean, 1e-6, 1 - 1e-6);
      parameters_[last.bias] = static_cast<float>(std::log(share / (1 - share)));
    } else if (loss_ == MlpLoss::kSoftmax) {
      for (std::size_t k = 0; k < class_shares.size(); ++k) {
        parameters_[last.bias + k] = static_cast<float>(std::log(std::max(class_shares[k], 1e-6)));
      }
    }
  }

  // The forward pass over `rows` rows; with `step` >= 0 it is a training pass with dropout keyed
  // by the step. Leaves the margins in traces_.back().output.
  void forward(std::span<const float> features, std::size_t rows, std::int64_t step) {
    std::span<const float> in = features;
    for (std::size_t index = 0; index < network_.layers.size(); ++index) {
      const LayerSlots& layer = network_.layers[index];
      LayerTrace& trace = traces_[index];
      std::size_t count = rows * layer.outputs;
      std::span<const float> weights(parameters_.data() + layer.weights, layer.inputs * layer.outputs);
      std::span<const float> bias(parameters_.data() + layer.bias, layer.outputs);
      if (fuses_relu(layer)) {
        // The kernel's stores apply the ReLU; its backward step reads the outputs (positive where
        // the inputs were).
        trace.output.resize(count);
        products_.multiply(weights, WeightLayout::kRows, bias, layer.outputs, layer.inputs, in, rows, trace.output,
                           true);
      } else {
        trace.before_activation.resize(count);
        products_.multiply(weights, WeightLayout::kRows, bias, layer.outputs, layer.inputs, in, rows,
                           trace.before_activation);
      }
      if (layer.normalized) {
        trace.normalized = trace.before_activation;
        trace.inverse_deviations.resize(rows);
        kernels::layer_norm(trace.normalized, rows, layer.outputs, {}, {}, kLayerNormEpsilon, trace.inverse_deviations);
        const float* scale = parameters_.data() + layer.scale;
        const float* shift = parameters_.data() + layer.shift;
        for (std::size_t row = 0; row < rows; ++row) {
          for (std::size_t unit = 0; unit < layer.outputs; ++unit) {
            std::size_t at = row * layer.outputs + unit;
            trace.before_activation[at] = trace.normalized[at] * scale[unit] + shift[unit];
          }
        }
      }
      if (!fuses_relu(layer)) {
        trace.output = trace.before_activation;
        kernels::activate(layer.activation, trace.output);
      }
      bool hidden = index + 1 < network_.layers.size();
      trace.dropout.clear();
      if (hidden && step >= 0 && options_.dropout > 0.0) {
        trace.dropout.resize(count);
        auto keep = static_cast<float>(1.0 / (1.0 - options_.dropout));
        std::uint64_t key = mix(options_.seed ^ mix(static_cast<std::uint64_t>(step) * 64 + index));
        for (std::size_t i = 0; i < count; ++i) {
          trace.dropout[i] = unit_interval(mix(key + i)) < options_.dropout ? 0.0f : keep;
          trace.output[i] *= trace.dropout[i];
        }
      }
      in = trace.output;
    }
  }

  // The loss of the margins in traces_.back() against the batch (summed with weights) and, when
  // `gradient` is given, its derivative by each margin divided by the weight total.
  double loss(std::size_t rows, std::span<const double> labels, std::span<const double> weights, double weight_total,
              std::vector<float>* gradient) {
    std::size_t outputs = network_.layers.back().outputs;
    const std::vector<float>& margins = traces_.back().output;
    if (gradient != nullptr) gradient->resize(rows * outputs);
    double total = 0.0;
    for (std::size_t row = 0; row < rows; ++row) {
      double weight = weights.empty() ? 1.0 : weights[row];
      const float* margin = margins.data() + row * outputs;
      double row_loss = 0.0;
      if (loss_ == MlpLoss::kLogistic) {
        double z = margin[0];
        double y = labels[row];
        row_loss = std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::abs(z)));
        if (gradient != nullptr)
          (*gradient)[row] = static_cast<float>(weight * (1.0 / (1.0 + std::exp(-z)) - y) / weight_total);
      } else if (loss_ == MlpLoss::kSquared) {
        double error = margin[0] - labels[row];
        row_loss = 0.5 * error * error;
        if (gradient != nullptr) (*gradient)[row] = static_cast<float>(weight * error / weight_total);
      } else {
        double largest = *std::max_element(margin, margin + outputs);
        double sum = 0.0;
        for (std::size_t k = 0; k < outputs; ++k) sum += std::exp(margin[k] - largest);
        auto label = static_cast<std::size_t>(labels[row]);
        row_loss = largest + std::log(sum) - margin[label];
        if (gradient != nullptr) {
          for (std::size_t k = 0; k < outputs; ++k) {
            double probability = std::exp(margin[k] - largest) / sum;
            (*gradient)[row * outputs + k] =
                static_cast<float>(weight * (probability - (k == label ? 1.0 : 0.0)) / weight_total);
          }
        }
      }
      total += weight * row_loss;
    }
    return total;
  }

  // The gradient of every parameter, from the forward pass's traces and the margins' gradient.
  void backward(std::span<const float> features, std::size_t rows, std::vector<float> gradient) {
    gradients_.assign(network_.parameter_count, 0.0f);
    for (std::size_t index = network_.layers.size(); index-- > 0;) {
      const LayerSlots& layer = network_.layers[index];
      std::span<const float> in = index == 0 ? features : std::span<const float>(traces_[index - 1].output);
      // Weights: gradient^T (outputs x rows) times in (rows x inputs), a dense product over rows
      // whose weight matrix, in^T, is `in` transposed.
      transpose(gradient, rows, layer.outputs, gradient_columns_);
      products_.multiply(in.first(rows * layer.inputs), WeightLayout::kTransposed, {}, layer.inputs, rows,
                         gradient_columns_, layer.outputs,
                         std::span<float>(gradients_.data() + layer.weights, layer.outputs * layer.inputs));
      float* bias = gradients_.data() + layer.bias;
      for (std::size_t row = 0; row < rows; ++row) {
        for (std::size_t unit = 0; unit < layer.outputs; ++unit) bias[unit] += gradient[row * layer.outputs + unit];
      }
      if (index == 0) break;
      // The layer below's outputs: gradient (rows x outputs) times weights (outputs x inputs), whose
      // kernel weight matrix W^T is the weights transposed.
      const LayerSlots& below = network_.layers[index - 1];
      LayerTrace& trace = traces_[index - 1];
      std::vector<float> next(rows * layer.inputs);
      products_.multiply(std::span<const float>(parameters_.data() + layer.weights, layer.outputs * layer.inputs),
                         WeightLayout::kTransposed, {}, layer.inputs, layer.outputs, gradient, rows, next);
      if (!trace.dropout.empty()) {
        for (std::size_t i = 0; i < next.size(); ++i) next[i] *= trace.dropout[i];
      }
      kernels::activation_backward(below.activation, fuses_relu(below) ? trace.output : trace.before_activation, next);
      if (below.normalized) normalization_backward(below, trace, rows, next);
      gradient = std::move(next);
    }
  }

  // AdamW on every parameter at the 1-based step `step`, in float arithmetic (a loop the compiler
  // vectorizes: it runs over every parameter each step).
  void update(std::int64_t step, double learning_rate) {
    std::size_t count = network_.parameter_count;
    if (first_moments_.empty()) {
      first_moments_.assign(count, 0.0f);
      second_moments_.assign(count, 0.0f);
    }
    auto step_size = static_cast<float>(learning_rate / (1.0 - std::pow(kAdamBeta1, static_cast<double>(step))));
    auto root_correction = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(kAdamBeta2, static_cast<double>(step))));
    auto decay = static_cast<float>(1.0 - learning_rate * options_.weight_decay);
    const auto beta1 = static_cast<float>(kAdamBeta1), beta2 = static_cast<float>(kAdamBeta2);
    const auto epsilon = static_cast<float>(kAdamEpsilon);
    float* parameters = parameters_.data();
    float* m = first_moments_.data();
    float* v = second_moments_.data();
    const float* g = gradients_.data();
    // mask[i] is 1 for a dense weight, 0 otherwise: 1 - mask * (1 - decay) is decay or 1.
    if (decay_mask_.empty()) decay_mask_ = network_.decay_mask();
    const float* mask = decay_mask_.data();
    const float shrink = 1.0f - decay;
    for (std::size_t i = 0; i < count; ++i) {
      m[i] = beta1 * m[i] + (1.0f - beta1) * g[i];
      v[i] = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
      parameters[i] =
          parameters[i] * (1.0f - mask[i] * shrink) - step_size * m[i] / (std::sqrt(v[i]) * root_correction + epsilon);
    }
  }

  // The weighted mean loss over `rows` (no dropout), in chunks.
  double evaluate(const MlpRows& rows) {
    double total = 0.0, weight_total = 0.0;
    for (std::size_t first = 0; first < rows.rows; first += kEvaluationChunk) {
      std::size_t count = std::min(kEvaluationChunk, rows.rows - first);
      forward(rows.features.subspan(first * width_, count * width_), count, -1);
      std::span<const double> weights = rows.weights.empty() ? rows.weights : rows.weights.subspan(first, count);
      total += loss(count, rows.labels.subspan(first, count), weights, 1.0, nullptr);
      weight_total +=
          weights.empty() ? static_cast<double>(count) : std::accumulate(weights.begin(), weights.end(), 0.0);
    }
    return weight_total > 0.0 ? total / weight_total : 0.0;
  }

  const std::vector<float>& gradients() const { return gradients_; }
  std::vector<float>& first_moments() { return first_moments_; }
  std::vector<float>& second_moments() { return second_moments_; }

  static constexpr float kLayerNormEpsilon = 1e-5f;

 private:
  static bool fuses_relu(const LayerSlots& layer) {
    return layer.activation == kernels::Activation::kRelu && !layer.normalized;
  }

  void normalization_backward(const LayerSlots& layer, const LayerTrace& trace, std::size_t rows,
                              std::vector<float>& gradient) {
    const float* scale = parameters_.data() + layer.scale;
    float* scale_gradient = gradients_.data() + layer.scale;
    float* shift_gradient = gradients_.data() + layer.shift;
    std::size_t width = layer.outputs;
    std::vector<float> scaled(width);
    for (std::size_t row = 0; row < rows; ++row) {
      float* g = gradient.data() + row * width;
      const float* normalized = trace.normalized.data() + row * width;
      double mean_scaled = 0.0, mean_product = 0.0;
      for (std::size_t unit = 0; unit < width; ++unit) {
        scale_gradient[unit] += g[unit] * normalized[unit];
        shift_gradient[unit] += g[unit];
        scaled[unit] = g[unit] * scale[unit];
        mean_scaled += scaled[unit];
        mean_product += scaled[unit] * normalized[unit];
      }
      mean_scaled /= static_cast<double>(width);
      mean_product /= static_cast<double>(width);
      float inverse = trace.inverse_deviations[row];
      for (std::size_t unit = 0; unit < width; ++unit) {
        g[unit] = static_cast<float>(inverse * (scaled[unit] - mean_scaled - normalized[unit] * mean_product));
      }
    }
  }

  const Network& network_;
  const MlpOptions& options_;
  std::size_t width_;
  MlpLoss loss_;
  Products products_;
  std::vector<float> parameters_, gradients_, first_moments_, second_moments_;
  std::vector<LayerTrace> traces_;
  std::vector<float> gradient_columns_;
  std::vector<float> decay_mask_;
};

// The layers of `parameters`, with the target's standardization folded into the last layer
// (scale 1 and shift 0 leave it as it is).
std::vector<model::MlpLayer> layers_of(const Network& network, const std::vector<float>& parameters,
                                       double target_scale, double target_shift) {
  std::vector<model::MlpLayer> layers;
  for (std::size_t index = 0; index < network.layers.size(); ++index) {
    const LayerSlots& slots = network.layers[index];
    bool last = index + 1 == network.layers.size();
    auto slice = [&](std::size_t offset, std::size_t count, double scale, double shift) {
      std::vector<float> values(parameters.begin() + static_cast<std::ptrdiff_t>(offset),
                                parameters.begin() + static_cast<std::ptrdiff_t>(offset + count));
      if (scale != 1.0 || shift != 0.0) {
        for (float& value : values) value = static_cast<float>(value * scale + shift);
      }
      return model::SharedArray<float>(std::move(values));
    };
    model::MlpLayer layer;
    layer.inputs = slots.inputs;
    layer.outputs = slots.outputs;
    layer.activation = slots.activation;
    layer.weights = slice(slots.weights, slots.inputs * slots.outputs, last ? target_scale : 1.0, 0.0);
    layer.bias = slice(slots.bias, slots.outputs, last ? target_scale : 1.0, last ? target_shift : 0.0);
    if (slots.normalized) {
      layer.norm_scale = slice(slots.scale, slots.outputs, 1.0, 0.0);
      layer.norm_shift = slice(slots.shift, slots.outputs, 1.0, 0.0);
      layer.norm_epsilon = MlpTrainer::kLayerNormEpsilon;
    }
    layers.push_back(std::move(layer));
  }
  return layers;
}

// The parameters of a model's layers (the inverse of layers_of), or InvalidArgument when the model
// does not have the network's shape.
Result<std::vector<float>> parameters_of(const Network& network, const model::MlpModel& model, double target_scale,
                                         double target_shift) {
  const auto& layers = model.layers();
  auto describe = [](const std::vector<std::size_t>& widths) {
    std::string text;
    for (std::size_t width : widths) text += (text.empty() ? "" : " -> ") + std::to_string(width);
    return text;
  };
  std::vector<std::size_t> have = {layers.front().inputs}, want = {network.layers.front().inputs};
  for (const auto& layer : layers) have.push_back(layer.outputs);
  for (const auto& layer : network.layers) want.push_back(layer.outputs);
  if (have.front() != want.front()) {
    return invalid_argument("the starting model takes " + std::to_string(have.front()) +
                            " preprocessed inputs; these rows give " + std::to_string(want.front()));
  }
  if (have != want) {
    return invalid_argument("the starting model's layers (" + describe(have) + ") differ from this training's (" +
                            describe(want) + "); train with its hidden_units");
  }
  for (std::size_t index = 0; index < layers.size(); ++index) {
    if (layers[index].activation != network.layers[index].activation) {
      return invalid_argument("layer " + std::to_string(index + 1) + " of the starting model uses " +
                              std::string(kernels::activation_name(layers[index].activation)) + ", this training " +
                              std::string(kernels::activation_name(network.layers[index].activation)) +
                              "; train with its activation");
    }
    if (layers[index].normalized() != network.layers[index].normalized) {
      return invalid_argument(
          "the starting model " + std::string(layers[index].normalized() ? "has" : "has no") +
          " layer normalization; train with layer_norm=" + (layers[index].normalized() ? "true" : "false"));
    }
  }
  std::vector<float> parameters(network.parameter_count);
  for (std::size_t index = 0; index < layers.size(); ++index) {
    const LayerSlots& slots = network.layers[index];
    const model::MlpLayer& layer = layers[index];
    bool last = index + 1 == layers.size();
    double scale = last ? 1.0 / target_scale : 1.0;
    double shift = last ? -target_shift / target_scale : 0.0;
    for (std::size_t i = 0; i < layer.weights.size(); ++i) {
      parameters[slots.weights + i] = static_cast<float>(layer.weights[i] * scale);
    }
    for (std::size_t i = 0; i < layer.outputs; ++i) {
      parameters[slots.bias + i] = static_cast<float>(layer.bias[i] * scale + shift);
      if (slots.normalized) {
        parameters[slots.scale + i] = layer.norm_scale[i];
        parameters[slots.shift + i] = layer.norm_shift[i];
      }
    }
  }
  return parameters;
}

// The rows of epoch `epoch`, shuffled by the seed (Fisher-Yates on a keyed stream).
std::vector<std::uint32_t> epoch_order(std::size_t rows, std::uint64_t seed, int epoch) {
  std::vector<std::uint32_t> order(rows);
  std::iota(order.begin(), order.end(), 0u);
  std::uint64_t key = mix(seed ^ (0x73687566ULL + static_cast<std::uint64_t>(epoch) * 0x100000001b3ULL));
  for (std::size_t i = rows; i > 1; --i) {
    auto draw = static_cast<std::size_t>(unit_interval(mix(key + i)) * static_cast<double>(i));
    std::swap(order[i - 1], order[draw]);
  }
  return order;
}

Batch gather(const MlpRows& rows, std::size_t width, std::span<const std::uint32_t> picked) {
  Batch batch;
  batch.rows = picked.size();
  batch.features.resize(picked.size() * width);
  batch.labels.resize(picked.size());
  if (!rows.weights.empty()) batch.weights.resize(picked.size());
  for (std::size_t i = 0; i < picked.size(); ++i) {
    std::copy_n(rows.features.data() + static_cast<std::size_t>(picked[i]) * width, width,
                batch.features.data() + i * width);
    batch.labels[i] = rows.labels[picked[i]];
    if (!rows.weights.empty()) batch.weights[i] = rows.weights[picked[i]];
  }
  return batch;
}

// The metric reported for a mean loss: logloss as it is, rmse from half the squared error.
double metric_of_loss(MlpLoss loss, double mean_loss, double target_scale) {
  return loss == MlpLoss::kSquared ? std::sqrt(2.0 * mean_loss) * target_scale : mean_loss;
}

}  // namespace

const char* mlp_metric_name(MlpLoss loss) {
  switch (loss) {
    case MlpLoss::kLogistic:
      return "logloss";
    case MlpLoss::kSoftmax:
      return "mlogloss";
    case MlpLoss::kSquared:
      return "rmse";
  }
  return "logloss";
}

Result<MlpFit> fit_mlp(const MlpRows& train, std::size_t width, std::size_t outputs, const MlpRows* validation,
                       MlpLoss loss, const MlpOptions& options, const MlpStart* start, const MlpCallbacks& callbacks) {
  if (train.rows == 0) return invalid_argument("an MLP needs at least one training row");
  if (width == 0) return invalid_argument("an MLP needs at least one input");
  // Parameters, gradients and AdamW's two moments (and the best epoch's copy) are held at once.
  constexpr std::size_t kMaxParameters = std::size_t{1} << 26;
  Network network(width, outputs, options);
  if (network.parameter_count > kMaxParameters) {
    return invalid_argument("an MLP of " + std::to_string(width) + " inputs (after one-hot encoding) and these " +
                            "hidden_units has more than " + std::to_string(kMaxParameters) +
                            " parameters; use fewer units, or fewer categories (max_categories)");
  }

  // The regression target is learned standardized, and the scale folded into the output layer.
  double weight_total = 0.0, label_mean = 0.0;
  for (std::size_t row = 0; row < train.rows; ++row) {
    double weight = train.weights.empty() ? 1.0 : train.weights[row];
    weight_total += weight;
    label_mean += weight * train.labels[row];
  }
  if (!(weight_total > 0.0)) return invalid_argument("every training row has weight 0");
  label_mean /= weight_total;
  double target_scale = 1.0, target_shift = 0.0;
  std::vector<double> standardized_train, standardized_validation;
  MlpRows train_rows = train;
  MlpRows validation_rows = validation != nullptr ? *validation : MlpRows{};
  if (loss == MlpLoss::kSquared) {
    double variance = 0.0;
    for (std::size_t row = 0; row < train.rows; ++row) {
      double weight = train.weights.empty() ? 1.0 : train.weights[row];
      variance += weight * (train.labels[row] - label_mean) * (train.labels[row] - label_mean);
    }
    target_shift = label_mean;
    target_scale = std::sqrt(variance / weight_total);
    if (!(target_scale > 0.0) || !std::isfinite(target_scale)) target_scale = 1.0;
    auto standardize = [&](std::span<const double> labels, std::vector<double>& out) {
      out.resize(labels.size());
      for (std::size_t row = 0; row < labels.size(); ++row) out[row] = (labels[row] - target_shift) / target_scale;
    };
    standardize(train.labels, standardized_train);
    train_rows.labels = standardized_train;
    if (validation != nullptr) {
      standardize(validation->labels, standardized_validation);
      validation_rows.labels = standardized_validation;
    }
  }
  std::vector<double> class_shares(loss == MlpLoss::kSoftmax ? outputs : 0, 0.0);
  for (std::size_t row = 0; row < train.rows && loss == MlpLoss::kSoftmax; ++row) {
    class_shares[static_cast<std::size_t>(train.labels[row])] +=
        (train.weights.empty() ? 1.0 : train.weights[row]) / weight_total;
  }

  if (validation != nullptr && !validation->weights.empty() &&
      !(std::accumulate(validation->weights.begin(), validation->weights.end(), 0.0) > 0.0)) {
    return invalid_argument("every validation row has weight 0: early stopping has nothing to judge by");
  }
  MlpTrainer trainer(network, options, width, loss);
  MlpFit fit;
  int first_epoch = 0;
  std::vector<float> best;
  bool tracking_best = validation != nullptr && options.early_stopping > 0;
  if (start != nullptr && start->model != nullptr) {
    // Checked against this training's shapes even on a resume, whose exact values come below.
    SLIPWAY_ASSIGN_OR_RETURN(trainer.parameters(), parameters_of(network, *start->model, target_scale, target_shift));
    if (start->resume) {
      if (start->epochs_done < 0 || start->epochs_done > options.epochs ||
          start->history.size() != static_cast<std::size_t>(start->epochs_done)) {
        return invalid_argument("the checkpoint's progress (" + std::to_string(start->epochs_done) + " epochs, " +
                                std::to_string(start->history.size()) + " recorded) does not fit " +
                                std::to_string(options.epochs) + " epochs");
      }
      const auto& state = start->model->training_state();
      auto restore = [&](const char* name, std::vector<float>& into) -> Status {
        auto found = state.find(name);
        if (found == state.end() || found->second.size() != network.parameter_count) {
          return invalid_argument(std::string("the checkpoint lacks the optimizer's ") + name);
        }
        into = found->second.to_vector();
        return {};
      };
      // Checkpoints from before the exact parameters travelled hold them, unfolded, as layers.
      if (state.count("parameters") != 0) {
        SLIPWAY_RETURN_IF_ERROR(restore("parameters", trainer.parameters()));
      } else {
        SLIPWAY_ASSIGN_OR_RETURN(trainer.parameters(), parameters_of(network, *start->model, 1.0, 0.0));
      }
      SLIPWAY_RETURN_IF_ERROR(restore("adam_m", trainer.first_moments()));
      SLIPWAY_RETURN_IF_ERROR(restore("adam_v", trainer.second_moments()));
      if (tracking_best) SLIPWAY_RETURN_IF_ERROR(restore("best", best));
      first_epoch = start->epochs_done;
      fit.history = start->history;
    }
  } else {
    trainer.initialize(label_mean, class_shares);
  }

  const std::size_t batch_size = std::min<std::size_t>(options.batch_size, train.rows);
  const std::size_t steps_per_epoch = (train.rows + batch_size - 1) / batch_size;
  const auto total_steps = static_cast<std::int64_t>(steps_per_epoch) * options.epochs;
  const auto warmup_steps = static_cast<std::int64_t>(std::ceil(options.warmup_fraction * total_steps));
  auto learning_rate_at = [&](std::int64_t step) {  // step is 0-based
    if (step < warmup_steps) return options.learning_rate * static_cast<double>(step + 1) / warmup_steps;
    double progress = static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
    return options.learning_rate * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  };

  // The best epoch so far, from the history (a resumed run has it there too).
  auto best_epoch = [&]() {
    int found = -1;
    for (std::size_t index = 0; index < fit.history.size(); ++index) {
      if (found < 0 || fit.history[index].validation < fit.history[static_cast<std::size_t>(found)].validation) {
        found = static_cast<int>(index);
      }
    }
    return found;
  };

  std::vector<float> gradient;
  for (int epoch = first_epoch; epoch < options.epochs; ++epoch) {
    std::vector<std::uint32_t> order = epoch_order(train.rows, options.seed, epoch);
    auto batch_rows = [&](std::size_t step) {
      std::size_t first = step * batch_size;
      return std::span<const std::uint32_t>(order).subspan(first, std::min(batch_size, order.size() - first));
    };
    // The next batch is gathered while this one's step runs.
    std::future<Batch> next = std::async(std::launch::async, gather, std::cref(train_rows), width, batch_rows(0));
    double epoch_loss = 0.0, epoch_weight = 0.0;
    for (std::size_t step = 0; step < steps_per_epoch; ++step) {
      Batch batch = next.get();
      if (step + 1 < steps_per_epoch) {
        next = std::async(std::launch::async, gather, std::cref(train_rows), width, batch_rows(step + 1));
      }
      auto global_step = static_cast<std::int64_t>(epoch) * static_cast<std::int64_t>(steps_per_epoch) +
                         static_cast<std::int64_t>(step);
      double batch_weight = batch.weights.empty() ? static_cast<double>(batch.rows)
                                                  : std::accumulate(batch.weights.begin(), batch.weights.end(), 0.0);
      trainer.forward(batch.features, batch.rows, global_step);
      if (!(batch_weight > 0.0)) continue;  // a batch of zero-weight rows teaches nothing
      double batch_loss = trainer.loss(batch.rows, batch.labels, batch.weights, batch_weight, &gradient);
      if (!std::isfinite(batch_loss)) {
        return failed_precondition("training diverged at epoch " + std::to_string(epoch + 1) +
                                   " (the loss is not finite); lower learning_rate (now " +
                                   std::to_string(options.learning_rate) + ")");
      }
      epoch_loss += batch_loss;
      epoch_weight += batch_weight;
      trainer.backward(batch.features, batch.rows, gradient);
      trainer.update(global_step + 1, learning_rate_at(global_step));
    }
    RoundMetrics metrics;
    metrics.round = epoch;
    metrics.train = metric_of_loss(loss, epoch_loss / std::max(epoch_weight, 1e-300), target_scale);
    if (validation != nullptr) {
      metrics.validation = metric_of_loss(loss, trainer.evaluate(validation_rows), target_scale);
    }
    fit.history.push_back(metrics);
    if (tracking_best && best_epoch() == epoch) best = trainer.parameters();
    if (callbacks.on_epoch) callbacks.on_epoch(metrics, options.epochs);
    bool stop = tracking_best && epoch - best_epoch() >= options.early_stopping;
    if (callbacks.on_checkpoint && options.checkpoint_every > 0 && (epoch + 1) % options.checkpoint_every == 0 &&
        epoch + 1 < options.epochs && !stop) {
      // The layers answer in the target's units, like any model; the exact parameters (the
      // target standardized) travel in the state for the resume.
      model::MlpTrainingState state;
      state["parameters"] = model::SharedArray<float>(trainer.parameters());
      state["adam_m"] = model::SharedArray<float>(trainer.first_moments());
      state["adam_v"] = model::SharedArray<float>(trainer.second_moments());
      if (tracking_best) state["best"] = model::SharedArray<float>(best);
      SLIPWAY_ASSIGN_OR_RETURN(
          auto checkpoint, model::MlpModel::make(layers_of(network, trainer.parameters(), target_scale, target_shift),
                                                 model::MlpPrecision::kFloat32, std::move(state)));
      SLIPWAY_RETURN_IF_ERROR(callbacks.on_checkpoint(checkpoint, epoch + 1, fit.history));
    }
    if (stop) {
      fit.stopped_early = true;
      break;
    }
    if (callbacks.stop != nullptr && callbacks.stop->load(std::memory_order_relaxed) && epoch + 1 < options.epochs) {
      return failed_precondition("training was stopped after epoch " + std::to_string(epoch + 1) + " of " +
                                 std::to_string(options.epochs));
    }
  }
  fit.epochs = static_cast<int>(fit.history.size());
  if (tracking_best) {
    fit.best_epoch = best_epoch();
    trainer.parameters() = best;
  }
  SLIPWAY_ASSIGN_OR_RETURN(fit.model,
                           model::MlpModel::make(layers_of(network, trainer.parameters(), target_scale, target_shift),
                                                 model::MlpPrecision::kFloat32));
  return fit;
}

Result<std::pair<double, std::vector<float>>> mlp_loss_gradient(const model::MlpModel& model, const MlpRows& rows,
                                                                MlpLoss loss) {
  const auto& layers = model.layers();
  MlpOptions options;
  for (std::size_t index = 0; index + 1 < layers.size(); ++index) options.hidden.push_back(layers[index].outputs);
  if (layers.size() > 1) {
    options.activation = layers.front().activation;
    options.layer_norm = layers.front().normalized();
  }
  Network network(layers.front().inputs, layers.back().outputs, options);
  MlpTrainer trainer(network, options, layers.front().inputs, loss);
  SLIPWAY_ASSIGN_OR_RETURN(trainer.parameters(), parameters_of(network, model, 1.0, 0.0));
  trainer.forward(rows.features, rows.rows, -1);
  double weight_total = rows.weights.empty() ? static_cast<double>(rows.rows)
                                             : std::accumulate(rows.weights.begin(), rows.weights.end(), 0.0);
  std::vector<float> gradient;
  double total = trainer.loss(rows.rows, rows.labels, rows.weights, weight_total, &gradient);
  trainer.backward(rows.features, rows.rows, gradient);
  return std::pair{total / weight_total, trainer.gradients()};
}

}  // namespace slipway::train
