// slipway/kernels.h — the hot loops of inference on plain arrays, each in the variants a CPU may
// have (scalar, AVX2, AVX-512), picked at run time from a dispatch table. Builds carry no -march:
// vector code is compiled per function for its instruction set and only called where the CPU has it.
//
// Every kernel has a plain reference variant, and tests/kernels/ runs every variant this CPU
// supports against it, bit for bit (as ggml's test-backend-ops does). Nothing here knows about
// models or tables: callers lay their data out as each kernel's contract says.
//
// Today: tree traversal over complete binary trees. The int8/bf16 matrix kernels of the neural
// and LLM work will land here too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>

namespace slipway::kernels {

// ---------------------------------------------------------------------------------------------
// Complete-tree traversal.
//
// The layout: every tree padded to a complete binary tree of its depth d, so the children of
// position p are at 2p+1 and 2p+2 and a walk needs no child pointers, with the node fields in
// separate arrays that vector gathers can read.
//   - Tree t owns the 2^d - 1 internal nodes thresholds[o + p] and features[o + p], for positions
//     p in [0, 2^d - 1) and o = t.internal_offset, and the 2^d leaves leaves[t.leaf_offset + i],
//     where leaf i sits at position 2^d - 1 + i. A tree of depth 0 is a single leaf.
//   - features[n] is the index of the feature node n splits on, with kDefaultLeftBit set when a
//     missing value goes left.
//   - At node n a row with feature value x goes left when x < thresholds[n] and right when
//     x >= thresholds[n]; when x or the threshold is NaN, it goes left exactly when
//     kDefaultLeftBit is set. So a padding node below a leaf reached early (NaN threshold,
//     kDefaultLeftBit set) sends every row left, and the leaf copied into every leaf slot below
//     it is the one reached.

inline constexpr std::uint32_t kCompleteTreeMaxDepth = 10;
inline constexpr std::uint32_t kDefaultLeftBit = 1U << 31;

struct CompleteTree {
  std::uint32_t internal_offset;  // into CompleteTreesView::thresholds and ::features
  std::uint32_t leaf_offset;      // into CompleteTreesView::leaves
  std::uint32_t depth;            // 0 to kCompleteTreeMaxDepth
  std::uint32_t group;            // the output (class) its leaf is added to
};

// A layout the caller owns; the kernels only read it. It must stay alive and unchanged during a
// call.
struct CompleteTreesView {
  std::span<const CompleteTree> trees;  // in the order their leaves are added
  std::span<const float> thresholds;
  std::span<const std::uint32_t> features;
  std::span<const float> leaves;
};

// Adds to margins[row * group_count + tree.group], for each of `rows` rows and each tree in
// order, the leaf the row reaches in that tree. Row r's features are
// features[r * width, (r + 1) * width); margins keep whatever they held before (a base score), and
// nothing outside the first rows * group_count of them is written.
//
// Every variant gives the same floats as the reference, bit for bit: each margin starts from its
// value on entry and adds its trees' leaves one at a time in tree order (the order XGBoost sums
// in), whatever the variant computes in parallel across rows or trees.
//
// Preconditions, which the kernels do not check (a layout comes from code, not from a user; a
// violation reads out of bounds): every tree's depth is at most kCompleteTreeMaxDepth and its
// nodes and leaves lie inside the arrays; every feature index is < width; every group is
// < group_count; the arrays hold fewer than 2^31 elements (vector gathers index with 32-bit
// offsets); features.size() >= rows * width and margins.size() >= rows * group_count.
//
// Thread safety: a pure function of its arguments; any number of threads may call any variants at
// once on one layout, each with margins of its own.
using AddTreeLeaves = void (*)(const CompleteTreesView& layout, std::span<const float> features, std::size_t rows,
                               std::size_t width, std::span<float> margins, std::size_t group_count);

struct TreeKernelVariant {
  // "scalar", "avx2" or "avx512", the names SLIPWAY_TREE_KERNEL takes.
  std::string_view name;
  // Whether this CPU can run the variant; add_leaves of one it cannot run must not be called.
  bool (*supported)();
  AddTreeLeaves add_leaves;
  // True for the plain reference walk ("scalar"), which runs on any CPU. A caller with a scalar
  // walk of its own may run that instead when this variant is chosen (TreeEnsembleModel walks its
  // pointer layout, what CPUs without AVX2 have always run).
  bool is_reference;
};

// Every variant, the reference first, supported on this CPU or not (tests run each supported one).
std::span<const TreeKernelVariant> tree_kernel_variants();

// The reference variant ("scalar"): one row at a time, each tree walked level by level.
const TreeKernelVariant& tree_kernel_reference();

// The variant to run for a requested name: "scalar" gives the reference; "avx512" gives AVX-512
// where the CPU has AVX-512F and AVX2; anything else (empty, unknown, or a variant the CPU lacks)
// gives AVX2 where the CPU has it, else the reference. AVX2 is the default over AVX-512: on the
// AMD EPYC it was measured on, 8-lane gathers beat 16-lane ones (docs/benchmarks.md).
const TreeKernelVariant& choose_tree_kernel(std::string_view requested);

// choose_tree_kernel(SLIPWAY_TREE_KERNEL), read from the environment on the first call and kept for
// the life of the process. Any thread may call it.
const TreeKernelVariant& tree_kernel();

// ---------------------------------------------------------------------------------------------
// Quantized complete-tree traversal.
//
// The complete layout above with each internal node packed into one 32-bit word, and rows given
// as bin indices instead of floats, so a level reads two things (the node, the row's bin) where
// the float layout reads three, and the node arrays take half the memory.
//   - nodes[o + p] holds the feature in bits 0-14, kQuantizedDefaultLeftBit (bit 15) when a
//     missing value goes left, and the split bin q in bits 16-31.
//   - A row's bin for a feature is the number of that feature's split thresholds <= its value,
//     or kMissingBin for a missing value; the caller maps values to bins.
//   - At a node a row with bin b goes left when b < q and right when b >= q; a missing value goes
//     left exactly when the bit is set.
// With q the index of the node's threshold among the feature's sorted thresholds, plus one,
// b < q exactly when the value is below the threshold: the bins keep every comparison of the float
// layout, so the leaves reached and the sums are the same, bit for bit. A node that sends every
// row one way (a NaN threshold in the float layout) has q = kMissingBin with the bit (left) or
// q = 0 without it (right).

inline constexpr std::uint32_t kQuantizedMaxFeatures = 1U << 15;
inline constexpr std::uint32_t kQuantizedDefaultLeftBit = 1U << 15;
inline constexpr std::uint16_t kMissingBin = 0xFFFF;
// A feature may have at most this many distinct thresholds (its bins are 0 to this count).
inline constexpr std::uint32_t kQuantizedMaxThresholds = 0xFFFE;

struct QuantizedTreesView {
  std::span<const CompleteTree> trees;  // internal_offset indexes nodes
  std::span<const std::uint32_t> nodes;
  std::span<const float> leaves;
  // When not empty, the leaves as bfloat16 (a float's high 16 bits), read instead of `leaves`:
  // half the bytes, each leaf within 2^-8 of its float relatively. It holds one element more than
  // there are leaves, and its data() is 4-byte aligned (the gathers read aligned 32-bit words).
  std::span<const std::uint16_t> bf16_leaves;
  float leaf(std::size_t index) const {
    return bf16_leaves.empty() ? leaves[index] : bf16_to_float(bf16_leaves[index]);
  }

