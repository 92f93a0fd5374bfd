// The AVX2 and AVX-512 complete-tree kernels: batches move 8 or 16 rows a level with gathers
// (across rows), a single row walks 32 trees at once (across trees). Each function carries its
// instruction set as a target attribute, so the build needs no -march and the dispatch table
// (tree_kernels.cpp) calls them only where the CPU has it. All of them add leaves per row in tree
// order, so they give the reference walk's floats (and XGBoost's).
#include "kernels/tree_kernels_x86.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

namespace slipway::kernels {
namespace {

constexpr std::size_t kRowsPerBlock = 64;
constexpr std::size_t kMinRowsAcrossRows = 16;

// Both kernels take whole blocks of 64 rows: 4 vectors of 16 lanes or 8 of 8, interleaved level
// by level so their gathers overlap. Each keeps a row's margin in a register from its base score
// and adds the trees in order, the scalar walk's exact sums.

__attribute__((target("avx512f"))) void add_leaves_avx512(std::span<const CompleteTree> trees, const float* thresholds,
                                                          const std::uint32_t* tree_features, const float* leaves,
                                                          const float* features, std::size_t blocks, std::size_t width,
                                                          float* margins) {
  constexpr std::size_t kLanes = 16;
  constexpr std::size_t kVectors = kRowsPerBlock / kLanes;
  const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
  const __m512i feature_mask = _mm512_set1_epi32(static_cast<int>(~kDefaultLeftBit));
  const __m512i default_left = _mm512_set1_epi32(static_cast<int>(kDefaultLeftBit));
  const __m512i one = _mm512_set1_epi32(1);
  // Masked gathers with a defined source: GCC 12 warns that the plain ones read an undefined one.
  const __m512i zero_int = _mm512_setzero_si512();
  const __m512 zero = _mm512_setzero_ps();
  const __mmask16 all = 0xFFFF;
  for (std::size_t block_index = 0; block_index < blocks; ++block_index) {
    const float* block = features + block_index * kRowsPerBlock * width;
    float* block_margins = margins + block_index * kRowsPerBlock;
    __m512i row_base[kVectors];
    __m512 sums[kVectors];
    for (std::size_t v = 0; v < kVectors; ++v) {
      row_base[v] = _mm512_mullo_epi32(_mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(v * kLanes))),
                                       _mm512_set1_epi32(static_cast<int>(width)));
      sums[v] = _mm512_loadu_ps(block_margins + v * kLanes);
    }
    for (const CompleteTree& tree : trees) {
      const float* tree_thresholds = thresholds + tree.internal_offset;
      const int* features_of_tree = reinterpret_cast<const int*>(tree_features + tree.internal_offset);
      __m512i position[kVectors];
      for (std::size_t v = 0; v < kVectors; ++v) position[v] = _mm512_setzero_si512();
      for (std::uint32_t level = 0; level < tree.depth; ++level) {
        for (std::size_t v = 0; v < kVectors; ++v) {
          __m512i feature = _mm512_mask_i32gather_epi32(zero_int, all, position[v], features_of_tree, 4);
          __m512 threshold = _mm512_mask_i32gather_ps(zero, all, position[v], tree_thresholds, 4);
          __m512i offset = _mm512_add_epi32(row_base[v], _mm512_and_si512(feature, feature_mask));
          __m512 x = _mm512_mask_i32gather_ps(zero, all, offset, block, 4);
          __mmask16 at_least = _mm512_cmp_ps_mask(x, threshold, _CMP_GE_OQ);   // NaN: false
          __mmask16 not_less = _mm512_cmp_ps_mask(x, threshold, _CMP_NLT_UQ);  // NaN: true
          __mmask16 nan_left = _mm512_test_epi32_mask(feature, default_left);
          auto right = static_cast<__mmask16>((nan_left & at_least) | (~nan_left & not_less));
          __m512i child = _mm512_add_epi32(_mm512_add_epi32(position[v], position[v]), one);
          position[v] = _mm512_mask_add_epi32(child, right, child, one);
        }
      }
      const float* tree_leaves = leaves + tree.leaf_offset - ((1U << tree.depth) - 1);
      for (std::size_t v = 0; v < kVectors; ++v) {
        sums[v] = _mm512_add_ps(sums[v], _mm512_mask_i32gather_ps(zero, all, position[v], tree_leaves, 4));
      }
    }
    for (std::size_t v = 0; v < kVectors; ++v) _mm512_storeu_ps(block_margins + v * kLanes, sums[v]);
  }
}

