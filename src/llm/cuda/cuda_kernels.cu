// The CUDA backend's kernels: a plain, correct first backend (float activations, a warp per
// weight row reading the row once for up to eight tokens, attention a block per token and head),
// with no tensor cores and no fused kernels yet. Decode is bound by the weights' reads, which
// these kernels make coalesced; prompt processing is far from the card's arithmetic peak.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <filesystem>

#include "llm/cuda/cuda_kernels.h"

namespace slipway::llm::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;           // warps per block, a row each
constexpr std::size_t kTokensPerPass = 8;  // tokens a warp multiplies its row by at once

std::string text(cudaError_t error) { return error == cudaSuccess ? std::string() : cudaGetErrorString(error); }

std::size_t blocks_for(std::size_t count, std::size_t per_block) { return (count + per_block - 1) / per_block; }

__device__ float warp_sum(float value) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) value += __shfl_down_sync(0xFFFFFFFFu, value, offset);
  return value;
}

struct BlockQ8_0 {  // NOLINT(readability-identifier-naming): ggml's name
  __half scale;
  std::int8_t codes[32];
};
static_assert(sizeof(BlockQ8_0) == 34);

// What a warp of a product kernel multiplies: weight row `row` by tokens [first, first + count).
struct WarpTask {
  std::size_t row, first, count;
  int lane;
};

__device__ WarpTask warp_task(std::size_t tokens) {
  WarpTask task{};
  task.row = blockIdx.x * kRowsPerBlock + threadIdx.x / kWarp;
  task.lane = static_cast<int>(threadIdx.x % kWarp);
  task.first = static_cast<std::size_t>(blockIdx.y) * kTokensPerPass;
  task.count = min(kTokensPerPass, tokens - task.first);
  return task;
}

// Each token's sum over the warp's lanes into out[token * rows + row] (inlined: `sums` stays in
// registers).
__device__ __forceinline__ void write_sums(const WarpTask& task, const float* sums, std::size_t rows, float* out) {
#pragma unroll
  for (std::size_t t = 0; t < kTokensPerPass; ++t) {
    if (t >= task.count) break;  // the same for every lane of the warp
    const float total = warp_sum(sums[t]);
    if (task.lane == 0) out[(task.first + t) * rows + task.row] = total;
  }
}

// Each lane takes every 32nd group of eight columns (16 bytes of halves) of its warp's row.
__global__ void multiply_f16(const __half* weights, std::size_t rows, std::size_t columns, const float* in,
                             std::size_t tokens, float* out) {
  const WarpTask task = warp_task(tokens);
  if (task.row >= rows) return;  // the whole warp
  const std::size_t row = task.row, first = task.first, count = task.count;
  const int lane = task.lane;
  float sums[kTokensPerPass] = {};
  const __half* weight_row = weights + row * columns;
  if (columns % 8 == 0) {
    for (std::size_t group = lane; group < columns / 8; group += kWarp) {
      const uint4 packed = reinterpret_cast<const uint4*>(weight_row)[group];
      const __half2* pairs = reinterpret_cast<const __half2*>(&packed);
      float w[8];
      for (int j = 0; j < 4; ++j) {
        const float2 pair = __half22float2(pairs[j]);
        w[2 * j] = pair.x;
        w[2 * j + 1] = pair.y;
      }
#pragma unroll
      for (std::size_t t = 0; t < kTokensPerPass; ++t) {
        if (t >= count) break;
        const float* x = in + (first + t) * columns + group * 8;
        float sum = sums[t];
        for (int j = 0; j < 8; ++j) sum = fmaf(w[j], x[j], sum);
        sums[t] = sum;
      }
    }
  } else {
    for (std::size_t column = lane; column < columns; column += kWarp) {
      const float w = __half2float(weight_row[column]);
      for (std::size_t t = 0; t < count; ++t) sums[t] = fmaf(w, in[(first + t) * columns + column], sums[t]);
    }
  }
  write_sums(task, sums, rows, out);
}

