// slipway/kernels.h — the hot loops of inference on plain arrays, each in the variants a CPU may
// have (scalar, AVX2, AVX-512), picked at run time from a dispatch table. Builds carry no -march:
// vector code is compiled per function for its instruction set and only called where the CPU has it.
//
// Every kernel has a plain reference variant, and tests/kernels/ runs every variant this CPU
// supports against it, bit for bit (as ggml's test-backend-ops does). Nothing here knows about
// models or tables: callers lay their data out as each kernel's contract says.
//
// Today: tree traversal over complete binary trees, and dense layers in fp32, bf16 and int8 (the
// matrix products of neural models, and of the LLM engine to come).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

#include "slipway/core.h"

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

// ---------------------------------------------------------------------------------------------
// Dense layers.
//
// out[r * outputs + o] = bias[o] + the sum over k of in[r * depth + k] * weight[o * depth + k],
// for `rows` input rows of `depth` values and `outputs` outputs: the fully connected layers of
// neural models and the projections of the LLM engine. Weights come one row of `depth` values per
// output (as PyTorch's Linear and ONNX's Gemm with transB store them) and are packed once, at
// load, into blocks of kDenseBlock outputs (zero-padded): one vector load holds the weights of 16
// outputs for one k (fp32) or for four (int8), and each input value is broadcast across them. So
// an input row is read once per block of outputs, a block of weights once per few input rows, and
// one input row (an LLM's decode step) reads every weight once.
//
// Every variant gives the reference's floats, bit for bit, but AMX's bf16 (see below):
//   - fp32: each output's sum starts from its bias and adds k in order, one fused multiply-add
//     per k (the reference calls std::fma; a vector lane does the same for its output);
//   - int8: weights quantized per output (symmetric: weight_scale = max|w| / 127, values in
//     [-127, 127]), input rows per row (the same, per row), the products summed exactly in 32-bit
//     integers, then fma(float(sum), in_scale * weight_scale, bias).
//   - bf16: per pair of inputs, the odd product then the even one, each a fused multiply-add
//     whose subnormal result is flushed to a signed zero (DenseBf16Kernel says more).
//     AMX's tile product (tdpbf16ps) sums each 32 inputs' products its own way, which no fixed
//     order of float steps reproduces: each output is within (depth + 1) * 2^-23 of the sum of
//     |bias| and the products' magnitudes of the reference's (DenseKernelVariant::amx).
//     Its outputs still depend only on their own row, not on the batch or the thread count. A
//     product beyond float's range is an infinity there (a fused multiply-add may not overflow).
// The int8 sums are exact only for depth <= kDenseInt8MaxDepth (127 * 127 * depth < 2^31).
//
// Preconditions, unchecked: finite weights; `in` holds rows * depth values, and quantized or
// rounded rows were made for the layer's depth (by quantize_rows or round_rows_to_bf16); `out` holds rows *
// outputs. A quantized row holding NaN or an infinity gives NaN outputs.
// Thread safety: packed layers are read only; any number of threads may run any variants on one.

inline constexpr std::size_t kDenseBlock = 16;
inline constexpr std::size_t kDenseInt8MaxDepth = 131072;
// A row (or weight row) whose max|x| is below this quantizes to zeros with scale 1.
inline constexpr float kTinyMagnitude = 1e-30f;

// What every packed layer has: its shape, its fused activation and its bias.
struct PackedDenseShape {
  std::size_t outputs = 0, depth = 0;
  bool relu = false;        // max(out, 0) as each output is stored (a NaN gives 0)
  std::vector<float> bias;  // blocks * kDenseBlock, zero past `outputs`
  std::size_t blocks() const { return (outputs + kDenseBlock - 1) / kDenseBlock; }
};

struct PackedDenseF32 : PackedDenseShape {
  // [blocks][depth][kDenseBlock]: the weights of block b's 16 outputs for input k together.
  std::vector<float> weights;
};
// `weights` is outputs x depth, row-major; `bias` has `outputs` values or is empty (zeros); `relu`
// fuses the activation into the store.
PackedDenseF32 pack_dense_f32(std::span<const float> weights, std::span<const float> bias, std::size_t outputs,
                              std::size_t depth, bool relu = false);

