// The CUDA backend's host side: the model's weights uploaded once, and each forward pass as the
// CPU pass's steps launched on the device (llm/cuda/cuda_kernels.h). Built without CUDA, every
// entry says so.
#include <fmt/format.h>

#include "slipway/llm.h"

#if defined(SLIPWAY_WITH_CUDA)
#include <algorithm>
#include <set>
#include <utility>

#include "llm/cuda/cuda_kernels.h"
#endif

namespace slipway::llm {

#if !defined(SLIPWAY_WITH_CUDA)

bool cuda_built() { return false; }

Result<GpuDevice> cuda_device() {
  return unavailable("this slipway was built without CUDA: install the CUDA toolkit (nvcc on PATH) and rebuild");
}

Result<std::unique_ptr<CudaForward>> CudaForward::create(const std::shared_ptr<const LlamaModel>& /*model*/,
                                                         std::size_t /*sequences*/, std::size_t /*context*/) {
  return cuda_device().status();
}

#else

bool cuda_built() { return true; }

Result<GpuDevice> cuda_device() {
  cuda::DeviceInfo info;
  if (std::string error = cuda::device_info(info); !error.empty()) {
    return unavailable(fmt::format("no CUDA device to run on: {}", error));
  }
  return GpuDevice{info.name, info.memory_bytes, info.bandwidth, info.capability};
}

namespace {

Status check(const std::string& error, std::string_view what) {
  if (error.empty()) return {};
  return internal_error(fmt::format("CUDA, {}: {}", what, error));
}

// Device memory, freed with its owner.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(bytes_, other.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (data_ != nullptr) cuda::release(data_);
  }

  // At least `bytes`, contents not kept.
  Status reserve(std::size_t bytes) {
    if (bytes <= bytes_) return {};
    if (data_ != nullptr) cuda::release(std::exchange(data_, nullptr));
    bytes_ = 0;
    SLIPWAY_RETURN_IF_ERROR(check(cuda::allocate(bytes, &data_), fmt::format("allocating {} bytes", bytes)));
    bytes_ = bytes;
    return {};
  }
  Status upload(const void* host, std::size_t bytes) {
    SLIPWAY_RETURN_IF_ERROR(reserve(bytes));
    return check(cuda::copy_to_device(data_, host, bytes), "uploading");
  }
  float* floats() const { return static_cast<float*>(data_); }
  std::int32_t* ints() const { return static_cast<std::int32_t*>(data_); }
  const void* data() const { return data_; }

 private:
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

struct DeviceWeights {
  DeviceBuffer buffer;
  cuda::DeviceMatrix matrix;
};

// Q8_0 and F16 rows as the file has them; any other format widened to F16 row by row.
Status upload(const WeightMatrix& source, DeviceWeights& out, std::uint64_t& bytes) {
  out.matrix.rows = source.rows;
  out.matrix.columns = source.columns;
  if (source.type == TensorType::kQ8_0 || source.type == TensorType::kF16) {
    out.matrix.format = source.type == TensorType::kQ8_0 ? cuda::MatrixFormat::kQ8_0 : cuda::MatrixFormat::kF16;
    SLIPWAY_RETURN_IF_ERROR(out.buffer.upload(source.data.data(), source.data.size()));
    bytes += source.data.size();
  } else {
    out.matrix.format = cuda::MatrixFormat::kF16;
    std::vector<std::uint16_t> halves(source.rows * source.columns);
    std::vector<float> row(source.columns);
    for (std::size_t r = 0; r < source.rows; ++r) {
      dequantize_row(source, r, row.data());
      for (std::size_t c = 0; c < source.columns; ++c) halves[r * source.columns + c] = kernels::float_to_half(row[c]);
    }
    SLIPWAY_RETURN_IF_ERROR(out.buffer.upload(halves.data(), halves.size() * sizeof(std::uint16_t)));
    bytes += halves.size() * sizeof(std::uint16_t);
  }
  out.matrix.data = out.buffer.data();
  return {};
}

Status upload_floats(std::span<const float> values, DeviceBuffer& out) {
  return out.upload(values.data(), values.size_bytes());
}

class CudaForwardPass final : public CudaForward {
 public:
  CudaForwardPass(std::shared_ptr<const LlamaModel> model, std::size_t sequences, std::size_t context)
      : model_(std::move(model)), sequences_(sequences), context_(context), filled_(sequences, 0) {}

