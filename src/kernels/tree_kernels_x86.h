// The AVX2 and AVX-512 variants of the complete-tree kernel (slipway/kernels.h has the contract).
// Private to kernels: reached through the dispatch table in tree_kernels.cpp, which calls one only
// where the CPU has its instruction set.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "slipway/kernels.h"

namespace slipway::kernels {

// Needs AVX2.
void add_tree_leaves_avx2(const CompleteTreesView& layout, std::span<const float> features, std::size_t rows,
                          std::size_t width, std::span<float> margins, std::size_t group_count);

// Needs AVX-512F and AVX2 (the rows after the last whole 64-row block take the AVX2 kernels).
void add_tree_leaves_avx512(const CompleteTreesView& layout, std::span<const float> features, std::size_t rows,
                            std::size_t width, std::span<float> margins, std::size_t group_count);

// Needs AVX2.
void add_quantized_tree_leaves_avx2(const QuantizedTreesView& layout, std::span<const std::uint16_t> bins,
                                    std::size_t rows, std::size_t width, std::span<float> margins,
                                    std::size_t group_count);

}  // namespace slipway::kernels