// The same from weights stored depth x outputs (the transpose, one column per output): how a
// backward pass holds the matrices it multiplies by. Same packed values; no fused ReLU.
PackedDenseF32 pack_dense_f32_transposed(std::span<const float> weights_transposed, std::span<const float> bias,
                                         std::size_t outputs, std::size_t depth);

// AMX multiplies tiles of 64 bytes of inputs: 64 int8 or 32 bf16 values. Packed weights and
// rounded or quantized rows are padded (with zeros) to whole tiles, so AMX reads them in place;
// the other variants stop at depth4 or depth2.
inline constexpr std::size_t kAmxTileBytes = 64;
inline constexpr std::size_t kInt8PaddedMultiple = kAmxTileBytes;
inline constexpr std::size_t kBf16PaddedMultiple = kAmxTileBytes / 2;

struct PackedDenseInt8 : PackedDenseShape {
  std::size_t depth4 = 0;        // depth rounded up to a multiple of 4 (the padding weighs zero)
  std::size_t padded_depth = 0;  // depth rounded up to kInt8PaddedMultiple: one block's inputs
  // [blocks][padded_depth / 4][kDenseBlock][4]: 16 outputs' weights for inputs k..k+3 in 64 bytes.
  std::vector<std::int8_t> weights;
  std::vector<float> scales;       // per output (blocks * kDenseBlock, zero past `outputs`)
  std::vector<std::int32_t> sums;  // per output, the sum of its quantized weights
};
PackedDenseInt8 pack_dense_int8(std::span<const float> weights, std::span<const float> bias, std::size_t outputs,
                                std::size_t depth, bool relu = false);

// bf16 weights: each rounded to bfloat16 (nearest, ties to even), in pairs of inputs, so one
// AVX-512 BF16 instruction (vdpbf16ps) adds two products for 16 outputs.
struct PackedDenseBf16 : PackedDenseShape {
  std::size_t depth2 = 0;        // depth rounded up to even (the padding weighs zero)
  std::size_t padded_depth = 0;  // depth rounded up to kBf16PaddedMultiple: one block's inputs
  // [blocks][padded_depth / 2][kDenseBlock][2]: 16 outputs' weights for inputs k and k+1.
  std::vector<std::uint16_t> weights;
};
PackedDenseBf16 pack_dense_bf16(std::span<const float> weights, std::span<const float> bias, std::size_t outputs,
                                std::size_t depth, bool relu = false);

PackedDenseBf16 pack_dense_bf16_transposed(std::span<const float> weights_transposed, std::span<const float> bias,
                                           std::size_t outputs, std::size_t depth);

// Input rows rounded to bfloat16 for the bf16 kernels (nearest, ties to even; a subnormal input
// becomes a signed zero, as AVX-512 BF16's conversion makes it), each padded with zeros to a
// stride of kBf16PaddedMultiple,
// with the chosen variant's row converter, whose values are the same in all.
struct Bf16Rows {
  std::size_t rows = 0, stride = 0;
  std::vector<std::uint16_t> values;
};
void round_rows_to_bf16(std::span<const float> in, std::size_t rows, std::size_t depth, Bf16Rows& out);

// Input rows quantized for the int8 kernels: q = round(x * 127 / max|x|) (to nearest, ties to
// even) in [-127, 127], stored as q + 128 (the unsigned byte AVX-512 VNNI multiplies), rows padded
// with 128 (zero) to a stride of kInt8PaddedMultiple; with the chosen variant's row quantizer, whose bytes are the same
// in all.
struct QuantizedRows {
  std::size_t rows = 0, stride = 0;
  std::vector<std::uint8_t> values;
  std::vector<float> scales;  // per row: max|x| / 127 (1 for a tiny row, NaN for a non-finite one)
};
void quantize_rows(std::span<const float> in, std::size_t rows, std::size_t depth, QuantizedRows& out);
// The same with one static scale for every row (calibrated ahead, not measured per row): q =
// round(x / scale) clamped to [-127, 127]; a row holding NaN or an infinity is zeros with scale NaN
// as above. The reference is the plain loop; the other uses SSE2 (x86-64's baseline), same bytes.
void quantize_rows_static(std::span<const float> in, std::size_t rows, std::size_t depth, float scale,
                          QuantizedRows& out);
