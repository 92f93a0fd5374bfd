// Every tree kernel variant this CPU supports against the reference walk, bit for bit, on random
// complete-tree layouts (as ggml's test-backend-ops runs every backend against the CPU one). The
// shapes reach each path inside the vector variants: 64-row blocks, 8-row vectors, the rows
// after the last vector, the single-row kernel's 32-tree steps, and multi-output ensembles.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "slipway/kernels.h"

namespace slipway::kernels {
namespace {

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
constexpr float kInfinity = std::numeric_limits<float>::infinity();

struct Layout {
  std::vector<CompleteTree> trees;
  std::vector<float> thresholds;
  std::vector<std::uint32_t> features;
  std::vector<float> leaves;

  CompleteTreesView view() const { return {trees, thresholds, features, leaves}; }
};

// A value on a coarse grid, so feature values often sit exactly on a threshold; now and then an
// infinity or a negative zero.
float grid_value(std::mt19937& random) {
  std::uniform_int_distribution<int> pick(0, 99);
  int draw = pick(random);
  if (draw == 0) return kInfinity;
  if (draw == 1) return -kInfinity;
  if (draw == 2) return -0.0f;
  return static_cast<float>(pick(random) - 50) / 16.0f;
}

// Values of very different magnitudes, so a sum taken in another order gives other floats.
float spread_value(std::mt19937& random) {
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-24, 24);
  return std::ldexp(mantissa(random), exponent(random));
}

// Trees of the given depths stored one after another. Internal nodes split on a random feature
// with a random default direction; about one in ten is padding (NaN threshold, every row left)
// and one in fifty has a NaN threshold that sends every row right. With `reversed`, the trees
// are listed in the opposite order to their storage.
Layout random_layout(const std::vector<std::uint32_t>& depths, std::size_t width, std::size_t group_count,
                     bool reversed, std::mt19937& random) {
  std::uniform_int_distribution<std::uint32_t> feature(0, static_cast<std::uint32_t>(width - 1));
  std::uniform_int_distribution<std::uint32_t> group(0, static_cast<std::uint32_t>(group_count - 1));
  std::uniform_int_distribution<int> percent(0, 99);
  Layout layout;
  for (std::uint32_t depth : depths) {
    std::uint32_t internal_count = (1U << depth) - 1;
    layout.trees.push_back({static_cast<std::uint32_t>(layout.thresholds.size()),
                            static_cast<std::uint32_t>(layout.leaves.size()), depth, group(random)});
    for (std::uint32_t node = 0; node < internal_count; ++node) {
      int kind = percent(random);
      if (kind < 10) {
        layout.thresholds.push_back(kNan);
        layout.features.push_back(feature(random) | kDefaultLeftBit);
      } else if (kind < 12) {
        layout.thresholds.push_back(kNan);
        layout.features.push_back(feature(random));
      } else {
        layout.thresholds.push_back(grid_value(random));
        layout.features.push_back(feature(random) | (percent(random) < 50 ? kDefaultLeftBit : 0U));
      }
    }
    for (std::uint32_t leaf = 0; leaf <= internal_count; ++leaf) layout.leaves.push_back(spread_value(random));
  }
  if (reversed) std::reverse(layout.trees.begin(), layout.trees.end());
  return layout;
}

// Rows of grid values, one in ten missing.
std::vector<float> random_rows(std::size_t rows, std::size_t width, std::mt19937& random) {
  std::uniform_int_distribution<int> percent(0, 99);
  std::vector<float> values(rows * width);
  for (float& value : values) value = percent(random) < 10 ? kNan : grid_value(random);
  return values;
}

const TreeKernelVariant& variant_named(std::string_view name) {
  for (const TreeKernelVariant& variant : tree_kernel_variants()) {
    if (variant.name == name) return variant;
  }
  ADD_FAILURE() << "no tree kernel variant is named " << name;
  return tree_kernel_reference();
}

std::vector<std::string_view> variant_names() {
  std::vector<std::string_view> names;
  for (const TreeKernelVariant& variant : tree_kernel_variants()) names.push_back(variant.name);
  return names;
}

// Margins past the ones a call may write, which must come back untouched.
constexpr std::size_t kGuardMargins = 16;
constexpr float kGuardValue = -12345.0f;

// Runs `variant` on the layout and rows from initial margins; returns rows * group_count margins
// followed by the guard margins.
std::vector<float> run(const TreeKernelVariant& variant, const Layout& layout, const std::vector<float>& rows,
                       std::size_t row_count, std::size_t width, const std::vector<float>& initial,
                       std::size_t group_count) {
  std::vector<float> margins = initial;
  margins.resize(initial.size() + kGuardMargins, kGuardValue);
  variant.add_leaves(layout.view(), rows, row_count, width, std::span(margins).first(initial.size()), group_count);
  return margins;
}

// The first margin whose bits differ, described; empty when all match.
std::string first_difference(const std::vector<float>& expected, const std::vector<float>& actual,
                             std::size_t group_count) {
  for (std::size_t index = 0; index < expected.size(); ++index) {
    if (std::bit_cast<std::uint32_t>(expected[index]) != std::bit_cast<std::uint32_t>(actual[index])) {
      std::size_t margin_count = expected.size() - kGuardMargins;
      std::string where = index < margin_count ? "row " + std::to_string(index / group_count) + ", group " +
                                                     std::to_string(index % group_count)
                                               : "guard margin " + std::to_string(index - margin_count);
      return where + ": expected " + std::to_string(expected[index]) + ", got " + std::to_string(actual[index]);
    }
  }
  return "";
}

struct Shape {
  std::string name;
  std::vector<std::uint32_t> depths;
  std::size_t width;
  std::size_t group_count;
  bool reversed = false;
};

std::vector<Shape> shapes() {
  std::vector<Shape> result;
  std::mt19937 random(11);
  std::uniform_int_distribution<std::uint32_t> any_depth(0, kCompleteTreeMaxDepth);
  // Each depth on its own: 20 trees of it, one output.
  for (std::uint32_t depth = 0; depth <= kCompleteTreeMaxDepth; ++depth) {
    result.push_back({"20 trees of depth " + std::to_string(depth), std::vector<std::uint32_t>(20, depth), 5, 1});
  }
  // Mixed depths, around the single-row kernel's 32 trees a step, one or several outputs.
  for (std::size_t tree_count : {1, 31, 32, 33, 70}) {
    for (std::size_t width : {1, 3, 28, 300}) {
      for (std::size_t group_count : {1, 3}) {
        std::vector<std::uint32_t> depths(tree_count);
        for (std::uint32_t& depth : depths) depth = any_depth(random);
        result.push_back({std::to_string(tree_count) + " trees of mixed depths, " + std::to_string(width) +
                              " features, " + std::to_string(group_count) + " groups",
                          depths, width, group_count});
      }
    }
  }
  result.push_back({"no trees", {}, 4, 1});
  result.push_back({"trees listed out of storage order", {3, 0, 10, 7, 1, 5, 2, 9}, 6, 1, true});
  result.push_back({"trees listed out of storage order, 2 groups", {3, 0, 10, 7, 1, 5, 2, 9}, 6, 2, true});
  return result;
}

// Row counts around the vector kernels' 8-row vectors and 64-row blocks, and the empty batch.
constexpr std::size_t kRowCounts[] = {0, 1, 2, 7, 8, 9, 15, 63, 64, 65, 71, 127, 128, 129, 200, 263};

class EveryTreeKernel : public ::testing::TestWithParam<std::string_view> {};

TEST_P(EveryTreeKernel, MatchesTheReferenceBitForBit) {
  const TreeKernelVariant& variant = variant_named(GetParam());
  if (!variant.supported()) GTEST_SKIP() << "this CPU cannot run the " << variant.name << " tree kernel";
  const TreeKernelVariant& reference = tree_kernel_reference();
  std::mt19937 random(7);
  for (const Shape& shape : shapes()) {
    Layout layout = random_layout(shape.depths, shape.width, shape.group_count, shape.reversed, random);
    for (std::size_t row_count : kRowCounts) {
      SCOPED_TRACE(shape.name + ", " + std::to_string(row_count) + " rows");
      std::vector<float> rows = random_rows(row_count, shape.width, random);
      std::vector<float> initial(row_count * shape.group_count);
      for (float& margin : initial) margin = spread_value(random);
      std::vector<float> expected = run(reference, layout, rows, row_count, shape.width, initial, shape.group_count);
      std::vector<float> actual = run(variant, layout, rows, row_count, shape.width, initial, shape.group_count);
      std::string difference = first_difference(expected, actual, shape.group_count);
      ASSERT_EQ(difference, "") << variant.name << " differs from the reference";
    }
  }
}

// The contract's rules on a hand-made layout, one tree per group: x0 < 0.5 (missing x0 left)
// -> [x1 < 2 (missing x1 right) -> 1 : 2], else a leaf 3 reached early (padding below it).
// Group 1's tree is a single leaf, 10.
TEST_P(EveryTreeKernel, FollowsTheLayoutRules) {
  const TreeKernelVariant& variant = variant_named(GetParam());
  if (!variant.supported()) GTEST_SKIP() << "this CPU cannot run the " << variant.name << " tree kernel";
  Layout layout;
  layout.trees = {{0, 0, 2, 0}, {3, 4, 0, 1}};
  layout.thresholds = {0.5f, 2.0f, kNan};
  layout.features = {0 | kDefaultLeftBit, 1, 0 | kDefaultLeftBit};
  layout.leaves = {1.0f, 2.0f, 3.0f, 3.0f, 10.0f};
  std::vector<float> rows = {0.1f, 1, 0.1f, 5, 0.5f, 1, kNan, 1, 0.1f, kNan, 9, kNan, kInfinity, 2, 0.1f, 2};
  std::size_t row_count = rows.size() / 2;
  std::vector<float> initial(row_count * 2, 0.5f);
  std::vector<float> margins = run(variant, layout, rows, row_count, 2, initial, 2);
  margins.resize(initial.size());
  std::vector<float> expected = {1.5f, 10.5f, 2.5f, 10.5f, 3.5f, 10.5f, 1.5f, 10.5f,
                                 2.5f, 10.5f, 3.5f, 10.5f, 3.5f, 10.5f, 2.5f, 10.5f};
  EXPECT_EQ(margins, expected);
}

INSTANTIATE_TEST_SUITE_P(TreeKernels, EveryTreeKernel, ::testing::ValuesIn(variant_names()),
                         [](const ::testing::TestParamInfo<std::string_view>& info) {
                           return std::string(info.param);
                         });

TEST(TreeKernelChoice, NamesEachVariantOnceWithTheReferenceFirst) {
  auto variants = tree_kernel_variants();
  ASSERT_FALSE(variants.empty());
  EXPECT_EQ(&variants[0], &tree_kernel_reference());
  EXPECT_EQ(variants[0].name, "scalar");
  EXPECT_TRUE(variants[0].supported());
  for (std::size_t index = 0; index < variants.size(); ++index) {
    EXPECT_EQ(variants[index].is_reference, index == 0) << variants[index].name;
    for (std::size_t other = index + 1; other < variants.size(); ++other) {
      EXPECT_NE(variants[index].name, variants[other].name);
    }
  }
}

// A request the CPU can run is honoured; AVX2 is the default, and what a request the CPU cannot
// run (or an unknown name) falls back to, where the CPU has it.
TEST(TreeKernelChoice, HonoursARequestTheCpuCanRunAndFallsBackOtherwise) {
  const TreeKernelVariant& reference = tree_kernel_reference();
  const TreeKernelVariant& avx2 = variant_named("avx2");
  const TreeKernelVariant& avx512 = variant_named("avx512");
  const TreeKernelVariant* fallback = avx2.supported() ? &avx2 : &reference;
  EXPECT_EQ(&choose_tree_kernel("scalar"), &reference);
  EXPECT_EQ(&choose_tree_kernel(""), fallback);
  EXPECT_EQ(&choose_tree_kernel("neon"), fallback);
  EXPECT_EQ(&choose_tree_kernel("avx2"), fallback);
  EXPECT_EQ(&choose_tree_kernel("avx512"), avx512.supported() ? &avx512 : fallback);
  const char* requested = std::getenv("SLIPWAY_TREE_KERNEL");
  EXPECT_EQ(&tree_kernel(), &choose_tree_kernel(requested == nullptr ? "" : requested));
}

// The quantized layout of a float layout, as its contract in slipway/kernels.h says: each
// feature's distinct thresholds sorted, a node's split bin its threshold's index plus one, a
// NaN threshold always-left (with the default-left bit) or always-right; and rows as bins.
struct QuantizedLayout {
  std::vector<CompleteTree> trees;
  std::vector<std::uint32_t> nodes;
  std::vector<float> leaves;
  std::vector<std::vector<float>> thresholds;  // per feature