// Takes any multiple of 8 rows: blocks of 64, then one block of the 8-row vectors left.
__attribute__((target("avx2"))) void add_leaves_avx2(std::span<const CompleteTree> trees, const float* thresholds,
                                                     const std::uint32_t* tree_features, const float* leaves,
                                                     const float* features, std::size_t rows, std::size_t width,
                                                     float* margins) {
  constexpr std::size_t kLanes = 8;
  constexpr std::size_t kMaxVectors = kRowsPerBlock / kLanes;
  const __m256i lane = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  const __m256i feature_mask = _mm256_set1_epi32(static_cast<int>(~kDefaultLeftBit));
  const __m256i default_left = _mm256_set1_epi32(static_cast<int>(kDefaultLeftBit));
  const __m256i one = _mm256_set1_epi32(1);
  for (std::size_t block_begin = 0; block_begin < rows; block_begin += kRowsPerBlock) {
    const float* block = features + block_begin * width;
    float* block_margins = margins + block_begin;
    const std::size_t vectors = std::min(kMaxVectors, (rows - block_begin) / kLanes);
    __m256i row_base[kMaxVectors];
    __m256 sums[kMaxVectors];
    for (std::size_t v = 0; v < vectors; ++v) {
      row_base[v] = _mm256_mullo_epi32(_mm256_add_epi32(lane, _mm256_set1_epi32(static_cast<int>(v * kLanes))),
                                       _mm256_set1_epi32(static_cast<int>(width)));
      sums[v] = _mm256_loadu_ps(block_margins + v * kLanes);
    }
    for (const CompleteTree& tree : trees) {
      const float* tree_thresholds = thresholds + tree.internal_offset;
      const int* features_of_tree = reinterpret_cast<const int*>(tree_features + tree.internal_offset);
      __m256i position[kMaxVectors];
      for (std::size_t v = 0; v < vectors; ++v) position[v] = _mm256_setzero_si256();
      for (std::uint32_t level = 0; level < tree.depth; ++level) {
        for (std::size_t v = 0; v < vectors; ++v) {
          __m256i feature = _mm256_i32gather_epi32(features_of_tree, position[v], 4);
          __m256 threshold = _mm256_i32gather_ps(tree_thresholds, position[v], 4);
          __m256i offset = _mm256_add_epi32(row_base[v], _mm256_and_si256(feature, feature_mask));
          __m256 x = _mm256_i32gather_ps(block, offset, 4);
          __m256 at_least = _mm256_cmp_ps(x, threshold, _CMP_GE_OQ);   // NaN: false
          __m256 not_less = _mm256_cmp_ps(x, threshold, _CMP_NLT_UQ);  // NaN: true
          __m256 nan_left =
              _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(feature, default_left), default_left));
          __m256i right = _mm256_castps_si256(_mm256_blendv_ps(not_less, at_least, nan_left));
          __m256i child = _mm256_add_epi32(_mm256_add_epi32(position[v], position[v]), one);
          position[v] = _mm256_sub_epi32(child, right);  // right is all ones (-1) where true
        }
      }
      const float* tree_leaves = leaves + tree.leaf_offset - ((1U << tree.depth) - 1);
      for (std::size_t v = 0; v < vectors; ++v) {
        sums[v] = _mm256_add_ps(sums[v], _mm256_i32gather_ps(tree_leaves, position[v], 4));
      }
    }
    for (std::size_t v = 0; v < vectors; ++v) _mm256_storeu_ps(block_margins + v * kLanes, sums[v]);
  }
}

// The trees of one step of the across-trees kernels, one a lane: where each one's nodes and leaves
// start and how deep it is. Unused lanes repeat the last tree with depth 0: they read its first
// leaf and are ignored.
struct TreeLanes {
  static constexpr std::size_t kLanes = 32;  // 4 vectors of 8
  alignas(32) std::int32_t internal[kLanes];
  alignas(32) std::int32_t leaf_base[kLanes];  // the index in `leaves` of the tree's leaf at position 0
  alignas(32) std::int32_t depth[kLanes];
  std::size_t count = 0;  // lanes holding a tree
  std::int32_t deepest = 0;