// Each lane takes every 32nd block of 32 values of its warp's row.
__global__ void multiply_q8_0(const BlockQ8_0* weights, std::size_t rows, std::size_t columns, const float* in,
                              std::size_t tokens, float* out) {
  const WarpTask task = warp_task(tokens);
  if (task.row >= rows) return;  // the whole warp
  const std::size_t row = task.row, first = task.first, count = task.count;
  const int lane = task.lane;
  const std::size_t blocks = columns / 32;
  float sums[kTokensPerPass] = {};
  for (std::size_t b = lane; b < blocks; b += kWarp) {
    const BlockQ8_0& block = weights[row * blocks + b];
    const float scale = __half2float(block.scale);
    float w[32];
    for (int j = 0; j < 32; ++j) w[j] = static_cast<float>(block.codes[j]);
#pragma unroll
    for (std::size_t t = 0; t < kTokensPerPass; ++t) {
      if (t >= count) break;
      const float* x = in + (first + t) * columns + b * 32;
      float dot = 0;
      for (int j = 0; j < 32; ++j) dot = fmaf(w[j], x[j], dot);
      sums[t] = fmaf(dot, scale, sums[t]);
    }
  }
  write_sums(task, sums, rows, out);
}

constexpr int kNormThreads = 256;

__global__ void rms_norm_rows(const float* in, std::size_t width, const float* weight, float epsilon, float* out) {
  __shared__ double partial[kNormThreads];
  const float* x = in + blockIdx.x * width;
  double squares = 0;
  for (std::size_t i = threadIdx.x; i < width; i += kNormThreads) squares += static_cast<double>(x[i]) * x[i];
  partial[threadIdx.x] = squares;
  __syncthreads();
  for (int half = kNormThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  const auto scale = static_cast<float>(1.0 / sqrt(partial[0] / static_cast<double>(width) + epsilon));
  for (std::size_t i = threadIdx.x; i < width; i += kNormThreads)
    out[blockIdx.x * width + i] = x[i] * scale * weight[i];
}

__global__ void rotate_pairs(float* values, const std::int32_t* positions, std::size_t tokens, std::size_t heads,
                             std::size_t head_dim, std::size_t rope_dims, float base, std::size_t stride) {
  const std::size_t pairs = rope_dims / 2;
  const std::size_t index = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (index >= tokens * heads * pairs) return;
  const std::size_t pair = index % pairs, head = index / pairs % heads, token = index / pairs / heads;
  const double frequency =
      pow(static_cast<double>(base), -2.0 * static_cast<double>(pair) / static_cast<double>(rope_dims));
  const double angle = static_cast<double>(positions[token]) * frequency;
  const auto cosine = static_cast<float>(cos(angle)), sine = static_cast<float>(sin(angle));
  float* x = values + token * stride + head * head_dim + 2 * pair;
  const float first = x[0], second = x[1];
  x[0] = first * cosine - second * sine;
  x[1] = first * sine + second * cosine;
}

__global__ void store_rows(const float* keys, const float* values, const std::int32_t* sequences,
                           const std::int32_t* positions, std::size_t tokens, std::size_t kv_width, std::size_t context,
                           float* key_cache, float* value_cache) {
  const std::size_t index = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (index >= tokens * kv_width) return;
  const std::size_t token = index / kv_width, column = index % kv_width;
  const std::size_t at =
      (static_cast<std::size_t>(sequences[token]) * context + static_cast<std::size_t>(positions[token])) * kv_width +
      column;
  key_cache[at] = keys[index];
  value_cache[at] = values[index];
}

constexpr int kAttentionThreads = 128;

__device__ float block_reduce(float value, bool maximum, float* scratch) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    const float other = __shfl_down_sync(0xFFFFFFFFu, value, offset);
    value = maximum ? fmaxf(value, other) : value + other;
  }
  const int warp = static_cast<int>(threadIdx.x) / kWarp, lane = static_cast<int>(threadIdx.x) % kWarp;
  __syncthreads();  // scratch free again from any earlier reduction
  if (lane == 0) scratch[warp] = value;
  __syncthreads();
  float total = scratch[0];
  for (int w = 1; w < kAttentionThreads / kWarp; ++w) total = maximum ? fmaxf(total, scratch[w]) : total + scratch[w];
  return total;
}

