#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "slipway/data.h"
#include "support/test_support.h"

namespace slipway::data {
namespace {

Table lending() { return *read_csv(testing::data_path("lending_club.csv")); }

std::size_t count_label(const Table& table, const std::vector<std::uint32_t>& rows, const std::string& label) {
  const Column& target = *table.find("Class");
  return static_cast<std::size_t>(
      std::count_if(rows.begin(), rows.end(), [&](auto row) { return target.text_at(row) == label; }));
}

TEST(Split, ParsesKinds) {
  EXPECT_EQ(parse_split_kind("random")->kind, SplitKind::kRandom);
  EXPECT_EQ(parse_split_kind("time:date")->column, "date");
  EXPECT_FALSE(parse_split_kind("time").ok());
  EXPECT_FALSE(parse_split_kind("random:x").ok());
  EXPECT_FALSE(parse_split_kind("sideways").ok());
}

TEST(Split, RandomIsDeterministicAndComplete) {
  Table table = lending();
  SplitSpec spec;
  spec.seed = 7;
  auto first = split_rows(table, spec, "Class");
  auto second = split_rows(table, spec, "Class");
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->test_rows, second->test_rows);
  EXPECT_EQ(first->test_rows.size(), 1971u);
  EXPECT_EQ(first->train_rows.size() + first->test_rows.size(), table.row_count());
  spec.seed = 8;
  EXPECT_NE(split_rows(table, spec, "Class")->test_rows, first->test_rows);
}

TEST(Split, StratifiedKeepsClassProportions) {
  Table table = lending();
  SplitSpec spec;
  spec.kind = SplitKind::kStratified;
  auto split = split_rows(table, spec, "Class");
  ASSERT_TRUE(split.ok());
  std::size_t bad_total = count_label(table, split->train_rows, "bad") + count_label(table, split->test_rows, "bad");
  EXPECT_EQ(count_label(table, split->test_rows, "bad"), static_cast<std::size_t>(std::llround(0.2 * bad_total)));
}

TEST(Split, TimeSplitPutsTestStrictlyLater) {
  Table table = *read_csv(testing::data_path("chicago_ridership.csv"));
  SplitSpec spec = *parse_split_kind("time:date");
  auto split = split_rows(table, spec, "ridership");
  ASSERT_TRUE(split.ok());
  const Column& date = *table.find("date");
  std::string latest_train;
  for (auto row : split->train_rows) latest_train = std::max(latest_train, date.text_at(row));
  for (auto row : split->test_rows) EXPECT_GT(date.text_at(row), latest_train);
  EXPECT_EQ(check_leakage(table, *split, spec).test_rows_not_later, 0u);
}

TEST(Split, TimeSplitNeverCutsThroughTies) {
  auto table = parse_csv("t,y\n1,0\n2,1\n2,0\n2,1\n3,0\n", "t.csv");
  SplitSpec spec = *parse_split_kind("time:t");
  spec.test_fraction = 0.5;
  auto split = split_rows(*table, spec, "y");
  ASSERT_TRUE(split.ok());
  EXPECT_EQ(split->train_rows, (std::vector<std::uint32_t>{0}));
}

TEST(Split, GroupSplitKeepsGroupsWhole) {
  Table table = lending();
  SplitSpec spec = *parse_split_kind("group:addr_state");
  auto split = split_rows(table, spec, "Class");
  ASSERT_TRUE(split.ok());
  const Column& state = *table.find("addr_state");
  std::set<std::string> train_states;
  for (auto row : split->train_rows) train_states.insert(state.text_at(row));
  for (auto row : split->test_rows) EXPECT_EQ(train_states.count(state.text_at(row)), 0u);
  EXPECT_EQ(check_leakage(table, *split, spec).groups_on_both_sides, 0u);
  EXPECT_GT(split->test_rows.size(), 0u);
}

TEST(Leakage, CountsExactDuplicatesAcrossTheSplit) {
  auto table = parse_csv("a,b\n1,x\n1,x\n2,y\n3,z\n", "t.csv");
  Split split{{0, 2}, {1, 3}};
  EXPECT_EQ(check_leakage(*table, split, SplitSpec{}).duplicate_test_rows, 1u);
}

TEST(Split, RejectsBadFractionsAndTinyTables) {
  Table table = lending();
  SplitSpec spec;
  spec.test_fraction = 1.0;
  EXPECT_FALSE(split_rows(table, spec, "Class").ok());
  auto one_row = parse_csv("a\n1\n", "t.csv");
  EXPECT_FALSE(split_rows(*one_row, SplitSpec{}, "a").ok());
}

}  // namespace
}  // namespace slipway::data