  void load(std::span<const CompleteTree> trees, std::size_t first) {
    count = std::min(kLanes, trees.size() - first);
    deepest = 0;
    for (std::size_t lane = 0; lane < kLanes; ++lane) {
      const CompleteTree& tree = trees[first + std::min(lane, count - 1)];
      internal[lane] = static_cast<std::int32_t>(tree.internal_offset);
      depth[lane] = lane < count ? static_cast<std::int32_t>(tree.depth) : 0;
      leaf_base[lane] = static_cast<std::int32_t>(tree.leaf_offset) - ((1 << depth[lane]) - 1);
      deepest = std::max(deepest, depth[lane]);
    }
  }
};

// The leaves the lanes reached (`position`: each lane's position in its complete tree), added to
// the row's margins one by one in tree order.
__attribute__((target("avx2"))) void add_lane_leaves(const TreeLanes& lanes, const __m256i* position,
                                                     const float* leaves, std::span<const CompleteTree> trees,
                                                     std::size_t first, float* margins) {
  alignas(32) float leaf_values[TreeLanes::kLanes];
  for (std::size_t v = 0; v < TreeLanes::kLanes / 8; ++v) {
    __m256i leaf_index =
        _mm256_add_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(lanes.leaf_base + v * 8)), position[v]);
    _mm256_store_ps(leaf_values + v * 8, _mm256_mask_i32gather_ps(_mm256_setzero_ps(), leaves, leaf_index,
                                                                  _mm256_castsi256_ps(_mm256_set1_epi32(-1)), 4));
  }
  for (std::size_t lane = 0; lane < lanes.count; ++lane) margins[trees[first + lane].group] += leaf_values[lane];
}

// One row, 32 trees at a time: four vectors of eight lanes, one tree a lane. A single row has no
// other rows to overlap, but its trees are independent, and four vectors keep four gather chains
// in flight. Lanes whose tree is shallower than the deepest stop at their leaf. The leaves are
// then added to the margins one by one, in tree order.
__attribute__((target("avx2"))) void add_row_avx2(std::span<const CompleteTree> trees, const float* thresholds,
                                                  const std::uint32_t* tree_features, const float* leaves,
                                                  const float* row, float* margins) {
  constexpr std::size_t kLanes = 8;
  constexpr std::size_t kVectors = 4;
  static_assert(kLanes * kVectors == TreeLanes::kLanes);
  const __m256i feature_mask = _mm256_set1_epi32(static_cast<int>(~kDefaultLeftBit));
  const __m256i default_left = _mm256_set1_epi32(static_cast<int>(kDefaultLeftBit));
  const __m256i one = _mm256_set1_epi32(1);
  const int* features_base = reinterpret_cast<const int*>(tree_features);
  TreeLanes lanes;
  for (std::size_t first = 0; first < trees.size(); first += TreeLanes::kLanes) {
    lanes.load(trees, first);
    __m256i internal_offset[kVectors];
    __m256i depths[kVectors];
    __m256i position[kVectors];
    for (std::size_t v = 0; v < kVectors; ++v) {
      internal_offset[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes.internal + v * kLanes));
      depths[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes.depth + v * kLanes));
      position[v] = _mm256_setzero_si256();
    }
    for (std::int32_t level = 0; level < lanes.deepest; ++level) {
      const __m256i current = _mm256_set1_epi32(level);
      for (std::size_t v = 0; v < kVectors; ++v) {
        __m256i active = _mm256_cmpgt_epi32(depths[v], current);
        __m256i node = _mm256_add_epi32(internal_offset[v], position[v]);
        __m256i feature = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), features_base, node, active, 4);
        __m256 threshold =
            _mm256_mask_i32gather_ps(_mm256_setzero_ps(), thresholds, node, _mm256_castsi256_ps(active), 4);
        __m256 x = _mm256_mask_i32gather_ps(_mm256_setzero_ps(), row, _mm256_and_si256(feature, feature_mask),
                                            _mm256_castsi256_ps(active), 4);
        __m256 at_least = _mm256_cmp_ps(x, threshold, _CMP_GE_OQ);
        __m256 not_less = _mm256_cmp_ps(x, threshold, _CMP_NLT_UQ);
        __m256 nan_left =
            _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(feature, default_left), default_left));
        __m256i right = _mm256_castps_si256(_mm256_blendv_ps(not_less, at_least, nan_left));
        __m256i child = _mm256_sub_epi32(_mm256_add_epi32(_mm256_add_epi32(position[v], position[v]), one), right);
        position[v] = _mm256_blendv_epi8(position[v], child, active);
      }
    }
    add_lane_leaves(lanes, position, leaves, trees, first, margins);
  }
}

