// The CUDA backend's device side (cuda_kernels.cu), behind an interface of plain types so that
// only this file's implementation goes through nvcc: the forward pass's steps as kernel
// launches on device buffers, on the current device's default stream. Launches report errors
// through last_error() (the sticky one of the CUDA runtime), checked once per layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace slipway::llm::cuda {

struct DeviceInfo {
  std::string name;
  std::uint64_t memory_bytes = 0;
  double bandwidth = 0;              // bytes/s: memory clock x 2 (double data rate) x bus width
  int capability = 0;                // major * 10 + minor
  std::size_t max_shared_bytes = 0;  // per block, opted in
};
// "" when a device is there, this build has kernels for it, and `info` says what it is; else why
// not.
std::string device_info(DeviceInfo& info);

// "" or the error's text.
std::string allocate(std::size_t bytes, void** device);
void release(void* device);
std::string copy_to_device(void* device, const void* host, std::size_t bytes);
std::string copy_to_host(void* host, const void* device, std::size_t bytes);
// The first error of any launch since the last call (and waits for the work when `wait`).
std::string last_error(bool wait);

// A weight matrix in device memory: `rows` rows of `columns` values, each row whole blocks.
enum class MatrixFormat { kF16, kQ8_0 };  // NOLINT(readability-identifier-naming): ggml's names
struct DeviceMatrix {
  MatrixFormat format = MatrixFormat::kF16;
  std::size_t rows = 0, columns = 0;
  const void* data = nullptr;
};

// out[t * rows + r] = row r . in[t * columns ...] for t < tokens.
void multiply(const DeviceMatrix& matrix, const float* in, std::size_t tokens, float* out);
// out row = x row / sqrt(mean(x^2) + epsilon) * weight, the mean in double as the CPU's.
void rms_norm(const float* in, std::size_t rows, std::size_t width, const float* weight, float epsilon, float* out);
// Rotates adjacent pairs of the first rope_dims of each head (rows `stride` floats apart) by the
// token's position: pair i by position * base^(-2i / rope_dims).
void rotate(float* values, const std::int32_t* positions, std::size_t tokens, std::size_t heads, std::size_t head_dim,
            std::size_t rope_dims, float base, std::size_t stride);
// Writes each token's key and value rows (kv_width floats) into the layer's caches
// ([sequence][position][kv_width]).
void store(const float* keys, const float* values, const std::int32_t* sequences, const std::int32_t* positions,
           std::size_t tokens, std::size_t kv_width, std::size_t context, float* key_cache, float* value_cache);
// Each token's attention over its sequence's positions up to its own (at most `longest`), head by
// head (a group of heads / kv_heads query heads per key/value head), into out ([tokens][heads *
// head_dim]).
void attend(const float* queries, const float* key_cache, const float* value_cache, const std::int32_t* sequences,
            const std::int32_t* positions, std::size_t tokens, std::size_t heads, std::size_t kv_heads,
            std::size_t head_dim, std::size_t context, std::size_t longest, float* out);
// gate[i] = silu(gate[i]) * up[i].
void silu_multiply(float* gate, const float* up, std::size_t count);
// x[i] += y[i].
void add(float* x, const float* y, std::size_t count);
// out row i = in row rows[i], for i < count.
void gather(const float* in, const std::int32_t* rows, std::size_t count, std::size_t width, float* out);

}  // namespace slipway::llm::cuda
