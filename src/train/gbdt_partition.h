// The row order of a growing tree: every node owns a contiguous range of it, and splitting a
// node reorders its range stably, left child's rows first. Private to train.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "train/gbdt_split.h"

namespace slipway::train {

class RowPartition {
 public:
  // Starts a tree: the rows it sees, ascending (the root's range is [0, rows.size())). Keeps its
  // buffers, so a tree after the first allocates nothing.
  template <typename KeepRow>
  void reset(std::size_t row_count, const KeepRow& keep_row) {
    order_.clear();
    for (std::uint32_t row = 0; row < row_count; ++row) {
      if (keep_row(row)) order_.push_back(row);
    }
    scratch_.resize(order_.size());
  }

  std::size_t size() const { return order_.size(); }
  std::span<const std::uint32_t> rows() const { return order_; }
  std::span<const std::uint32_t> rows(std::size_t begin, std::size_t end) const {
    return {order_.data() + begin, end - begin};
  }

  // Reorders [begin, end) stably so the rows `split` sends left (by their codes in `column`,
  // the split feature's column-major bins) come first, and returns where the right ones begin.
  // Ranges of more than one kRowsPerHistogramBlock run on up to `threads` threads; the order is
  // the same at any count. Touches only [begin, end), so disjoint ranges may be split
  // concurrently.
  std::size_t split(std::size_t begin, std::size_t end, const Split& split, const std::uint8_t* column, int threads);

 private:
  std::vector<std::uint32_t> order_;
  std::vector<std::uint32_t> scratch_;
};

}  // namespace slipway::train