void quantize_rows_static_reference(std::span<const float> in, std::size_t rows, std::size_t depth, float scale,
                                    QuantizedRows& out);

// Computes output blocks [first_block, first_block + block_count) of every row.
using DenseF32Kernel = void (*)(const PackedDenseF32& layer, const float* in, std::size_t rows, float* out,
                                std::size_t first_block, std::size_t block_count);
using DenseInt8Kernel = void (*)(const PackedDenseInt8& layer, const QuantizedRows& in, float* out,
                                 std::size_t first_block, std::size_t block_count);
// One row of `depth` values rounded to bfloat16, as round_rows_to_bf16 says.
using RoundRowBf16 = void (*)(const float* in, std::size_t depth, std::uint16_t* out);
// bf16: each output's sum starts from its bias and, per pair of inputs, adds the product of the
// odd input, then of the even one, each as one fused multiply-add whose result, when subnormal,
// becomes a zero of its sign: what vdpbf16ps does (weights, bias and inputs are flushed the same
// way when packed or rounded).
using DenseBf16Kernel = void (*)(const PackedDenseBf16& layer, const Bf16Rows& in, float* out, std::size_t first_block,
                                 std::size_t block_count);
// One row of `depth` values into quantized bytes (q + 128) and its scale, as quantize_rows says.
using QuantizeRow = void (*)(const float* in, std::size_t depth, std::uint8_t* out, float* scale);

struct DenseKernelVariant {
  // "scalar", "avx2", "avx512" (AVX-512F, BW, VL and VNNI), "avx512bf16" (that and AVX-512 BF16),
  // "amx" (that and AMX-BF16 and AMX-INT8, which Linux lets this process use)
  std::string_view name;
  // bf16 on bf16 instructions; the others emulate it in fp32 (the same bits, slower than fp32).
  bool bf16_native;
  // bf16 and int8 on AMX tiles, 16 and 8 times the vector kernels' multiply-adds per cycle; bf16
  // within the bound above rather than the reference's bits.
  bool amx;
  bool (*supported)();
  DenseF32Kernel f32;
  DenseInt8Kernel int8;
  QuantizeRow quantize_row;  // the same bytes in every variant
  DenseBf16Kernel bf16;
  RoundRowBf16 round_row_bf16;
};

// Every variant, the reference ("scalar") first, supported on this CPU or not.
std::span<const DenseKernelVariant> dense_kernel_variants();
// The fastest variant this CPU runs, unless SLIPWAY_DENSE_KERNEL names another it runs (or
// "scalar"); chosen on the first call and kept.
const DenseKernelVariant& dense_kernel();

// A layer over every row with the chosen variant, its output blocks split over `threads` (0: all
// cores) when the work is large enough to pay for them.
void dense_f32(const PackedDenseF32& layer, std::span<const float> in, std::size_t rows, std::span<float> out,
               int threads = 1);
void dense_int8(const PackedDenseInt8& layer, const QuantizedRows& in, std::span<float> out, int threads = 1);
void dense_bf16(const PackedDenseBf16& layer, const Bf16Rows& in, std::span<float> out, int threads = 1);

// ---------------------------------------------------------------------------------------------
// Activations and layer normalization: what follows a dense layer in an MLP, shared by inference
// and training so both compute the same values. Plain loops (the dense products dominate).

enum class Activation {
  kNone,
  kRelu,      // max(x, 0)
  kGelu,      // x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), PyTorch's and ONNX's default
  kGeluTanh,  // 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), GELU's tanh approximation
  kTanh,
  kSigmoid,
};
std::string_view activation_name(Activation activation);  // "none", "relu", "gelu", "gelu_tanh", ...
// The activation a name names, or false.
bool activation_by_name(std::string_view name, Activation& activation);

// values[i] = activation(values[i]).
void activate(Activation activation, std::span<float> values);
// d activation / dx at each `inputs` value (the values before the activation), times `gradients`,
// in place: the backward step of activate().
void activation_backward(Activation activation, std::span<const float> inputs, std::span<float> gradients);

