// Stable partition of a node's rows. Small ranges: one branch-free pass writes each row to both
// outputs and advances one cursor. Large ranges are cut into fixed blocks: each block counts its
// left rows, a prefix sum gives every block its two output positions, and the blocks scatter in
// parallel.
#include "train/gbdt_partition.h"

#include <algorithm>
#include <utility>

#include "slipway/core.h"
#include "train/gbdt_histogram.h"

namespace slipway::train {

std::size_t RowPartition::split(std::size_t begin, std::size_t end, const Split& split, const std::uint8_t* column,
                                int threads) {
  const std::size_t rows = end - begin;
  std::size_t blocks = (rows + kRowsPerHistogramBlock - 1) / kRowsPerHistogramBlock;
  if (threads <= 1 || blocks <= 1) {
    // Branch-free: each row is written to both outputs and only one cursor advances.
    std::size_t kept = begin;
    std::size_t moved = begin;
    for (std::size_t index = begin; index < end; ++index) {
      std::uint32_t row = order_[index];
      bool go_left = split.goes_left(column[row]);
      order_[kept] = row;
      scratch_[moved] = row;
      kept += go_left ? 1 : 0;
      moved += go_left ? 0 : 1;
    }
    std::copy(scratch_.begin() + static_cast<std::ptrdiff_t>(begin),
              scratch_.begin() + static_cast<std::ptrdiff_t>(moved),
              order_.begin() + static_cast<std::ptrdiff_t>(kept));
    return kept;
  }
  auto block_range = [&](std::size_t block) {
    std::size_t block_begin = begin + block * kRowsPerHistogramBlock;
    return std::pair(block_begin, std::min(end, block_begin + kRowsPerHistogramBlock));
  };
  std::vector<std::size_t> left_counts(blocks, 0);
  parallel_for(blocks, threads, [&](std::size_t block) {
    auto [block_begin, block_end] = block_range(block);
    std::size_t count = 0;
    for (std::size_t index = block_begin; index < block_end; ++index) {
      count += split.goes_left(column[order_[index]]) ? 1 : 0;
    }
    left_counts[block] = count;
  });
  std::size_t total_left = 0;
  for (std::size_t count : left_counts) total_left += count;
  std::vector<std::size_t> left_at(blocks);
  std::vector<std::size_t> right_at(blocks);
  std::size_t next_left = begin;
  std::size_t next_right = begin + total_left;
  for (std::size_t block = 0; block < blocks; ++block) {
    auto [block_begin, block_end] = block_range(block);
    left_at[block] = next_left;
    right_at[block] = next_right;
    next_left += left_counts[block];
    next_right += (block_end - block_begin) - left_counts[block];
  }
  parallel_for(blocks, threads, [&](std::size_t block) {
    auto [block_begin, block_end] = block_range(block);
    std::size_t left_position = left_at[block];
    std::size_t right_position = right_at[block];
    for (std::size_t index = block_begin; index < block_end; ++index) {
      std::uint32_t row = order_[index];
      if (split.goes_left(column[row])) {
        scratch_[left_position++] = row;
      } else {
        scratch_[right_position++] = row;
      }
    }
  });
  parallel_for(blocks, threads, [&](std::size_t block) {
    auto [block_begin, block_end] = block_range(block);
    std::copy(scratch_.begin() + static_cast<std::ptrdiff_t>(block_begin),
              scratch_.begin() + static_cast<std::ptrdiff_t>(block_end),
              order_.begin() + static_cast<std::ptrdiff_t>(block_begin));
  });
  return begin + total_left;
}

}  // namespace slipway::train
