// Complete-tree traversal: the reference walk, the dispatch table of variants, and the choice of
// one at run time (CPU detection and the SLIPWAY_TREE_KERNEL override). The vector variants are in
// tree_kernels_x86.cpp.
#include <array>
#include <cstdlib>

#include "kernels/tree_kernels_x86.h"
#include "slipway/kernels.h"

namespace slipway::kernels {
namespace {

// The contract's walk, written to be read: one row at a time, each tree level by level, the leaf
// added to the row's margin in tree order. x >= t and !(x < t) differ exactly when x or t is NaN,
// so the default direction picks between them.
void add_tree_leaves_reference(const CompleteTreesView& layout, std::span<const float> features, std::size_t rows,
                               std::size_t width, std::span<float> margins, std::size_t group_count) {
  for (std::size_t row = 0; row < rows; ++row) {
    const float* x = features.data() + row * width;
    float* row_margins = margins.data() + row * group_count;
    for (const CompleteTree& tree : layout.trees) {
      std::uint32_t position = 0;
      for (std::uint32_t level = 0; level < tree.depth; ++level) {
        std::uint32_t feature = layout.features[tree.internal_offset + position];
        float threshold = layout.thresholds[tree.internal_offset + position];
        float value = x[feature & ~kDefaultLeftBit];
        bool right = (feature & kDefaultLeftBit) != 0 ? value >= threshold : !(value < threshold);
        position = 2 * position + (right ? 2 : 1);
      }
      std::uint32_t first_leaf = (1U << tree.depth) - 1;
      row_margins[tree.group] += layout.leaves[tree.leaf_offset + position - first_leaf];
    }
  }
}

// The quantized contract's walk: the same, with bins for values and packed nodes.
void add_quantized_tree_leaves_reference(const QuantizedTreesView& layout, std::span<const std::uint16_t> bins,
                                         std::size_t rows, std::size_t width, std::span<float> margins,
                                         std::size_t group_count) {
  for (std::size_t row = 0; row < rows; ++row) {
    const std::uint16_t* x = bins.data() + row * width;
    float* row_margins = margins.data() + row * group_count;
    for (const CompleteTree& tree : layout.trees) {
      std::uint32_t position = 0;
      for (std::uint32_t level = 0; level < tree.depth; ++level) {
        std::uint32_t node = layout.nodes[tree.internal_offset + position];
        std::uint32_t bin = x[node & (kQuantizedMaxFeatures - 1)];
        bool right = bin == kMissingBin ? (node & kQuantizedDefaultLeftBit) == 0 : bin >= (node >> 16);
        position = 2 * position + (right ? 2 : 1);
      }
      std::uint32_t first_leaf = (1U << tree.depth) - 1;
      row_margins[tree.group] += layout.leaf(tree.leaf_offset + position - first_leaf);
    }
  }
}

bool always_supported() { return true; }

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2");
}

constexpr std::array<TreeKernelVariant, 3> kVariants = {{
    {"scalar", always_supported, add_tree_leaves_reference, true},
    {"avx2", cpu_has_avx2, add_tree_leaves_avx2, false},
    {"avx512", cpu_has_avx512, add_tree_leaves_avx512, false},
}};
constexpr const TreeKernelVariant& kReference = kVariants[0];
constexpr const TreeKernelVariant& kAvx2 = kVariants[1];
constexpr const TreeKernelVariant& kAvx512 = kVariants[2];

constexpr std::array<QuantizedTreeKernelVariant, 2> kQuantizedVariants = {{
    {"scalar", always_supported, add_quantized_tree_leaves_reference},
    {"avx2", cpu_has_avx2, add_quantized_tree_leaves_avx2},
}};

}  // namespace

std::span<const QuantizedTreeKernelVariant> quantized_tree_kernel_variants() { return kQuantizedVariants; }

const QuantizedTreeKernelVariant& quantized_tree_kernel() {
  static const QuantizedTreeKernelVariant& chosen = []() -> const QuantizedTreeKernelVariant& {
    const char* requested = std::getenv("SLIPWAY_TREE_KERNEL");
    bool scalar = requested != nullptr && std::string_view(requested) == "scalar";
    return !scalar && kQuantizedVariants[1].supported() ? kQuantizedVariants[1] : kQuantizedVariants[0];
  }();
  return chosen;
}

std::span<const TreeKernelVariant> tree_kernel_variants() { return kVariants; }

const TreeKernelVariant& tree_kernel_reference() { return kReference; }

const TreeKernelVariant& choose_tree_kernel(std::string_view requested) {
  if (requested == kReference.name) return kReference;
  if (requested == kAvx512.name && kAvx512.supported()) return kAvx512;
  return kAvx2.supported() ? kAvx2 : kReference;
}

const TreeKernelVariant& tree_kernel() {
  static const TreeKernelVariant& chosen = []() -> const TreeKernelVariant& {
    const char* requested = std::getenv("SLIPWAY_TREE_KERNEL");
    return choose_tree_kernel(requested == nullptr ? "" : requested);
  }();
  return chosen;
}

}  // namespace slipway::kernels
