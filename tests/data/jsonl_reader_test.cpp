// The tolerant readers batch scoring uses: bad rows are reported with their row and line, the
// rest kept with the row number each came from.
#include <gtest/gtest.h>

#include <cmath>

#include "slipway/data.h"
#include "support/test_support.h"

namespace slipway::data {
namespace {

TEST(JsonlReader, ReadsObjectsAndReportsBadLines) {
  testing::TempDir dir;
  std::string path = dir.file("rows.jsonl");
  testing::write_text(path,
                      "{\"a\": 1.5, \"b\": \"x\", \"c\": true}\n"
                      "\n"
                      "{\"b\": \"y\", \"a\": null}\r\n"
                      "[1, 2]\n"
                      "{\"a\": 2, \"b\": {\"nested\": 1}}\n"
                      "{\"a\": 3, \"a\": 4}\n"
                      "{\"a\": 1e300, \"b\": 7, \"d\": \"new\"}\n"
                      "not json\n");
  auto read = read_jsonl_rows(path);
  ASSERT_TRUE(read.ok()) << read.status().message();
  const Table& table = read->table;
  ASSERT_EQ(table.row_count(), 3u);
  EXPECT_EQ(read->source_rows, (std::vector<std::size_t>{1, 2, 6}));
  const Column* a = table.find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->type, ColumnType::kNumeric);
  EXPECT_FLOAT_EQ(a->numbers[0], 1.5f);
  EXPECT_TRUE(std::isnan(a->numbers[1]));
  EXPECT_TRUE(std::isinf(a->numbers[2]));  // beyond float: kept, for the caller to judge
  const Column* b = table.find("b");
  EXPECT_EQ(b->type, ColumnType::kCategorical);
  EXPECT_EQ(b->text_at(2), "7");  // a number in a text column, kept as written
  EXPECT_FLOAT_EQ(table.find("c")->numbers[0], 1.0f);
  EXPECT_TRUE(table.find("c")->is_missing(1));
  EXPECT_TRUE(table.find("d")->is_missing(0));
  EXPECT_EQ(table.find("d")->text_at(2), "new");
  ASSERT_EQ(read->bad_rows.size(), 4u);
  EXPECT_EQ(read->bad_rows[0].row, 3u);
  EXPECT_EQ(read->bad_rows[0].line, 4u);
  EXPECT_EQ(read->bad_rows[0].reason, "the line is not a JSON object");
  EXPECT_NE(read->bad_rows[1].reason.find("'b' holds an array or object"), std::string::npos);
  EXPECT_NE(read->bad_rows[2].reason.find("'a' appears twice"), std::string::npos);
  EXPECT_EQ(read->bad_rows[3].row, 7u);
  EXPECT_NE(read->bad_rows[3].reason.find("not valid JSON"), std::string::npos);
  EXPECT_FALSE(read_jsonl_rows(dir.file("missing.jsonl")).ok());
  testing::write_text(path, "{\"a\": \"\xff\"}\n");
  EXPECT_NE(read_jsonl_rows(path).status().message().find("not UTF-8"), std::string::npos);
}

// An id read as text keeps the number as the line wrote it, as a CSV file's does: 1.0 is "1.0",
// not "1" (which another row's id may be), whatever a string before it holds.
TEST(JsonlReader, NumbersInATextColumnKeepTheirWrittenForm) {
  testing::TempDir dir;
  std::string path = dir.file("ids.jsonl");
  testing::write_text(path,
                      "{\"id\": 1.0}\n"
                      "{\"id\":2.50 , \"x\": 1}\n"
                      "{\"id\": 12345678901234567890}\n"
                      "{\"id\": -1e3}\n"
                      "{\"note\": \"\\\"id\\\": 9.0\", \"id\": 3.0}\n"
                      "{\"a\\\"id\": 7.00, \"id\": 7.0}\n"
                      "{\"id\": 1}\n");
  auto read = read_jsonl_rows(path, {"id"});
  ASSERT_TRUE(read.ok()) << read.status().message();
  const Column* id = read->table.find("id");
  ASSERT_NE(id, nullptr);
  ASSERT_EQ(read->table.row_count(), 7u);
  EXPECT_EQ(id->text_at(0), "1.0");
  EXPECT_EQ(id->text_at(1), "2.50");
  EXPECT_EQ(id->text_at(2), "12345678901234567890");
  EXPECT_EQ(id->text_at(3), "-1e3");
  EXPECT_EQ(id->text_at(4), "3.0");
  EXPECT_EQ(id->text_at(5), "7.0");  // not the 7.00 of the key a"id
  EXPECT_EQ(id->text_at(6), "1");
}

TEST(CsvReader, ATolerantReadLeavesOutRowsWithTheWrongFieldCount) {
  testing::TempDir dir;
  std::string path = dir.file("rows.csv");
  testing::write_text(path, "a,b\n1,x\n2\n3,\"multi\nline\"\ninf,y\n4,z,extra\n5,w\n");
  auto read = read_csv_rows(path, CsvOptions{.thread_count = 1});
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->table.row_count(), 4u);
  EXPECT_EQ(read->source_rows, (std::vector<std::size_t>{1, 3, 4, 6}));
  ASSERT_EQ(read->bad_rows.size(), 2u);
  EXPECT_EQ(read->bad_rows[0].row, 2u);
  EXPECT_EQ(read->bad_rows[0].line, 3u);
  EXPECT_EQ(read->bad_rows[1].row, 5u);
  EXPECT_EQ(read->bad_rows[1].line, 7u);  // the quoted newline counts
  EXPECT_NE(read->bad_rows[1].reason.find("expected 2 fields as in the header, found 3"), std::string::npos);
  EXPECT_TRUE(std::isinf(read->table.find("a")->numbers[2]));
  // The strict reader still refuses both.
  EXPECT_FALSE(read_csv(path).ok());
}

}  // namespace
}  // namespace slipway::data