// A single-output ensemble's rows go through the across-rows kernels in 8-row vectors (gathers
// index with 32-bit offsets within a 64-row block, hence the width limit): whole 64-row blocks
// through AVX-512 when asked, the whole 8-row vectors left through AVX2. The last few rows, and
// every row of a multi-output ensemble, go through the across-trees kernel.
void add_tree_leaves_x86(bool use_avx512, const CompleteTreesView& layout, std::span<const float> features_span,
                         std::size_t rows, std::size_t width, std::span<float> margins_span, std::size_t group_count) {
  const float* thresholds = layout.thresholds.data();
  const std::uint32_t* tree_features = layout.features.data();
  const float* leaves = layout.leaves.data();
  const float* features = features_span.data();
  float* margins = margins_span.data();
  std::size_t done = 0;
  if (group_count == 1 && kRowsPerBlock * width < (std::size_t{1} << 31)) {
    if (use_avx512) {
      std::size_t blocks = rows / kRowsPerBlock;
      add_leaves_avx512(layout.trees, thresholds, tree_features, leaves, features, blocks, width, margins);
      done = blocks * kRowsPerBlock;
    }
    std::size_t vector_rows = (rows - done) / 8 * 8;
    // One or one and a half 8-row vectors leave a single chain of dependent gathers per level,
    // slower than walking each row across trees (slipway profile, 200 trees of depth 8: 8 rows
    // took 33 us this way and 18 us row by row); from two vectors on, the chains overlap.
    if (vector_rows < kMinRowsAcrossRows) vector_rows = 0;
    add_leaves_avx2(layout.trees, thresholds, tree_features, leaves, features + done * width, vector_rows, width,
                    margins + done);
    done += vector_rows;
  }
  for (std::size_t row = done; row < rows; ++row) {
    add_row_avx2(layout.trees, thresholds, tree_features, leaves, features + row * width, margins + row * group_count);
  }
}

// The 16-bit bins at byte offsets `offset` from `base` (lanes outside `active` read nothing and
// give 0), zero-extended. Each lane reads the aligned 32-bit word holding its bin and shifts: a
// 4-byte read at a 2-byte offset crosses a cache line once in 32, and on the Intel Xeon of
// docs/benchmarks.md a gather with one such lane ran the whole quantized kernel at less than half
// speed.
__attribute__((target("avx2"))) inline __m256i gather_bins(const int* base, __m256i offset, __m256i active) {
  __m256i word = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), base,
                                             _mm256_and_si256(offset, _mm256_set1_epi32(~3)), active, 1);
  __m256i shift = _mm256_slli_epi32(_mm256_and_si256(offset, _mm256_set1_epi32(2)), 3);
  return _mm256_and_si256(_mm256_srlv_epi32(word, shift), _mm256_set1_epi32(0xFFFF));
}

