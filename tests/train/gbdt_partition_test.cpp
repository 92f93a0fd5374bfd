// GBDT row partitioning alone: stable, left child's rows first, the same in parallel blocks as
// in one pass, and confined to the range it is given.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "train/gbdt_partition.h"

namespace slipway::train {
namespace {

TEST(GbdtPartition, SplitsARangeStablyLeftRowsFirst) {
  // Codes of one feature for 60,000 rows (several partition blocks), some missing.
  const std::size_t rows = 60'000;
  std::mt19937_64 random(17);
  std::vector<std::uint8_t> column(rows);
  for (auto& code : column) code = random() % 11 == 0 ? kMissingBin : static_cast<std::uint8_t>(random() % 20);
  Split split;
  split.valid = true;
  split.bin = 7;
  split.default_left = true;

  for (int threads : {1, 2, 3}) {
    RowPartition partition;
    partition.reset(rows, [](std::uint32_t row) { return row % 5 != 0; });  // a subsample
    std::vector<std::uint32_t> before(partition.rows().begin(), partition.rows().end());
    // Split a middle range only; the rows outside it must not move.
    const std::size_t begin = 1000;
    const std::size_t end = partition.size() - 1000;
    std::size_t kept = partition.split(begin, end, split, column.data(), threads);

    std::vector<std::uint32_t> expected(before.begin(), before.begin() + static_cast<std::ptrdiff_t>(begin));
    for (std::size_t index = begin; index < end; ++index) {
      if (split.goes_left(column[before[index]])) expected.push_back(before[index]);
    }
    ASSERT_EQ(kept, expected.size());
    for (std::size_t index = begin; index < end; ++index) {
      if (!split.goes_left(column[before[index]])) expected.push_back(before[index]);
    }
    expected.insert(expected.end(), before.begin() + static_cast<std::ptrdiff_t>(end), before.end());
    std::vector<std::uint32_t> after(partition.rows().begin(), partition.rows().end());
    EXPECT_EQ(after, expected) << threads << " threads";
  }
}

TEST(GbdtPartition, CategoricalSplitsSendTheirSetRight) {
  std::vector<std::uint8_t> column = {0, 3, 5, kMissingBin, 3, 9};
  Split split;
  split.valid = true;
  split.categorical = true;
  split.right_categories[0] = (1u << 3) | (1u << 9);
  split.default_left = true;  // the missing row (3) goes left with codes 0 and 5
  RowPartition partition;
  partition.reset(column.size(), [](std::uint32_t) { return true; });
  std::size_t kept = partition.split(0, column.size(), split, column.data(), 1);
  EXPECT_EQ(kept, 3u);
  std::vector<std::uint32_t> after(partition.rows().begin(), partition.rows().end());
  EXPECT_EQ(after, (std::vector<std::uint32_t>{0, 2, 3, 1, 4, 5}));
}

}  // namespace
}  // namespace slipway::train