  Status load() {
    const LlamaConfig& config = model_->config();
    layers_.resize(config.layers);
    for (std::size_t index = 0; index < config.layers; ++index) {
      const LlamaModel::Layer& source = model_->layers()[index];
      Layer& layer = layers_[index];
      SLIPWAY_RETURN_IF_ERROR(upload_floats(source.attention_norm, layer.attention_norm));
      SLIPWAY_RETURN_IF_ERROR(upload_floats(source.ffn_norm, layer.ffn_norm));
      const std::pair<const WeightMatrix*, DeviceWeights*> matrices[] = {
          {&source.query, &layer.query}, {&source.key, &layer.key},
          {&source.value, &layer.value}, {&source.attention_output, &layer.attention_output},
          {&source.gate, &layer.gate},   {&source.up, &layer.up},
          {&source.down, &layer.down}};
      for (const auto& [from, to] : matrices) SLIPWAY_RETURN_IF_ERROR(upload(*from, *to, weight_bytes_));
      const std::size_t cache_bytes = sequences_ * context_ * config.kv_heads * config.head_dim * sizeof(float);
      SLIPWAY_RETURN_IF_ERROR(layer.keys.reserve(cache_bytes));
      SLIPWAY_RETURN_IF_ERROR(layer.values.reserve(cache_bytes));
    }
    SLIPWAY_RETURN_IF_ERROR(upload_floats(model_->output_norm(), output_norm_));
    return upload(model_->output(), output_, weight_bytes_);
  }

  std::uint64_t weight_bytes() const override { return weight_bytes_; }

  Status forward(std::span<const BatchToken> batch, const std::vector<bool>& wants_logits,
                 std::vector<float>& logits) override {
    const LlamaConfig& config = model_->config();
    const std::size_t tokens = batch.size(), width = config.embedding;
    if (tokens == 0 || wants_logits.size() != tokens) {
      return invalid_argument("a pass needs tokens, and a logits flag for each");
    }
    std::vector<float> x(tokens * width);
    std::vector<std::int32_t> sequences(tokens), positions(tokens), wanted;
    // As the CPU pass checks: every token in the room, no position twice, none past a gap (its
    // attention would read keys never written).
    std::vector<std::size_t> filled = filled_;
    std::set<std::pair<std::size_t, std::size_t>> seen;
    std::size_t longest = 0;
    for (std::size_t t = 0; t < tokens; ++t) {
      const BatchToken& token = batch[t];
      if (token.sequence >= sequences_ || token.position >= context_ || token.token < 0 ||
          static_cast<std::size_t>(token.token) >= config.vocabulary) {
        return invalid_argument(
            fmt::format("token {} (sequence {}, position {}, id {}) is outside the GPU pass's {} "
                        "sequences of {} positions or the vocabulary",
                        t, token.sequence, token.position, token.token, sequences_, context_));
      }
      if (!seen.emplace(token.sequence, token.position).second || token.position > filled[token.sequence]) {
        return invalid_argument(
            fmt::format("token {} (sequence {}, position {}) repeats a position or follows a gap "
                        "(the sequence holds {} positions)",
                        t, token.sequence, token.position, filled[token.sequence]));
      }
      filled[token.sequence] = std::max(filled[token.sequence], token.position + 1);
      longest = std::max(longest, token.position + 1);
      dequantize_row(model_->token_embedding(), static_cast<std::size_t>(token.token), x.data() + t * width);
      sequences[t] = static_cast<std::int32_t>(token.sequence);
      positions[t] = static_cast<std::int32_t>(token.position);
      if (wants_logits[t]) wanted.push_back(static_cast<std::int32_t>(t));
    }
    SLIPWAY_RETURN_IF_ERROR(prepare(tokens, std::max<std::size_t>(wanted.size(), 1)));
    filled_ = std::move(filled);
    SLIPWAY_RETURN_IF_ERROR(x_.upload(x.data(), x.size() * sizeof(float)));
    SLIPWAY_RETURN_IF_ERROR(sequences_on_device_.upload(sequences.data(), tokens * sizeof(std::int32_t)));
    SLIPWAY_RETURN_IF_ERROR(positions_on_device_.upload(positions.data(), tokens * sizeof(std::int32_t)));
    const std::size_t query_width = config.heads * config.head_dim, kv_width = config.kv_heads * config.head_dim;
    const std::size_t hidden = config.feed_forward;
    for (const Layer& layer : layers_) {
      cuda::rms_norm(x_.floats(), tokens, width, layer.attention_norm.floats(), config.rms_epsilon, normed_.floats());
      cuda::multiply(layer.query.matrix, normed_.floats(), tokens, query_.floats());
      cuda::multiply(layer.key.matrix, normed_.floats(), tokens, key_.floats());
      cuda::multiply(layer.value.matrix, normed_.floats(), tokens, value_.floats());
      cuda::rotate(query_.floats(), positions_on_device_.ints(), tokens, config.heads, config.head_dim,
                   config.rope_dims, config.rope_base, query_width);
      cuda::rotate(key_.floats(), positions_on_device_.ints(), tokens, config.kv_heads, config.head_dim,
                   config.rope_dims, config.rope_base, kv_width);
      // Every key and value of the batch is stored before any token attends, as on the CPU.
      cuda::store(key_.floats(), value_.floats(), sequences_on_device_.ints(), positions_on_device_.ints(), tokens,
                  kv_width, context_, layer.keys.floats(), layer.values.floats());
      cuda::attend(query_.floats(), layer.keys.floats(), layer.values.floats(), sequences_on_device_.ints(),
                   positions_on_device_.ints(), tokens, config.heads, config.kv_heads, config.head_dim, context_,
                   longest, attended_.floats());
      cuda::multiply(layer.attention_output.matrix, attended_.floats(), tokens, partial_.floats());
      cuda::add(x_.floats(), partial_.floats(), tokens * width);
      cuda::rms_norm(x_.floats(), tokens, width, layer.ffn_norm.floats(), config.rms_epsilon, normed_.floats());
      cuda::multiply(layer.gate.matrix, normed_.floats(), tokens, gate_.floats());
      cuda::multiply(layer.up.matrix, normed_.floats(), tokens, up_.floats());
      cuda::silu_multiply(gate_.floats(), up_.floats(), tokens * hidden);
      cuda::multiply(layer.down.matrix, gate_.floats(), tokens, partial_.floats());
      cuda::add(x_.floats(), partial_.floats(), tokens * width);
      SLIPWAY_RETURN_IF_ERROR(check(cuda::last_error(false), "a layer's kernels"));
    }
    logits.clear();
    if (wanted.empty()) return check(cuda::last_error(true), "the pass");
    SLIPWAY_RETURN_IF_ERROR(wanted_on_device_.upload(wanted.data(), wanted.size() * sizeof(std::int32_t)));
    cuda::gather(x_.floats(), wanted_on_device_.ints(), wanted.size(), width, partial_.floats());
    cuda::rms_norm(partial_.floats(), wanted.size(), width, output_norm_.floats(), config.rms_epsilon,
                   normed_.floats());
    cuda::multiply(output_.matrix, normed_.floats(), wanted.size(), logits_.floats());
    SLIPWAY_RETURN_IF_ERROR(check(cuda::last_error(true), "the pass"));
    logits.resize(wanted.size() * config.vocabulary);
    return check(cuda::copy_to_host(logits.data(), logits_.floats(), logits.size() * sizeof(float)),
                 "reading the logits");
  }

