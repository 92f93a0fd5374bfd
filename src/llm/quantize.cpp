// slipway llm quantize: a GGUF model's matrices re-encoded in another type, row blocks at a time
// on every core, everything else copied.
#include <algorithm>

#include <fmt/format.h>

#include "slipway/kernels.h"
#include "slipway/llm.h"

namespace slipway::llm {

Result<std::vector<std::byte>> encode_tensor(std::span<const float> values, TensorType type) {
  std::vector<std::byte> bytes;
  auto append = [&](const void* data, std::size_t size) {
    const auto* first = static_cast<const std::byte*>(data);
    bytes.insert(bytes.end(), first, first + size);
  };
  auto blocks_of = [&](auto block, std::size_t per_block, auto quantize) {
    std::vector<decltype(block)> blocks(values.size() / per_block);
    quantize(values, std::span(blocks));
    append(blocks.data(), blocks.size() * sizeof(block));
  };
  switch (type) {
    case TensorType::kF32:
      append(values.data(), values.size() * sizeof(float));
      return bytes;
    case TensorType::kF16:
    case TensorType::kBF16:
      bytes.reserve(values.size() * 2);
      for (float value : values) {
        std::uint16_t bits = type == TensorType::kF16 ? kernels::float_to_half(value)
                                                      : kernels::QuantizedTreesView::float_to_bf16(value);
        append(&bits, 2);
      }
      return bytes;
    case TensorType::kQ8_0:
      blocks_of(kernels::BlockQ8_0{}, kernels::kQuantBlock, kernels::quantize_q8_0);
      return bytes;
    case TensorType::kQ4_0:
      blocks_of(kernels::BlockQ4_0{}, kernels::kQuantBlock, kernels::quantize_q4_0);
      return bytes;
    case TensorType::kQ4_K:
      blocks_of(kernels::BlockQ4_K{}, kernels::kSuperBlock, kernels::quantize_q4_k);
      return bytes;
    default:
      return invalid_argument("tensors are written as F32, F16, BF16, Q8_0, Q4_0 or Q4_K");
  }
}

std::uint32_t gguf_file_type(TensorType type) {
  switch (type) {
    case TensorType::kF16:
      return 1;
    case TensorType::kQ4_0:
      return 2;
    case TensorType::kQ8_0:
      return 7;
    case TensorType::kQ4_K:
      return 15;  // Q4_K_M's number; every matrix here is Q4_K
    case TensorType::kBF16:
      return 32;
    default:
      return 0;
  }
}

namespace {

bool is_matrix(const GgufTensor& tensor) {
  return tensor.dims.size() == 2 && tensor.name.ends_with(".weight") && supported_weight_type(tensor.type);
}

// The type a matrix of `columns` columns is written in: `wanted` when its rows are whole blocks.
TensorType type_for(std::size_t columns, TensorType wanted, TensorType current) {
  for (TensorType type : {wanted, TensorType::kQ8_0}) {
    if (columns % tensor_type_info(type)->block_elements == 0) return type;
  }
  return current;
}

}  // namespace

Status quantize_model(const std::string& in, const std::string& out, TensorType type,
                      const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  if (type != TensorType::kQ8_0 && type != TensorType::kQ4_0 && type != TensorType::kQ4_K && type != TensorType::kF16 &&
      type != TensorType::kBF16) {
    return invalid_argument("--type must be q8_0, q4_0, q4_k, f16 or bf16");
  }
  SLIPWAY_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(in));
  // A file this engine could not run is refused before any work: quantizing does not fix it.
  SLIPWAY_RETURN_IF_ERROR(read_llama_config(file).status());
  GgufWriter writer;
  for (const auto& [key, value] : file.metadata()) writer.set(key, value);
  writer.set("general.file_type", GgufValue::u32(gguf_file_type(type)));
  writer.set("general.quantization_version", GgufValue::u32(2));
  std::uint64_t total = 0, done = 0;
  for (const auto& tensor : file.tensors()) total += is_matrix(tensor) ? tensor.bytes : 0;
  for (const auto& tensor : file.tensors()) {
    std::span<const std::byte> bytes = file.data(tensor);
    if (!is_matrix(tensor)) {
      SLIPWAY_RETURN_IF_ERROR(writer.add_tensor(tensor.name, tensor.dims, tensor.type, {bytes.begin(), bytes.end()}));
      continue;
    }
    WeightMatrix matrix{tensor.type, static_cast<std::size_t>(tensor.dims[1]), static_cast<std::size_t>(tensor.dims[0]),
                        bytes, nullptr};
    TensorType target = type_for(matrix.columns, type, tensor.type);
    if (target == tensor.type) {
      SLIPWAY_RETURN_IF_ERROR(writer.add_tensor(tensor.name, tensor.dims, tensor.type, {bytes.begin(), bytes.end()}));
      done += tensor.bytes;
      continue;
    }
    // Rows in chunks, each chunk's rows dequantized and encoded on every core.
    constexpr std::size_t kRowsPerTask = 64;
    std::size_t tasks = (matrix.rows + kRowsPerTask - 1) / kRowsPerTask;
    std::vector<std::vector<std::byte>> encoded(tasks);
    std::vector<Status> failures(tasks);
    parallel_for(tasks, default_thread_count(), [&](std::size_t task) {
      std::size_t first = task * kRowsPerTask, rows = std::min(kRowsPerTask, matrix.rows - first);
      std::vector<float> values(rows * matrix.columns);
      for (std::size_t r = 0; r < rows; ++r) dequantize_row(matrix, first + r, values.data() + r * matrix.columns);
      auto result = encode_tensor(values, target);
      if (result.ok()) {
        encoded[task] = std::move(*result);
      } else {
        failures[task] = result.status();
      }
    });
    std::vector<std::byte> data;
    for (std::size_t task = 0; task < tasks; ++task) {
      SLIPWAY_RETURN_IF_ERROR(failures[task]);
      data.insert(data.end(), encoded[task].begin(), encoded[task].end());
      std::vector<std::byte>().swap(encoded[task]);
    }
    SLIPWAY_RETURN_IF_ERROR(writer.add_tensor(tensor.name, tensor.dims, target, std::move(data)));
    done += tensor.bytes;
    if (progress) progress(done, total);
  }
  return writer.write(out);
}

}  // namespace slipway::llm