// One block per (token, head): scores into shared memory, their softmax, then the values.
__global__ void attend_heads(const float* queries, const float* key_cache, const float* value_cache,
                             const std::int32_t* sequences, const std::int32_t* positions, std::size_t heads,
                             std::size_t kv_heads, std::size_t head_dim, std::size_t context, float* out) {
  extern __shared__ float scores[];
  __shared__ float scratch[kAttentionThreads / kWarp];
  const std::size_t token = blockIdx.x, head = blockIdx.y, kv_head = head / (heads / kv_heads);
  const std::size_t length = static_cast<std::size_t>(positions[token]) + 1, kv_width = kv_heads * head_dim;
  const std::size_t base = static_cast<std::size_t>(sequences[token]) * context * kv_width + kv_head * head_dim;
  const float* query = queries + token * heads * head_dim + head * head_dim;
  const float scale = rsqrtf(static_cast<float>(head_dim));
  float largest = -INFINITY;
  for (std::size_t p = threadIdx.x; p < length; p += kAttentionThreads) {
    const float* key = key_cache + base + p * kv_width;
    float dot = 0;
    for (std::size_t d = 0; d < head_dim; ++d) dot = fmaf(query[d], key[d], dot);
    scores[p] = dot * scale;
    largest = fmaxf(largest, scores[p]);
  }
  largest = block_reduce(largest, true, scratch);
  float total = 0;
  for (std::size_t p = threadIdx.x; p < length; p += kAttentionThreads) {
    scores[p] = __expf(scores[p] - largest);
    total += scores[p];
  }
  total = block_reduce(total, false, scratch);  // its barriers also publish every score
  for (std::size_t d = threadIdx.x; d < head_dim; d += kAttentionThreads) {
    float sum = 0;
    for (std::size_t p = 0; p < length; ++p) sum = fmaf(scores[p], value_cache[base + p * kv_width + d], sum);
    out[token * heads * head_dim + head * head_dim + d] = sum / total;
  }
}

__global__ void silu_multiply_values(float* gate, const float* up, std::size_t count) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < count) gate[i] = gate[i] / (1.0f + __expf(-gate[i])) * up[i];
}

__global__ void add_values(float* x, const float* y, std::size_t count) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < count) x[i] += y[i];
}

__global__ void gather_rows(const float* in, const std::int32_t* rows, std::size_t count, std::size_t width,
                            float* out) {
  const std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
  if (i < count * width) out[i] = in[static_cast<std::size_t>(rows[i / width]) * width + i % width];
}

constexpr int kThreads = 256;

}  // namespace