// The quantized layout (slipway/kernels.h), across rows: as add_leaves_avx2, but a level gathers
// the packed node and the row's 16-bit bin, two gathers where the float layout needs three. `rows` is a multiple of 8.
__attribute__((target("avx2"))) void add_quantized_leaves_avx2(std::span<const CompleteTree> trees,
                                                               const std::uint32_t* nodes, const float* leaves,
                                                               const std::uint16_t* bf16_leaves,
                                                               const std::uint16_t* bins, std::size_t rows,
                                                               std::size_t width, float* margins) {
  constexpr std::size_t kLanes = 8;
  constexpr std::size_t kMaxVectors = kRowsPerBlock / kLanes;
  const __m256i lane = _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  const __m256i feature_mask = _mm256_set1_epi32(static_cast<int>(kQuantizedMaxFeatures - 1));
  const __m256i default_left = _mm256_set1_epi32(static_cast<int>(kQuantizedDefaultLeftBit));
  const __m256i missing = _mm256_set1_epi32(kMissingBin);
  const __m256i one = _mm256_set1_epi32(1);
  const int* node_words = reinterpret_cast<const int*>(nodes);
  for (std::size_t block_begin = 0; block_begin < rows; block_begin += kRowsPerBlock) {
    const int* block = reinterpret_cast<const int*>(bins + block_begin * width);
    float* block_margins = margins + block_begin;
    const std::size_t vectors = std::min(kMaxVectors, (rows - block_begin) / kLanes);
    __m256i row_base[kMaxVectors];  // byte offsets of each lane's row
    __m256 sums[kMaxVectors];
    for (std::size_t v = 0; v < vectors; ++v) {
      row_base[v] = _mm256_mullo_epi32(_mm256_add_epi32(lane, _mm256_set1_epi32(static_cast<int>(v * kLanes))),
                                       _mm256_set1_epi32(static_cast<int>(2 * width)));
      sums[v] = _mm256_loadu_ps(block_margins + v * kLanes);
    }
    for (const CompleteTree& tree : trees) {
      const int* tree_nodes = node_words + tree.internal_offset;
      __m256i position[kMaxVectors];
      for (std::size_t v = 0; v < vectors; ++v) position[v] = _mm256_setzero_si256();
      for (std::uint32_t level = 0; level < tree.depth; ++level) {
        for (std::size_t v = 0; v < vectors; ++v) {
          __m256i node = _mm256_i32gather_epi32(tree_nodes, position[v], 4);
          __m256i feature = _mm256_and_si256(node, feature_mask);
          __m256i offset = _mm256_add_epi32(row_base[v], _mm256_add_epi32(feature, feature));
          __m256i bin = gather_bins(block, offset, _mm256_set1_epi32(-1));
          __m256i split = _mm256_srli_epi32(node, 16);
          // bin >= split, as bin > split - 1 (both fit in 17 signed bits); a missing bin is the
          // largest, so it compares right, and the default direction flips it when it is left.
          __m256i right = _mm256_cmpgt_epi32(bin, _mm256_sub_epi32(split, one));
          __m256i missing_left = _mm256_and_si256(
              _mm256_cmpeq_epi32(bin, missing), _mm256_cmpeq_epi32(_mm256_and_si256(node, default_left), default_left));
          right = _mm256_xor_si256(right, missing_left);
          __m256i child = _mm256_add_epi32(_mm256_add_epi32(position[v], position[v]), one);
          position[v] = _mm256_sub_epi32(child, right);
        }
      }
      if (bf16_leaves != nullptr) {
        // Byte offsets of the leaves from the array's start; a bfloat16 is a float's high half.
        const __m256i leaf_base = _mm256_set1_epi32(2 * (static_cast<int>(tree.leaf_offset) - ((1 << tree.depth) - 1)));
        for (std::size_t v = 0; v < vectors; ++v) {
          __m256i bits = gather_bins(reinterpret_cast<const int*>(bf16_leaves),
                                     _mm256_add_epi32(leaf_base, _mm256_add_epi32(position[v], position[v])),
                                     _mm256_set1_epi32(-1));
          sums[v] = _mm256_add_ps(sums[v], _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16)));
        }
        continue;
      }
      const float* tree_leaves = leaves + tree.leaf_offset - ((1U << tree.depth) - 1);
      for (std::size_t v = 0; v < vectors; ++v) {
        sums[v] = _mm256_add_ps(sums[v], _mm256_i32gather_ps(tree_leaves, position[v], 4));
      }
    }
    for (std::size_t v = 0; v < vectors; ++v) _mm256_storeu_ps(block_margins + v * kLanes, sums[v]);
  }
}

// As add_lane_leaves, for bfloat16 leaves.
__attribute__((target("avx2"))) void add_lane_bf16_leaves(const TreeLanes& lanes, const __m256i* position,
                                                          const std::uint16_t* leaves,
                                                          std::span<const CompleteTree> trees, std::size_t first,
                                                          float* margins) {
  alignas(32) float leaf_values[TreeLanes::kLanes];
  for (std::size_t v = 0; v < TreeLanes::kLanes / 8; ++v) {
    __m256i leaf_index =
        _mm256_add_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(lanes.leaf_base + v * 8)), position[v]);
    __m256i bits = gather_bins(reinterpret_cast<const int*>(leaves), _mm256_add_epi32(leaf_index, leaf_index),
                               _mm256_set1_epi32(-1));
    _mm256_store_ps(leaf_values + v * 8, _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16)));
  }
  for (std::size_t lane = 0; lane < lanes.count; ++lane) margins[trees[first + lane].group] += leaf_values[lane];
}