  QuantizedTreesView view() const { return {trees, nodes, leaves, {}}; }

  std::vector<std::uint16_t> bins_of(const std::vector<float>& rows, std::size_t width) const {
    std::vector<std::uint16_t> bins(rows.size() + 1, 0x5A5A);  // the extra one: the gathers' slack
    for (std::size_t index = 0; index < rows.size(); ++index) {
      const auto& values = thresholds[index % width];
      bins[index] = std::isnan(rows[index])
                        ? kMissingBin
                        : static_cast<std::uint16_t>(std::upper_bound(values.begin(), values.end(), rows[index]) -
                                                     values.begin());
    }
    return bins;
  }
};

QuantizedLayout quantize(const Layout& layout, std::size_t width) {
  QuantizedLayout quantized{layout.trees, {}, layout.leaves, std::vector<std::vector<float>>(width)};
  for (std::size_t node = 0; node < layout.thresholds.size(); ++node) {
    if (!std::isnan(layout.thresholds[node])) {
      quantized.thresholds[layout.features[node] & ~kDefaultLeftBit].push_back(layout.thresholds[node]);
    }
  }
  for (auto& values : quantized.thresholds) {
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
  }
  for (std::size_t node = 0; node < layout.thresholds.size(); ++node) {
    std::uint32_t feature = layout.features[node] & ~kDefaultLeftBit;
    bool left = (layout.features[node] & kDefaultLeftBit) != 0;
    std::uint32_t default_left = left ? kQuantizedDefaultLeftBit : 0U;
    if (std::isnan(layout.thresholds[node])) {
      quantized.nodes.push_back(feature | (left ? default_left | (std::uint32_t{kMissingBin} << 16) : 0U));
      continue;
    }
    const auto& values = quantized.thresholds[feature];
    auto split = static_cast<std::uint32_t>(std::lower_bound(values.begin(), values.end(), layout.thresholds[node]) -
                                            values.begin() + 1);
    quantized.nodes.push_back(feature | default_left | (split << 16));
  }
  return quantized;
}

// Every quantized variant this CPU runs gives the float reference's margins on the same rows, bit
// for bit: the bins keep every comparison, missing values and infinities included.
TEST(QuantizedTreeKernels, EveryVariantMatchesTheFloatReferenceBitForBit) {
  auto variants = quantized_tree_kernel_variants();
  ASSERT_EQ(variants[0].name, "scalar");
  std::mt19937 random(5);
  for (const Shape& shape : shapes()) {
    Layout layout = random_layout(shape.depths, shape.width, shape.group_count, shape.reversed, random);
    QuantizedLayout quantized = quantize(layout, shape.width);
    for (std::size_t row_count : kRowCounts) {
      SCOPED_TRACE(shape.name + ", " + std::to_string(row_count) + " rows");
      std::vector<float> rows = random_rows(row_count, shape.width, random);
      std::vector<std::uint16_t> bins = quantized.bins_of(rows, shape.width);
      std::vector<float> initial(row_count * shape.group_count);
      for (float& margin : initial) margin = spread_value(random);
      std::vector<float> expected =
          run(tree_kernel_reference(), layout, rows, row_count, shape.width, initial, shape.group_count);
      for (const QuantizedTreeKernelVariant& variant : variants) {
        if (!variant.supported()) continue;
        std::vector<float> margins = initial;
        margins.resize(initial.size() + kGuardMargins, kGuardValue);
        variant.add_leaves(quantized.view(), bins, row_count, shape.width, std::span(margins).first(initial.size()),
                           shape.group_count);
        ASSERT_EQ(first_difference(expected, margins, shape.group_count), "") << variant.name;
      }
    }
  }
  EXPECT_TRUE(quantized_tree_kernel().supported());
}

// With bfloat16 leaves every variant gives what the float reference gives when its leaves are the
// same values rounded to bfloat16, bit for bit.
TEST(QuantizedTreeKernels, Bfloat16LeavesMatchTheReferenceOnRoundedLeaves) {
  EXPECT_EQ(QuantizedTreesView::float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(QuantizedTreesView::bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(QuantizedTreesView::float_to_bf16(1.00390625f), 0x3F80);  // a tie rounds to even
  EXPECT_EQ(QuantizedTreesView::float_to_bf16(1.01171875f), 0x3F82);  // ... up to even
  EXPECT_TRUE(std::isnan(QuantizedTreesView::bf16_to_float(QuantizedTreesView::float_to_bf16(std::nanf("")))));
  std::mt19937 random(9);
  for (const Shape& shape : shapes()) {
    Layout layout = random_layout(shape.depths, shape.width, shape.group_count, shape.reversed, random);
    QuantizedLayout quantized = quantize(layout, shape.width);
    std::vector<std::uint16_t> bf16(layout.leaves.size() + 1, 0);
    for (std::size_t leaf = 0; leaf < layout.leaves.size(); ++leaf) {
      bf16[leaf] = QuantizedTreesView::float_to_bf16(layout.leaves[leaf]);
      layout.leaves[leaf] = QuantizedTreesView::bf16_to_float(bf16[leaf]);
    }
    QuantizedTreesView view{quantized.trees, quantized.nodes, {}, bf16};
    for (std::size_t row_count : kRowCounts) {
      SCOPED_TRACE(shape.name + ", " + std::to_string(row_count) + " rows");
      std::vector<float> rows = random_rows(row_count, shape.width, random);
      std::vector<std::uint16_t> bins = quantized.bins_of(rows, shape.width);
      std::vector<float> initial(row_count * shape.group_count);
      for (float& margin : initial) margin = spread_value(random);
      std::vector<float> expected =
          run(tree_kernel_reference(), layout, rows, row_count, shape.width, initial, shape.group_count);
      for (const QuantizedTreeKernelVariant& variant : quantized_tree_kernel_variants()) {
        if (!variant.supported()) continue;
        std::vector<float> margins = initial;
        margins.resize(initial.size() + kGuardMargins, kGuardValue);
        variant.add_leaves(view, bins, row_count, shape.width, std::span(margins).first(initial.size()),
                           shape.group_count);
        ASSERT_EQ(first_difference(expected, margins, shape.group_count), "") << variant.name;
      }
    }
  }
}

}  // namespace
}  // namespace slipway::kernels