  static float bf16_to_float(std::uint16_t bits) {
    std::uint32_t word = std::uint32_t{bits} << 16;
    float value = 0.0f;
    std::memcpy(&value, &word, sizeof(value));
    return value;
  }
  // Round to nearest, ties to even; a NaN stays a NaN.
  static std::uint16_t float_to_bf16(float value) {
    std::uint32_t word = 0;
    std::memcpy(&word, &value, sizeof(word));
    if ((word & 0x7FFFFFFFU) > 0x7F800000U) return static_cast<std::uint16_t>((word >> 16) | 0x40U);
    word += 0x7FFFU + ((word >> 16) & 1U);
    return static_cast<std::uint16_t>(word >> 16);
  }
};

// As AddTreeLeaves, for rows of bins: row r's bins are bins[r * width, (r + 1) * width), and
// bins.size() must exceed rows * width by at least one (vector gathers read four bytes at a time),
// and bins.data() should be 4-byte aligned (as any std::vector's is): the gathers read aligned
// words, and a misaligned array makes some of them cross cache lines, at twice the time.
// Same preconditions otherwise, with width <= kQuantizedMaxFeatures; every variant gives the
// reference's floats. With bf16_leaves, fewer than 2^30 leaves (their byte offsets are 32-bit).
using AddQuantizedTreeLeaves = void (*)(const QuantizedTreesView& layout, std::span<const std::uint16_t> bins,
                                        std::size_t rows, std::size_t width, std::span<float> margins,
                                        std::size_t group_count);

struct QuantizedTreeKernelVariant {
  std::string_view name;  // "scalar" or "avx2"
  bool (*supported)();
  AddQuantizedTreeLeaves add_leaves;
};

// Every variant, the reference ("scalar") first.
std::span<const QuantizedTreeKernelVariant> quantized_tree_kernel_variants();
// AVX2 where the CPU has it and SLIPWAY_TREE_KERNEL is not "scalar", else the reference; chosen on
// the first call and kept.
const QuantizedTreeKernelVariant& quantized_tree_kernel();

}  // namespace slipway::kernels