 private:
  struct Layer {
    DeviceBuffer attention_norm, ffn_norm, keys, values;
    DeviceWeights query, key, value, attention_output, gate, up, down;
  };

  // Work buffers for a pass of `tokens` tokens, `wanted` of them wanting logits (grown, never shrunk).
  Status prepare(std::size_t tokens, std::size_t wanted) {
    const LlamaConfig& config = model_->config();
    const std::size_t floats = sizeof(float);
    const std::size_t width = config.embedding, kv_width = config.kv_heads * config.head_dim;
    for (auto [buffer, columns] : {std::pair{&x_, width},
                                   {&normed_, width},
                                   {&partial_, width},
                                   {&query_, config.heads * config.head_dim},
                                   {&key_, kv_width},
                                   {&value_, kv_width},
                                   {&attended_, config.heads * config.head_dim},
                                   {&gate_, config.feed_forward},
                                   {&up_, config.feed_forward}}) {
      SLIPWAY_RETURN_IF_ERROR(buffer->reserve(tokens * columns * floats));
    }
    return logits_.reserve(wanted * config.vocabulary * floats);
  }

  std::shared_ptr<const LlamaModel> model_;
  std::size_t sequences_ = 0, context_ = 0;
  std::vector<std::size_t> filled_;  // per sequence, positions written
  std::uint64_t weight_bytes_ = 0;
  std::vector<Layer> layers_;
  DeviceBuffer output_norm_;
  DeviceWeights output_;
  DeviceBuffer x_, normed_, partial_, query_, key_, value_, attended_, gate_, up_, logits_;
  DeviceBuffer sequences_on_device_, positions_on_device_, wanted_on_device_;
};

}  // namespace

Result<std::unique_ptr<CudaForward>> CudaForward::create(const std::shared_ptr<const LlamaModel>& model,
                                                         std::size_t sequences, std::size_t context) {
  cuda::DeviceInfo device;
  if (std::string error = cuda::device_info(device); !error.empty()) {
    return unavailable(fmt::format("no CUDA device to run on: {}", error));
  }
  if (sequences == 0 || context == 0 || context > model->config().context) {
    return invalid_argument(
        fmt::format("the GPU pass needs at least one sequence of 1 to {} positions (asked: {} of {})",
                    model->config().context, sequences, context));
  }
  // Attention keeps a token's scores in shared memory: the context is bound by the card's.
  if (context * sizeof(float) > device.max_shared_bytes) {
    return invalid_argument(
        fmt::format("a context of {} positions needs {} bytes of shared memory per block; {} has {}", context,
                    context * sizeof(float), device.name, device.max_shared_bytes));
  }
  auto pass = std::make_unique<CudaForwardPass>(model, sequences, context);
  SLIPWAY_RETURN_IF_ERROR(pass->load());
  return std::unique_ptr<CudaForward>(std::move(pass));
}

#endif

}  // namespace slipway::llm