// The quantized layout for one row, 32 trees at a time, as add_row_avx2.
__attribute__((target("avx2"))) void add_quantized_row_avx2(std::span<const CompleteTree> trees,
                                                            const std::uint32_t* nodes, const float* leaves,
                                                            const std::uint16_t* bf16_leaves, const std::uint16_t* bins,
                                                            std::size_t row_offset, float* margins) {
  constexpr std::size_t kLanes = 8;
  constexpr std::size_t kVectors = 4;
  static_assert(kLanes * kVectors == TreeLanes::kLanes);
  const __m256i feature_mask = _mm256_set1_epi32(static_cast<int>(kQuantizedMaxFeatures - 1));
  const __m256i default_left = _mm256_set1_epi32(static_cast<int>(kQuantizedDefaultLeftBit));
  const __m256i missing = _mm256_set1_epi32(kMissingBin);
  const __m256i one = _mm256_set1_epi32(1);
  const int* node_words = reinterpret_cast<const int*>(nodes);
  // The row's bins start row_offset (0 or 1) elements after `bins`.
  const int* words = reinterpret_cast<const int*>(bins);
  const __m256i row_start = _mm256_set1_epi32(static_cast<int>(2 * row_offset));
  TreeLanes lanes;
  for (std::size_t first = 0; first < trees.size(); first += TreeLanes::kLanes) {
    lanes.load(trees, first);
    __m256i internal_offset[kVectors];
    __m256i depths[kVectors];
    __m256i position[kVectors];
    for (std::size_t v = 0; v < kVectors; ++v) {
      internal_offset[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes.internal + v * kLanes));
      depths[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes.depth + v * kLanes));
      position[v] = _mm256_setzero_si256();
    }
    for (std::int32_t level = 0; level < lanes.deepest; ++level) {
      const __m256i current = _mm256_set1_epi32(level);
      for (std::size_t v = 0; v < kVectors; ++v) {
        __m256i active = _mm256_cmpgt_epi32(depths[v], current);
        __m256i node = _mm256_mask_i32gather_epi32(_mm256_setzero_si256(), node_words,
                                                   _mm256_add_epi32(internal_offset[v], position[v]), active, 4);
        __m256i feature = _mm256_and_si256(node, feature_mask);
        __m256i bin = gather_bins(words, _mm256_add_epi32(row_start, _mm256_add_epi32(feature, feature)), active);
        __m256i right = _mm256_cmpgt_epi32(bin, _mm256_sub_epi32(_mm256_srli_epi32(node, 16), one));
        __m256i missing_left = _mm256_and_si256(_mm256_cmpeq_epi32(bin, missing),
                                                _mm256_cmpeq_epi32(_mm256_and_si256(node, default_left), default_left));
        right = _mm256_xor_si256(right, missing_left);
        __m256i child = _mm256_sub_epi32(_mm256_add_epi32(_mm256_add_epi32(position[v], position[v]), one), right);
        position[v] = _mm256_blendv_epi8(position[v], child, active);
      }
    }
    if (bf16_leaves != nullptr) {
      add_lane_bf16_leaves(lanes, position, bf16_leaves, trees, first, margins);
    } else {
      add_lane_leaves(lanes, position, leaves, trees, first, margins);
    }
  }
}

}  // namespace

void add_quantized_tree_leaves_avx2(const QuantizedTreesView& layout, std::span<const std::uint16_t> bins,
                                    std::size_t rows, std::size_t width, std::span<float> margins,
                                    std::size_t group_count) {
  const std::uint16_t* bf16_leaves = layout.bf16_leaves.empty() ? nullptr : layout.bf16_leaves.data();
  std::size_t done = 0;
  if (group_count == 1 && kRowsPerBlock * width * 2 < (std::size_t{1} << 31)) {
    std::size_t vector_rows = rows / 8 * 8;
    if (vector_rows < kMinRowsAcrossRows) vector_rows = 0;  // as in add_tree_leaves_x86
    add_quantized_leaves_avx2(layout.trees, layout.nodes.data(), layout.leaves.data(), bf16_leaves, bins.data(),
                              vector_rows, width, margins.data());
    done = vector_rows;
  }
  for (std::size_t row = done; row < rows; ++row) {
    // From an even element, so the 32-bit words read stay aligned when the width is odd.
    std::size_t first_bin = row * width;
    add_quantized_row_avx2(layout.trees, layout.nodes.data(), layout.leaves.data(), bf16_leaves,
                           bins.data() + (first_bin & ~1U), first_bin & 1U, margins.data() + row * group_count);
  }
}

void add_tree_leaves_avx2(const CompleteTreesView& layout, std::span<const float> features, std::size_t rows,
                          std::size_t width, std::span<float> margins, std::size_t group_count) {
  add_tree_leaves_x86(false, layout, features, rows, width, margins, group_count);
}

void add_tree_leaves_avx512(const CompleteTreesView& layout, std::span<const float> features, std::size_t rows,
                            std::size_t width, std::span<float> margins, std::size_t group_count) {
  add_tree_leaves_x86(true, layout, features, rows, width, margins, group_count);
}

}  // namespace slipway::kernels