// Each of `rows` rows of `width` values: (x - mean) / sqrt(variance + epsilon) * scale + shift, the
// variance biased (divided by width), mean and variance summed in double; with `scale` and `shift`
// empty, the normalized values alone (what a backward pass keeps). `inverse_deviations`
// (rows values, or empty) receives 1 / sqrt(variance + epsilon) per row, for the backward step.
void layer_norm(std::span<float> values, std::size_t rows, std::size_t width, std::span<const float> scale,
                std::span<const float> shift, float epsilon, std::span<float> inverse_deviations = {});

// ---------------------------------------------------------------------------------------------
// GGUF's quantized blocks (ggml-common.h), as they lie in a file: little-endian, scales in IEEE
// half precision. Dequantization is ggml's, value for value; quantization is ggml's reference
// (quantize_row_q8_0_ref, quantize_row_q4_0_ref), so the same floats give the same bytes.

inline constexpr std::size_t kQuantBlock = 32;  // values per Q8_0 or Q4_0 block

struct BlockQ8_0 {                  // NOLINT(readability-identifier-naming): ggml's name
  std::uint16_t scale;              // d = max|x| / 127, as a half
  std::int8_t values[kQuantBlock];  // x = d * q
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {                        // NOLINT(readability-identifier-naming): ggml's name
  std::uint16_t scale;                    // d = m / -8, m the value of largest magnitude, as a half
  std::uint8_t nibbles[kQuantBlock / 2];  // value j in the low nibble of byte j, j + 16 in the high
};
static_assert(sizeof(BlockQ4_0) == 18);

inline constexpr std::size_t kSuperBlock = 256;  // values per Q4_K block: 8 sub-blocks of 32

struct BlockQ4_K {            // NOLINT(readability-identifier-naming): ggml's name
  std::uint16_t scale;        // d, as a half: sub-block j's step is d * sc_j
  std::uint16_t min_scale;    // dmin, as a half: sub-block j's offset is dmin * m_j
  std::uint8_t scales[12];    // eight 6-bit (sc, m) pairs, packed as ggml's get_scale_min_k4 reads them
  std::uint8_t nibbles[128];  // each 64 values: 32 bytes, sub-block 2c in the low nibbles, 2c + 1 in the high
};
static_assert(sizeof(BlockQ4_K) == 144);

// IEEE half precision: to nearest, ties to even (overflow to infinity, NaN kept); and back, exact.
std::uint16_t float_to_half(float value);
float half_to_float(std::uint16_t bits);
// OCP FP8 E4M3 ("e4m3fn": sign, 4 exponent bits biased by 7, 3 mantissa bits, no infinities,
// 0x7F and 0xFF the NaNs): to nearest, ties to even, magnitudes past 448 (the largest) saturating
// to 448, NaN to 0 (a cache never holds a NaN code); and back, exact.
std::uint8_t float_to_fp8_e4m3(float value);
float fp8_e4m3_to_float(std::uint8_t bits);

// `values.size()` must be blocks.size() * kQuantBlock. Values are meant finite; one that is not
// stores as 0 (or the block's scale becomes infinite), never undefined.
void quantize_q8_0(std::span<const float> values, std::span<BlockQ8_0> blocks);
void dequantize_q8_0(std::span<const BlockQ8_0> blocks, std::span<float> values);
void quantize_q4_0(std::span<const float> values, std::span<BlockQ4_0> blocks);
void dequantize_q4_0(std::span<const BlockQ4_0> blocks, std::span<float> values);
// `values.size()` must be blocks.size() * kSuperBlock. Each sub-block's step and offset come from
// its smallest and largest value (offsets only down from 0, as ggml's are); ggml's quantizer
// searches for a step that lowers the error a little further, so its bytes may differ from
// these while dequantization, value for value, is the same.
void quantize_q4_k(std::span<const float> values, std::span<BlockQ4_K> blocks);
// Sub-block j's (0-7) 6-bit step and offset multipliers from a Q4_K block's packed `scales`, as
// ggml's get_scale_min_k4 unpacks them.
void unpack_q4_k_scale_min(std::size_t j, const std::uint8_t* packed, std::uint8_t& scale, std::uint8_t& min);
void dequantize_q4_k(std::span<const BlockQ4_K> blocks, std::span<float> values);

// ---------------------------------------------------------------------------------------------
// An LLM's weight products: out[t][r] = row r of a GGUF weight matrix . input row t.
//
// Matrices are repacked once, when a model loads, into panels of kPanelRows rows whose values
// interleave by four inputs, so that one 64-byte load holds 16 rows' next four codes and one
// int8 dot-product instruction (vpdpbusd) adds four products to each row's sum. The bytes per
// value stay the file's (scales and offsets move, the codes are the same). Quantized formats
// take their inputs quantized the same way, a block of 32 at a time (LlmInput); the float
// formats take floats.
//
// Each output's arithmetic is fixed, and every variant follows it (the vector variants are the
// scalar reference's bits): per block of 32, an exact integer sum of codes times quantized
// inputs, less the format's offset times the inputs' sum; then, in block order, one fused
// multiply-add into a float sum:
//   Q8_0, Q4_0: sum = fma(float(dot - offset * input_sum), weight_scale * input_scale, sum), the
//               offset 128 (codes are q + 128) or 8;
//   Q4_K:       per 256, a = fma(float(dot * sc_j), input_scale_j, a) and
//               b = fma(float(m_j * input_sum_j), input_scale_j, b) over its eight sub-blocks j,
//               then sum = fma(d, a, sum), sum = fma(-dmin, b, sum);
//   F32, F16, BF16: sum = fma(w_k, x_k, sum), k in order.
// So an output depends on its own row and input alone: the same bits in any batch, under any
// split of the panels over threads.

inline constexpr std::size_t kPanelRows = 16;

enum class LlmWeightFormat { kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_K };  // NOLINT(readability-identifier-naming)
bool llm_format_quantized(LlmWeightFormat format);
// Values per block of a row in the file: 1 for the float formats, 32, or 256 for Q4_K.
std::size_t llm_format_block(LlmWeightFormat format);

struct LlmPackedMatrix {
  LlmWeightFormat format = LlmWeightFormat::kF32;
  std::size_t rows = 0, columns = 0;
  std::size_t panels() const { return (rows + kPanelRows - 1) / kPanelRows; }
  std::size_t panel_bytes = 0;  // one panel: every block of its 16 rows
  std::size_t bytes() const { return panels() * panel_bytes; }
  const std::byte* panel(std::size_t index) const { return storage.data() + index * panel_bytes; }
  // Panels in order from a page boundary (64 bytes under AddressSanitizer), each whole cache lines (so vector loads do
  // not straddle them); rows past `rows` are zeros.
  HugePageBuffer storage;
};
// Repacks `rows` rows of `columns` values as they lie in a GGUF tensor of `format` (each row
// whole blocks). `file_rows` holds exactly rows * the format's row bytes.
LlmPackedMatrix pack_llm_matrix(LlmWeightFormat format, std::span<const std::byte> file_rows, std::size_t rows,
                                std::size_t columns);

// The input rows of a product: `tokens` rows of `columns` floats, and, for the quantized formats,
// the same rows quantized per block of 32 (q = round(x / scale), scale = max|x| / 127, as Q8_0
// but with the scale kept as a float) with each block's sum of q.
struct LlmInput {
  std::size_t tokens = 0, columns = 0;
  const float* values = nullptr;  // the caller's; kept alive for the product
  std::vector<std::int8_t> quantized;
  std::vector<float> scales;
  std::vector<std::int32_t> sums;
};
// Points `input` at `values` and, when `quantize` is set, quantizes them (columns a multiple of
// 32). Not-finite values quantize as 0 and make their block's scale NaN or infinite.
void prepare_llm_input(const float* values, std::size_t tokens, std::size_t columns, bool quantize, LlmInput& input);

// Panels [first_panel, first_panel + panel_count) of `matrix` against every input row:
// out[t * matrix.rows + r] for the rows in those panels. One thread.
using LlmProductKernel = void (*)(const LlmPackedMatrix& matrix, const LlmInput& input, std::size_t first_panel,
                                  std::size_t panel_count, float* out);

// `blocks` blocks of 32 values into quantized values, scales and sums, as LlmInput says.
using LlmQuantizeInput = void (*)(const float* values, std::size_t blocks, std::int8_t* quantized, float* scales,
                                  std::int32_t* sums);

// Attention over a block of kAttentionBlock cached positions, for up to kAttentionQueries queries
// at once (a prompt's consecutive tokens: they share the block's loads).
inline constexpr std::size_t kAttentionBlock = 16;
inline constexpr std::size_t kAttentionQueries = 4;
// A block of one head's cached keys or values, read where the cache holds them: as floats, as
// halves, or as int8 or FP8 E4M3 codes each worth its value times its position's scale (a float).
// Element k of position i is float(x), half_to_float(x), float(code) * scales[i * scale_stride] or
// fp8_e4m3_to_float(code) * scales[i * scale_stride]. FP8 blocks hold no NaN codes (0x7F, 0xFF)
// and scales below 2^120 in magnitude, as float_to_fp8_e4m3 and max / 448 give: the vector
// variants fold E4M3's 2^8 into the scale.
enum class KvElement : std::uint8_t { kF32, kF16, kInt8, kFp8E4M3 };
struct KvBlock {
  const void* data = nullptr;
  KvElement element = KvElement::kF32;
  std::size_t stride = 0;  // values: elements from one position's row to the next
  const float* scales = nullptr;
  std::size_t scale_stride = 0;
};
std::size_t kv_element_bytes(KvElement element);
// The block from its row `row` on (values).
KvBlock kv_block_from_row(const KvBlock& block, std::size_t row);

// Scores: scores[q * score_stride + i] = query_q . key_i for q < query_count, query_q at
// queries + q * query_stride and the block's keys transposed ([head_dim][kAttentionBlock],
// element d * kAttentionBlock + i, position i); each dot product summed in four chains of every
// fourth dimension (fused multiply-adds, in order), then (c0 + c1) + (c2 + c3).
using LlmBlockScores = void (*)(const float* queries, std::size_t query_stride, std::size_t query_count,
                                const KvBlock& keys, std::size_t head_dim, float* scores, std::size_t score_stride);
// Softmax of scores[0, count) * scale, in place: x = s * scale; e = kernels::llm_exp(x - max x);
// each e divided by the total, summed in 16 lanes (position mod 16, in order) whose halves are
// then added (lane j + 8 to lane j, then j + 4, j + 2, j + 1). NaN scores weigh 0.
using LlmSoftmax = void (*)(float* scores, std::size_t count, float scale);
// Values: out_q[d] = fma(weights_q[i], value_i[d], out_q[d]) for i < count, in order, for
// q < query_count (weights_q = weights + q * weight_stride, out_q = out + q * out_stride), value_i
// the block's row i (element i * values.stride + d).
using LlmAddWeightedValues = void (*)(const float* weights, std::size_t weight_stride, std::size_t query_count,
                                      std::size_t count, const KvBlock& values, std::size_t head_dim, float* out,
                                      std::size_t out_stride);
// SwiGLU's gate: gate[i] = gate[i] / (1 + llm_exp(-gate[i])) * up[i], for i < count.
using LlmSiluMultiply = void (*)(float* gate, const float* up, std::size_t count);
// exp(x) to within 2 ulp for x in [-87, 88]; 0 below -87 and for NaN; exp(88) above 88. Every
// variant computes it with these operations: n = nearbyint(x * log2(e)); r = fma(n, -ln2_hi, x),
// r = fma(n, -ln2_lo, r); Cephes' degree-5 polynomial p(r) by fused multiply-adds;
// (fma(p, r * r, r) + 1) * 2^n.
float llm_exp(float x);

struct LlmKernelVariant {
  std::string_view name;  // "scalar", "avx2" (AVX2, FMA, F16C), "avx512" (AVX-512F, BW, VL, VNNI)
  bool (*supported)();
  LlmProductKernel product;
  LlmQuantizeInput quantize_input;  // the same bytes in every variant
  LlmBlockScores block_scores;      // and these the same bits
  LlmSoftmax softmax;
  LlmAddWeightedValues add_weighted_values;
  LlmSiluMultiply silu_multiply;
};
std::span<const LlmKernelVariant> llm_kernel_variants();
// The fastest variant this CPU runs, unless SLIPWAY_LLM_KERNEL names another it runs.
const LlmKernelVariant& llm_kernel();

}  // namespace slipway::kernels
