// The Llama architecture's config and weights, read in place from a GGUF file.
#include <cstring>
#include <new>
#include <numeric>

#include <fmt/format.h>

#include "slipway/kernels.h"
#include "slipway/llm.h"

namespace slipway::llm {
namespace {

Result<std::size_t> positive(const GgufFile& file, const std::string& key) {
  SLIPWAY_ASSIGN_OR_RETURN(std::uint64_t value, file.require_unsigned(key));
  if (value == 0 || value > (std::uint64_t{1} << 24)) {
    return invalid_argument(fmt::format("{}: '{}' is {}; it must be between 1 and 2^24", file.source(), key, value));
  }
  return static_cast<std::size_t>(value);
}

// A tensor by name with the dims expected, as a matrix or a vector of floats.
Result<const GgufTensor*> find_tensor(const GgufFile& file, const std::string& name,
                                      const std::vector<std::uint64_t>& dims) {
  const GgufTensor* tensor = file.tensor(name);
  if (tensor == nullptr) return invalid_argument(file.source() + ": the tensor '" + name + "' is missing");
  if (tensor->dims != dims) {
    auto text = [](const std::vector<std::uint64_t>& values) { return fmt::format("[{}]", fmt::join(values, ", ")); };
    return invalid_argument(fmt::format("{}: tensor '{}' has dims {}; the config says {}", file.source(), name,
                                        text(tensor->dims), text(dims)));
  }
  return tensor;
}

Result<WeightMatrix> matrix(const GgufFile& file, const std::string& name, std::size_t rows, std::size_t columns) {
  SLIPWAY_ASSIGN_OR_RETURN(const GgufTensor* tensor, find_tensor(file, name, {columns, rows}));
  if (!supported_weight_type(tensor->type)) {
    return invalid_argument(
        fmt::format("{}: tensor '{}' is {}, which this engine does not run (F32, F16, BF16, "
                    "Q8_0, Q4_0 and Q4_K are supported)",
                    file.source(), name, tensor_type_info(tensor->type)->name));
  }
  return WeightMatrix{tensor->type, rows, columns, file.data(*tensor)};
}

kernels::LlmWeightFormat weight_format(TensorType type) {
  switch (type) {
    case TensorType::kF16:
      return kernels::LlmWeightFormat::kF16;
    case TensorType::kBF16:
      return kernels::LlmWeightFormat::kBF16;
    case TensorType::kQ8_0:
      return kernels::LlmWeightFormat::kQ8_0;
    case TensorType::kQ4_0:
      return kernels::LlmWeightFormat::kQ4_0;
    case TensorType::kQ4_K:
      return kernels::LlmWeightFormat::kQ4_K;
    default:
      return kernels::LlmWeightFormat::kF32;
  }
}

// A matrix the forward pass multiplies, repacked for the kernels.
Result<WeightMatrix> packed_matrix(const GgufFile& file, const std::string& name, std::size_t rows,
                                   std::size_t columns) {
  SLIPWAY_ASSIGN_OR_RETURN(WeightMatrix weights, matrix(file, name, rows, columns));
  try {
    weights.packed = std::make_shared<const kernels::LlmPackedMatrix>(
        kernels::pack_llm_matrix(weight_format(weights.type), weights.data, rows, columns));
  } catch (const std::bad_alloc&) {
    return resource_exhausted(fmt::format("{}: no memory for the weights '{}' ({:.1f} MB)", file.source(), name,
                                          static_cast<double>(weights.data.size()) / 1e6));
  }
  return weights;
}

Result<std::span<const float>> norm(const GgufFile& file, const std::string& name, std::size_t width) {
  SLIPWAY_ASSIGN_OR_RETURN(const GgufTensor* tensor, find_tensor(file, name, {width}));
  if (tensor->type != TensorType::kF32)
    return invalid_argument(file.source() + ": the norm '" + name + "' must be F32");
  auto bytes = file.data(*tensor);
  if (reinterpret_cast<std::uintptr_t>(bytes.data()) % alignof(float) != 0) {
    return invalid_argument(file.source() + ": the norm '" + name + "' is not aligned for floats");
  }
  return std::span<const float>(reinterpret_cast<const float*>(bytes.data()), width);
}

}  // namespace

Result<LlamaConfig> read_llama_config(const GgufFile& file) {
  SLIPWAY_ASSIGN_OR_RETURN(std::string architecture, file.require_string("general.architecture"));
  if (architecture != "llama") {
    return invalid_argument(
        fmt::format("{}: the architecture '{}' is not supported (only 'llama' is)", file.source(), architecture));
  }
  LlamaConfig config;
  SLIPWAY_ASSIGN_OR_RETURN(config.embedding, positive(file, "llama.embedding_length"));
  SLIPWAY_ASSIGN_OR_RETURN(config.layers, positive(file, "llama.block_count"));
  SLIPWAY_ASSIGN_OR_RETURN(config.heads, positive(file, "llama.attention.head_count"));
  SLIPWAY_ASSIGN_OR_RETURN(config.feed_forward, positive(file, "llama.feed_forward_length"));
  SLIPWAY_ASSIGN_OR_RETURN(config.context, positive(file, "llama.context_length"));
  config.kv_heads = config.heads;
  if (file.find("llama.attention.head_count_kv") != nullptr) {
    SLIPWAY_ASSIGN_OR_RETURN(config.kv_heads, positive(file, "llama.attention.head_count_kv"));
  }
  SLIPWAY_ASSIGN_OR_RETURN(double epsilon, file.require_real("llama.attention.layer_norm_rms_epsilon"));
  if (!(epsilon > 0 && epsilon < 1)) {
    return invalid_argument(file.source() + ": llama.attention.layer_norm_rms_epsilon must be between 0 and 1");
  }
  config.rms_epsilon = static_cast<float>(epsilon);
  if (const GgufValue* base = file.find("llama.rope.freq_base"); base != nullptr) {
    if (!base->as_real() || !(*base->as_real() > 1 && *base->as_real() < 1e12)) {
      return invalid_argument(file.source() + ": llama.rope.freq_base must be a number between 1 and 1e12");
    }
    config.rope_base = static_cast<float>(*base->as_real());
  }
  // Long-context RoPE variants change every angle: refused rather than run as plain RoPE with
  // logits that would be silently wrong.
  if (const GgufValue* scaling = file.find("llama.rope.scaling.type");
      scaling != nullptr && !(scaling->as_string() != nullptr && *scaling->as_string() == "none")) {
    return invalid_argument(file.source() + ": RoPE scaling (llama.rope.scaling.type) is not supported yet");
  }
  if (file.tensor("rope_freqs.weight") != nullptr) {
    return invalid_argument(file.source() +
                            ": per-frequency RoPE factors (rope_freqs.weight, Llama 3.1's long "
                            "context) are not supported yet");
  }
  if (config.embedding % config.heads != 0) {
    return invalid_argument(fmt::format("{}: the width {} is not a multiple of the {} heads", file.source(),
                                        config.embedding, config.heads));
  }
  if (config.kv_heads > config.heads || config.heads % config.kv_heads != 0) {
    return invalid_argument(
        fmt::format("{}: {} key/value heads do not divide the {} heads", file.source(), config.kv_heads, config.heads));
  }
  config.head_dim = config.embedding / config.heads;
  config.rope_dims = config.head_dim;
  if (file.find("llama.rope.dimension_count") != nullptr) {
    SLIPWAY_ASSIGN_OR_RETURN(config.rope_dims, positive(file, "llama.rope.dimension_count"));
  }
  if (config.rope_dims > config.head_dim || config.rope_dims % 2 != 0) {
    return invalid_argument(fmt::format("{}: llama.rope.dimension_count {} must be even and at most the head size {}",
                                        file.source(), config.rope_dims, config.head_dim));
  }
  const GgufTensor* embedding = file.tensor("token_embd.weight");
  if (embedding == nullptr || embedding->dims.size() != 2 || embedding->dims[0] != config.embedding) {
    return invalid_argument(file.source() + ": 'token_embd.weight' is missing or not [embedding, vocabulary]");
  }
  config.vocabulary = static_cast<std::size_t>(embedding->dims[1]);
  return config;
}

std::size_t WeightMatrix::row_bytes() const {
  const TensorTypeInfo* info = tensor_type_info(type);
  return columns / info->block_elements * info->block_bytes;
}

bool supported_weight_type(TensorType type) {
  switch (type) {
    case TensorType::kF32:
    case TensorType::kF16:
    case TensorType::kBF16:
    case TensorType::kQ8_0:
    case TensorType::kQ4_0:
    case TensorType::kQ4_K:
      return true;
    default:
      return false;
  }
}

void dequantize_row(const WeightMatrix& matrix, std::size_t row, float* out) {
  const std::byte* bytes = matrix.data.data() + row * matrix.row_bytes();
  const std::size_t columns = matrix.columns;
  // The file's bytes may sit at any offset the alignment allows: each block is copied out, not
  // cast (one block on the stack: this runs for every row of every product).
  auto blocks = [&](auto block, std::size_t per_block, auto dequantize) {
    for (std::size_t first = 0; first < columns; first += per_block) {
      std::memcpy(&block, bytes + first / per_block * sizeof(block), sizeof(block));
      dequantize(std::span(&block, 1), std::span<float>(out + first, per_block));
    }
  };
  switch (matrix.type) {
    case TensorType::kF32:
      std::memcpy(out, bytes, columns * sizeof(float));
      return;
    case TensorType::kF16:
    case TensorType::kBF16:
      for (std::size_t column = 0; column < columns; ++column) {
        std::uint16_t bits = 0;
        std::memcpy(&bits, bytes + column * 2, 2);
        out[column] = matrix.type == TensorType::kF16 ? kernels::half_to_float(bits)
                                                      : kernels::QuantizedTreesView::bf16_to_float(bits);
      }
      return;
    case TensorType::kQ8_0:
      return blocks(kernels::BlockQ8_0{}, kernels::kQuantBlock, kernels::dequantize_q8_0);
    case TensorType::kQ4_0:
      return blocks(kernels::BlockQ4_0{}, kernels::kQuantBlock, kernels::dequantize_q4_0);
    case TensorType::kQ4_K:
      return blocks(kernels::BlockQ4_K{}, kernels::kSuperBlock, kernels::dequantize_q4_k);
    default:
      std::fill(out, out + columns, 0.0f);  // not reached: load refuses other types
  }
}

Result<std::shared_ptr<const LlamaModel>> LlamaModel::open(const std::string& path) {
  SLIPWAY_ASSIGN_OR_RETURN(auto file, GgufFile::open(path));
  return from_file(std::move(file));
}

Result<std::shared_ptr<const LlamaModel>> LlamaModel::from_file(GgufFile file) {
  auto model = std::shared_ptr<LlamaModel>(new LlamaModel());
  model->file_ = std::move(file);
  const GgufFile& gguf = model->file_;
  SLIPWAY_ASSIGN_OR_RETURN(model->config_, read_llama_config(gguf));
  const LlamaConfig& config = model->config_;
  const std::size_t width = config.embedding, kv_width = config.kv_heads * config.head_dim;
  SLIPWAY_ASSIGN_OR_RETURN(model->token_embedding_, matrix(gguf, "token_embd.weight", config.vocabulary, width));
  // Tied when there is no output matrix: the token embedding's rows are the output's.
  std::string output_name = gguf.tensor("output.weight") != nullptr ? "output.weight" : "token_embd.weight";
  SLIPWAY_ASSIGN_OR_RETURN(model->output_, packed_matrix(gguf, output_name, config.vocabulary, width));
  SLIPWAY_ASSIGN_OR_RETURN(model->output_norm_, norm(gguf, "output_norm.weight", width));
  for (std::size_t index = 0; index < config.layers; ++index) {
    std::string prefix = fmt::format("blk.{}.", index);
    Layer layer;
    SLIPWAY_ASSIGN_OR_RETURN(layer.attention_norm, norm(gguf, prefix + "attn_norm.weight", width));
    SLIPWAY_ASSIGN_OR_RETURN(layer.ffn_norm, norm(gguf, prefix + "ffn_norm.weight", width));
    SLIPWAY_ASSIGN_OR_RETURN(layer.query, packed_matrix(gguf, prefix + "attn_q.weight", width, width));
    SLIPWAY_ASSIGN_OR_RETURN(layer.key, packed_matrix(gguf, prefix + "attn_k.weight", kv_width, width));
    SLIPWAY_ASSIGN_OR_RETURN(layer.value, packed_matrix(gguf, prefix + "attn_v.weight", kv_width, width));
    SLIPWAY_ASSIGN_OR_RETURN(layer.attention_output, packed_matrix(gguf, prefix + "attn_output.weight", width, width));
    SLIPWAY_ASSIGN_OR_RETURN(layer.gate, packed_matrix(gguf, prefix + "ffn_gate.weight", config.feed_forward, width));
    SLIPWAY_ASSIGN_OR_RETURN(layer.up, packed_matrix(gguf, prefix + "ffn_up.weight", config.feed_forward, width));
    SLIPWAY_ASSIGN_OR_RETURN(layer.down, packed_matrix(gguf, prefix + "ffn_down.weight", width, config.feed_forward));
    model->layers_.push_back(layer);
  }
  return std::shared_ptr<const LlamaModel>(std::move(model));
}

// ---------------------------------------------------------------------------------------------
// Tensor-parallel shards.

namespace {

// A shard repacked for the kernels from `rows` rows of `row_bytes` bytes.
Result<WeightMatrix> packed_shard(TensorType type, std::span<const std::byte> data, std::span<const std::byte> rows,
                                  std::size_t row_count, std::size_t columns) {
  WeightMatrix shard{type, row_count, columns, data, nullptr};
  try {
    shard.packed = std::make_shared<const kernels::LlmPackedMatrix>(
        kernels::pack_llm_matrix(weight_format(type), rows, row_count, columns));
  } catch (const std::bad_alloc&) {
    return resource_exhausted(fmt::format("no memory for a tensor-parallel shard of {} rows of {} columns ({:.1f} MB)",
                                          row_count, columns, static_cast<double>(rows.size()) / 1e6));
  }
  return shard;
}

// Rows [slice.first, slice.first + slice.count): the file's bytes in place, repacked.
Result<WeightMatrix> row_shard(const WeightMatrix& matrix, TensorSlice slice) {
  if (slice.first == 0 && slice.count == matrix.rows) return matrix;
  const auto rows = matrix.data.subspan(slice.first * matrix.row_bytes(), slice.count * matrix.row_bytes());
  return packed_shard(matrix.type, rows, rows, slice.count, matrix.columns);
}

// Columns [slice.first, slice.first + slice.count) of every row, on the type's block boundaries:
// gathered from the file's rows, repacked, and not kept (the shard's `data` is empty).
Result<WeightMatrix> column_shard(const WeightMatrix& matrix, TensorSlice slice) {
  if (slice.first == 0 && slice.count == matrix.columns) return matrix;
  const TensorTypeInfo& info = *tensor_type_info(matrix.type);
  if (slice.first % info.block_elements != 0 || slice.count % info.block_elements != 0) {
    return invalid_argument(fmt::format("columns [{}, {}) do not fall on {}'s blocks of {}", slice.first,
                                        slice.first + slice.count, info.name, info.block_elements));
  }
  const std::size_t offset = slice.first / info.block_elements * info.block_bytes;
  const std::size_t bytes = slice.count / info.block_elements * info.block_bytes;
  std::vector<std::byte> gathered;
  try {
    gathered.resize(matrix.rows * bytes);
  } catch (const std::bad_alloc&) {
    return resource_exhausted("no memory to gather a tensor-parallel shard");
  }
  for (std::size_t row = 0; row < matrix.rows; ++row) {
    std::copy_n(matrix.data.begin() + static_cast<std::ptrdiff_t>(row * matrix.row_bytes() + offset), bytes,
                gathered.begin() + static_cast<std::ptrdiff_t>(row * bytes));
  }
  return packed_shard(matrix.type, {}, gathered, matrix.rows, slice.count);
}

// The smallest run of `item_columns`-wide items whose width is a whole number of every one of
// `matrices`' blocks.
std::size_t items_per_unit(std::size_t item_columns, const std::vector<const WeightMatrix*>& matrices) {
  std::size_t items = 1;
  for (const WeightMatrix* matrix : matrices) {
    const std::size_t block = tensor_type_info(matrix->type)->block_elements;
    items = std::lcm(items, block / std::gcd(block, item_columns));
  }
  return items;
}

// Rank `rank`'s share of `total` items dealt in units of `unit` items, as evenly as they go.
TensorSlice share(std::size_t total, std::size_t unit, std::size_t rank, std::size_t ranks) {
  const std::size_t units = (total + unit - 1) / unit;
  const std::size_t first = std::min(total, units * rank / ranks * unit);
  const std::size_t end = std::min(total, units * (rank + 1) / ranks * unit);
  return {first, end - first};
}

}  // namespace

TensorParallelModel::Rank TensorParallelModel::whole(const LlamaModel& model) {
  const LlamaConfig& config = model.config();
  Rank rank{{0, config.heads}, {0, config.kv_heads}, {0, config.feed_forward}, {0, config.vocabulary}, {},
            model.output()};
  for (const LlamaModel::Layer& layer : model.layers()) {
    rank.layers.push_back(
        {layer.query, layer.key, layer.value, layer.attention_output, layer.gate, layer.up, layer.down});
  }
  return rank;
}

Result<std::shared_ptr<const TensorParallelModel>> TensorParallelModel::split(std::shared_ptr<const LlamaModel> model,
                                                                              std::size_t ranks) {
  auto split = std::shared_ptr<TensorParallelModel>(new TensorParallelModel());
  split->model_ = std::move(model);
  const LlamaModel& source = *split->model_;
  const LlamaConfig& config = source.config();
  if (ranks <= 1) {
    if (ranks == 0) return invalid_argument("tensor parallelism needs at least one rank");
    split->ranks_.push_back(whole(source));
    return std::shared_ptr<const TensorParallelModel>(std::move(split));
  }
  // The attention's output matrix is split by columns at head-group boundaries, down's by columns
  // at hidden units: each split falls on a block boundary in every layer.
  const std::size_t group = config.heads / config.kv_heads;
  std::vector<const WeightMatrix*> attention_outputs, downs;
  for (const LlamaModel::Layer& layer : source.layers()) {
    attention_outputs.push_back(&layer.attention_output);
    downs.push_back(&layer.down);
  }
  const std::size_t group_unit = items_per_unit(group * config.head_dim, attention_outputs);
  const std::size_t hidden_unit = items_per_unit(1, downs);
  const std::size_t group_units = (config.kv_heads + group_unit - 1) / group_unit;
  const std::size_t hidden_units = (config.feed_forward + hidden_unit - 1) / hidden_unit;
  if (group_units < ranks) {
    return invalid_argument(fmt::format(
        "{} ranks cannot split {} key/value heads: each rank needs a run of {} head(s) ({} columns of the attention's "
        "output, a whole number of its blocks), so at most {} rank(s)",
        ranks, config.kv_heads, group_unit, group_unit * group * config.head_dim, group_units));
  }
  if (hidden_units < ranks) {
    return invalid_argument(fmt::format(
        "{} ranks cannot split {} hidden units: each rank needs a run of {} (a whole number of ffn_down's blocks), so "
        "at most {} rank(s)",
        ranks, config.feed_forward, hidden_unit, hidden_units));
  }
  if (config.vocabulary < ranks) {
    return invalid_argument(fmt::format("{} ranks cannot split a vocabulary of {}", ranks, config.vocabulary));
  }
  for (std::size_t index = 0; index < ranks; ++index) {
    Rank rank;
    rank.kv_heads = share(config.kv_heads, group_unit, index, ranks);
    rank.heads = {rank.kv_heads.first * group, rank.kv_heads.count * group};
    rank.hidden = share(config.feed_forward, hidden_unit, index, ranks);
    rank.vocabulary = share(config.vocabulary, 1, index, ranks);
    const std::size_t head_dim = config.head_dim;
    const TensorSlice query_rows{rank.heads.first * head_dim, rank.heads.count * head_dim};
    const TensorSlice kv_rows{rank.kv_heads.first * head_dim, rank.kv_heads.count * head_dim};
    for (const LlamaModel::Layer& layer : source.layers()) {
      Layer shard;
      SLIPWAY_ASSIGN_OR_RETURN(shard.query, row_shard(layer.query, query_rows));
      SLIPWAY_ASSIGN_OR_RETURN(shard.key, row_shard(layer.key, kv_rows));
      SLIPWAY_ASSIGN_OR_RETURN(shard.value, row_shard(layer.value, kv_rows));
      SLIPWAY_ASSIGN_OR_RETURN(shard.attention_output, column_shard(layer.attention_output, query_rows));
      SLIPWAY_ASSIGN_OR_RETURN(shard.gate, row_shard(layer.gate, rank.hidden));
      SLIPWAY_ASSIGN_OR_RETURN(shard.up, row_shard(layer.up, rank.hidden));
      SLIPWAY_ASSIGN_OR_RETURN(shard.down, column_shard(layer.down, rank.hidden));
      for (const WeightMatrix* matrix :
           {&shard.query, &shard.key, &shard.value, &shard.attention_output, &shard.gate, &shard.up, &shard.down}) {
        split->shard_bytes_ += matrix->packed->bytes();
      }
      rank.layers.push_back(std::move(shard));
    }
    SLIPWAY_ASSIGN_OR_RETURN(rank.output, row_shard(source.output(), rank.vocabulary));
    split->shard_bytes_ += rank.output.packed->bytes();
    split->ranks_.push_back(std::move(rank));
  }
  return std::shared_ptr<const TensorParallelModel>(std::move(split));
}

}  // namespace slipway::llm