std::string device_info(DeviceInfo& info) {
  int count = 0;
  if (cudaError_t error = cudaGetDeviceCount(&count); error != cudaSuccess) {
    // Without a GPU the runtime blames the driver's version ("insufficient"); say what is missing.
    std::error_code ignored;
    bool driver = std::filesystem::exists("/dev/nvidiactl", ignored);
    if (!driver && (error == cudaErrorInsufficientDriver || error == cudaErrorNoDevice)) {
      return "no NVIDIA GPU found (no driver is loaded: /dev/nvidiactl is absent; CUDA says: " + text(error) + ")";
    }
    return text(error);
  }
  if (count == 0) return "no NVIDIA GPU found";
  cudaDeviceProp properties{};
  if (cudaError_t error = cudaGetDeviceProperties(&properties, 0); error != cudaSuccess) return text(error);
  int memory_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  int shared_bytes = 0;
  cudaDeviceGetAttribute(&shared_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
  info.name = properties.name;
  info.memory_bytes = properties.totalGlobalMem;
  info.bandwidth = 2.0 * memory_khz * 1e3 * bus_bits / 8.0;
  info.capability = properties.major * 10 + properties.minor;
  info.max_shared_bytes = static_cast<std::size_t>(shared_bytes);
  // A card this build has no kernels for fails at its first launch; say so now.
  cudaFuncAttributes attributes{};
  if (cudaError_t error = cudaFuncGetAttributes(&attributes, add_values); error != cudaSuccess) {
    cudaGetLastError();
    return "this build has no kernels for compute capability " + std::to_string(properties.major) + "." +
           std::to_string(properties.minor) + " (" + text(error) +
           "): rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(info.capability);
  }
  cudaGetLastError();  // an attribute the driver lacks leaves no error behind for the passes
  return {};
}

std::string allocate(std::size_t bytes, void** device) {
  const cudaError_t error = cudaMalloc(device, bytes);
  if (error != cudaSuccess) cudaGetLastError();  // returned here, not again by the next pass's check
  return text(error);
}

void release(void* device) { cudaFree(device); }

std::string copy_to_device(void* device, const void* host, std::size_t bytes) {
  return text(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
}

std::string copy_to_host(void* host, const void* device, std::size_t bytes) {
  return text(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost));
}

std::string last_error(bool wait) {
  if (wait) {
    if (cudaError_t error = cudaDeviceSynchronize(); error != cudaSuccess) return text(error);
  }
  return text(cudaGetLastError());
}

void multiply(const DeviceMatrix& matrix, const float* in, std::size_t tokens, float* out) {
  const dim3 grid(static_cast<unsigned>(blocks_for(matrix.rows, kRowsPerBlock)),
                  static_cast<unsigned>(blocks_for(tokens, kTokensPerPass)));
  if (matrix.format == MatrixFormat::kF16) {
    multiply_f16<<<grid, kRowsPerBlock * kWarp>>>(static_cast<const __half*>(matrix.data), matrix.rows, matrix.columns,
                                                  in, tokens, out);
  } else {
    multiply_q8_0<<<grid, kRowsPerBlock * kWarp>>>(static_cast<const BlockQ8_0*>(matrix.data), matrix.rows,
                                                   matrix.columns, in, tokens, out);
  }
}

void rms_norm(const float* in, std::size_t rows, std::size_t width, const float* weight, float epsilon, float* out) {
  rms_norm_rows<<<static_cast<unsigned>(rows), kNormThreads>>>(in, width, weight, epsilon, out);
}

void rotate(float* values, const std::int32_t* positions, std::size_t tokens, std::size_t heads, std::size_t head_dim,
            std::size_t rope_dims, float base, std::size_t stride) {
  const std::size_t count = tokens * heads * (rope_dims / 2);
  rotate_pairs<<<static_cast<unsigned>(blocks_for(count, kThreads)), kThreads>>>(values, positions, tokens, heads,
                                                                                 head_dim, rope_dims, base, stride);
}

void store(const float* keys, const float* values, const std::int32_t* sequences, const std::int32_t* positions,
           std::size_t tokens, std::size_t kv_width, std::size_t context, float* key_cache, float* value_cache) {
  store_rows<<<static_cast<unsigned>(blocks_for(tokens * kv_width, kThreads)), kThreads>>>(
      keys, values, sequences, positions, tokens, kv_width, context, key_cache, value_cache);
}

void attend(const float* queries, const float* key_cache, const float* value_cache, const std::int32_t* sequences,
            const std::int32_t* positions, std::size_t tokens, std::size_t heads, std::size_t kv_heads,
            std::size_t head_dim, std::size_t context, std::size_t longest, float* out) {
  const std::size_t shared = longest * sizeof(float);
  if (shared >
      48 * 1024) {  // past the default 48 KiB the kernel must opt in (a cheap call); a refusal fails the launch
    cudaFuncSetAttribute(attend_heads, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  }
  attend_heads<<<dim3(static_cast<unsigned>(tokens), static_cast<unsigned>(heads)), kAttentionThreads, shared>>>(
      queries, key_cache, value_cache, sequences, positions, heads, kv_heads, head_dim, context, out);
}

void silu_multiply(float* gate, const float* up, std::size_t count) {
  silu_multiply_values<<<static_cast<unsigned>(blocks_for(count, kThreads)), kThreads>>>(gate, up, count);
}

void add(float* x, const float* y, std::size_t count) {
  add_values<<<static_cast<unsigned>(blocks_for(count, kThreads)), kThreads>>>(x, y, count);
}

void gather(const float* in, const std::int32_t* rows, std::size_t count, std::size_t width, float* out) {
  gather_rows<<<static_cast<unsigned>(blocks_for(count * width, kThreads)), kThreads>>>(in, rows, count, width, out);
}

}  // namespace slipway::llm::cuda
