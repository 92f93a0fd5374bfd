// The AVX2 and AVX-512 variants of the dense-layer kernels (slipway/kernels.h has the contract).
// Private to kernels: reached through the dispatch table in dense_kernels.cpp, which calls one
// only where the CPU has its instruction set.
#pragma once

#include <cstddef>
#include <cstdint>

#include "slipway/kernels.h"

namespace slipway::kernels {

// Need AVX2 and FMA.
void dense_f32_avx2(const PackedDenseF32& layer, const float* in, std::size_t rows, float* out, std::size_t first_block,
                    std::size_t block_count);
void dense_int8_avx2(const PackedDenseInt8& layer, const QuantizedRows& in, float* out, std::size_t first_block,
                     std::size_t block_count);

// Need AVX-512F (and, for int8, AVX-512BW and VNNI).
void dense_f32_avx512(const PackedDenseF32& layer, const float* in, std::size_t rows, float* out,
                      std::size_t first_block, std::size_t block_count);
void dense_int8_avx512_vnni(const PackedDenseInt8& layer, const QuantizedRows& in, float* out, std::size_t first_block,
                            std::size_t block_count);

// Need AVX2 and FMA; AVX-512F and AVX-512 BF16.
void dense_bf16_avx2(const PackedDenseBf16& layer, const Bf16Rows& in, float* out, std::size_t first_block,
                     std::size_t block_count);
void dense_bf16_avx512(const PackedDenseBf16& layer, const Bf16Rows& in, float* out, std::size_t first_block,
                       std::size_t block_count);
// Need AMX-BF16 or AMX-INT8, AMX-TILE and AVX-512F, and amx_usable().
void dense_bf16_amx(const PackedDenseBf16& layer, const Bf16Rows& in, float* out, std::size_t first_block,
                    std::size_t block_count);
void dense_int8_amx(const PackedDenseInt8& layer, const QuantizedRows& in, float* out, std::size_t first_block,
                    std::size_t block_count);
// The CPU has AMX-TILE, BF16 and INT8, and the operating system lets this process use it (asked
// once, on the first call).
bool amx_usable();

// Needs AVX-512F, BW, VL and BF16.
void round_row_bf16_avx512(const float* in, std::size_t depth, std::uint16_t* out);

// Need AVX2 and FMA; AVX-512F, BW and VL.
void quantize_row_avx2(const float* in, std::size_t depth, std::uint8_t* out, float* scale);
void quantize_row_avx512(const float* in, std::size_t depth, std::uint8_t* out, float* scale);

}  // namespace slipway::kernels
