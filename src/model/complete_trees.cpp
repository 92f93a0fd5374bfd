// Complete-tree prediction: a scalar walk over blocks of rows, and AVX2 / AVX-512 walks that move
// 8 or 16 rows a level with gathers. All of them add leaves per row in tree order, so they give
// the same floats as the pointer walk (and as XGBoost).
#include "model/complete_trees.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>

namespace slipway::model {
namespace {

constexpr std::uint32_t kDefaultLeftBit = 1U << 31;
constexpr std::size_t kRowsPerBlock = 64;

}  // namespace

CompleteTrees::CompleteTrees(const TreeEnsembleData& data, std::span<const std::uint32_t> depths) {
  std::size_t internal_total = 0;
  std::size_t leaf_total = 0;
  for (std::uint32_t depth : depths) {
    if (depth > kMaxDepth) return;
    internal_total += (std::size_t{1} << depth) - 1;
    leaf_total += std::size_t{1} << depth;
  }
  for (const auto& node : data.nodes) {
    if (!node.is_leaf() && node.is_categorical()) return;
  }
  // Padding sparse deep trees can multiply the size (a depth-10 path of 21 nodes pads to 2,047):
  // past 64x the nodes, or 64M slots, the pointer walk is the better layout.
  std::size_t slots = internal_total + leaf_total;
  if (slots > 64 * std::max<std::size_t>(data.nodes.size(), 1024) || slots > (std::size_t{1} << 26)) return;
  thresholds_.assign(internal_total, std::numeric_limits<float>::quiet_NaN());
  features_.assign(internal_total, kDefaultLeftBit);
  leaves_.assign(leaf_total, 0.0f);
  std::uint32_t internal_offset = 0;
  std::uint32_t leaf_offset = 0;
  struct Placement {
    std::uint32_t node;
    std::uint32_t position;  // in the complete tree, root 0, children 2p+1 and 2p+2
    std::uint32_t level;
  };
  std::vector<Placement> pending;
  for (std::size_t tree = 0; tree < data.roots.size(); ++tree) {
    std::uint32_t depth = depths[tree];
    std::uint32_t first_leaf = (1U << depth) - 1;
    std::uint32_t group = data.tree_groups.empty() ? 0 : data.tree_groups[tree];
    trees_.push_back({internal_offset, leaf_offset, depth, group});
    pending.assign(1, {data.roots[tree], 0, 0});
    while (!pending.empty()) {
      Placement at = pending.back();
      pending.pop_back();
      const TreeNode& node = data.nodes[at.node];
      if (at.level == depth) {
        leaves_[leaf_offset + at.position - first_leaf] = node.value;
        continue;
      }
      if (node.is_leaf()) {
        // Padding: the node keeps its always-left defaults; the leaf is copied down both sides so
        // every position below holds it.
        pending.push_back({at.node, 2 * at.position + 1, at.level + 1});
        pending.push_back({at.node, 2 * at.position + 2, at.level + 1});
        continue;
      }
      thresholds_[internal_offset + at.position] = node.value;
      features_[internal_offset + at.position] = node.feature() | (node.default_left() ? kDefaultLeftBit : 0U);
      pending.push_back({node.left, 2 * at.position + 1, at.level + 1});
      pending.push_back({node.right, 2 * at.position + 2, at.level + 1});
    }
    internal_offset += first_leaf;
    leaf_offset += first_leaf + 1;
  }
  usable_ = true;
}

namespace {

using Tree = CompleteTrees::Tree;

// Both kernels take whole blocks of 64 rows: 4 vectors of 16 lanes or 8 of 8, interleaved level
// by level so their gathers overlap. Each keeps a row's margin in a register from its base score
// and adds the trees in order, the scalar walk's exact sums.

__attribute__((target("avx512f"))) void add_leaves_avx512(const std::vector<Tree>& trees, const float* thresholds,
                                                           const std::uint32_t* tree_features, const float* leaves,
                                                           const float* features, std::size_t blocks,
                                                           std::size_t width, float* margins) {
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
    for (const Tree& tree : trees) {
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
__attribute__((target("avx2"))) void add_leaves_avx2(const std::vector<Tree>& trees, const float* thresholds,
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
    for (const Tree& tree : trees) {
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
          __m256 nan_left = _mm256_castsi256_ps(
              _mm256_cmpeq_epi32(_mm256_and_si256(feature, default_left), default_left));
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

// One row, 32 trees at a time: four vectors of eight lanes, one tree a lane. A single row has no
// other rows to overlap, but its trees are independent, and four vectors keep four gather chains
// in flight. Lanes whose tree is shallower than the deepest stop at their leaf. The leaves are
// then added to the margins one by one, in tree order.
__attribute__((target("avx2"))) void add_row_avx2(const std::vector<Tree>& trees, const float* thresholds,
                                                   const std::uint32_t* tree_features, const float* leaves,
                                                   const float* row, float* margins) {
  constexpr std::size_t kLanes = 8;
  constexpr std::size_t kVectors = 4;
  constexpr std::size_t kTreesPerStep = kLanes * kVectors;
  const __m256i feature_mask = _mm256_set1_epi32(static_cast<int>(~kDefaultLeftBit));
  const __m256i default_left = _mm256_set1_epi32(static_cast<int>(kDefaultLeftBit));
  const __m256i one = _mm256_set1_epi32(1);
  const int* features_base = reinterpret_cast<const int*>(tree_features);
  alignas(32) std::int32_t internal[kTreesPerStep];
  alignas(32) std::int32_t leaf_base[kTreesPerStep];
  alignas(32) std::int32_t depth[kTreesPerStep];
  alignas(32) float leaf_values[kTreesPerStep];
  for (std::size_t first = 0; first < trees.size(); first += kTreesPerStep) {
    std::size_t count = std::min(kTreesPerStep, trees.size() - first);
    std::int32_t deepest = 0;
    for (std::size_t lane = 0; lane < kTreesPerStep; ++lane) {
      // Unused lanes repeat the last tree with depth 0: they read its first leaf and are ignored.
      const Tree& tree = trees[first + std::min(lane, count - 1)];
      internal[lane] = static_cast<std::int32_t>(tree.internal_offset);
      depth[lane] = lane < count ? static_cast<std::int32_t>(tree.depth) : 0;
      leaf_base[lane] = static_cast<std::int32_t>(tree.leaf_offset) - ((1 << depth[lane]) - 1);
      deepest = std::max(deepest, depth[lane]);
    }
    __m256i internal_offset[kVectors];
    __m256i depths[kVectors];
    __m256i position[kVectors];
    for (std::size_t v = 0; v < kVectors; ++v) {
      internal_offset[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(internal + v * kLanes));
      depths[v] = _mm256_load_si256(reinterpret_cast<const __m256i*>(depth + v * kLanes));
      position[v] = _mm256_setzero_si256();
    }
    for (std::int32_t level = 0; level < deepest; ++level) {
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
    for (std::size_t v = 0; v < kVectors; ++v) {
      __m256i leaf_index =
          _mm256_add_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(leaf_base + v * kLanes)), position[v]);
      _mm256_store_ps(leaf_values + v * kLanes,
                      _mm256_mask_i32gather_ps(_mm256_setzero_ps(), leaves, leaf_index,
                                               _mm256_castsi256_ps(_mm256_set1_epi32(-1)), 4));
    }
    for (std::size_t lane = 0; lane < count; ++lane) margins[trees[first + lane].group] += leaf_values[lane];
  }
}

enum class VectorUnit { kNone, kAvx2, kAvx512 };

VectorUnit detect_vector_unit() {
  // AVX2 is the default where present: on the AMD EPYC this was measured on, its 8-lane gathers
  // beat AVX-512's 16-lane ones (docs/benchmarks.md). SLIPWAY_TREE_KERNEL=avx512|avx2|scalar
  // picks one ("scalar" is the pointer walk), for comparisons.
  const char* forced = std::getenv("SLIPWAY_TREE_KERNEL");
  std::string_view choice = forced == nullptr ? "" : forced;
  __builtin_cpu_init();
  bool avx2 = __builtin_cpu_supports("avx2");
  if (choice == "scalar") return VectorUnit::kNone;
  if (choice == "avx512" && __builtin_cpu_supports("avx512f")) return VectorUnit::kAvx512;
  return avx2 ? VectorUnit::kAvx2 : VectorUnit::kNone;
}

}  // namespace

std::size_t CompleteTrees::add_leaves(const float* features, std::size_t rows, std::size_t width, float* margins,
                                      std::size_t group_count) const {
  static const VectorUnit unit = detect_vector_unit();
  if (unit == VectorUnit::kNone) return 0;
  // A single-output model's rows go through the across-rows kernels in 8-row vectors (gathers
  // index with 32-bit offsets within a 64-row block); the last few rows, and multiclass rows,
  // through the across-trees one.
  std::size_t done = 0;
  if (group_count == 1 && kRowsPerBlock * width < (std::size_t{1} << 31)) {
    if (unit == VectorUnit::kAvx512) {
      std::size_t blocks = rows / kRowsPerBlock;
      add_leaves_avx512(trees_, thresholds_.data(), features_.data(), leaves_.data(), features, blocks, width, margins);
      done = blocks * kRowsPerBlock;
    }
    // Whole 8-row vectors left (all of them with AVX2): the across-rows kernel.
    std::size_t vector_rows = (rows - done) / 8 * 8;
    add_leaves_avx2(trees_, thresholds_.data(), features_.data(), leaves_.data(), features + done * width, vector_rows,
                    width, margins + done);
    done += vector_rows;
  }
  for (std::size_t row = done; row < rows; ++row) {
    add_row_avx2(trees_, thresholds_.data(), features_.data(), leaves_.data(), features + row * width,
                 margins + row * group_count);
  }
  return rows;
}

}  // namespace slipway::model
