#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <thread>

#include "slipway/data.h"
#include "support/test_support.h"

namespace slipway::data {
namespace {

TEST(CsvReader, InfersTypesAndMissingValues) {
  auto table = parse_csv("a,b,c\n1,x,\n2.5,\"y, z\",NA\nNA,x,3\n", "t.csv");
  ASSERT_TRUE(table.ok()) << table.status().message();
  ASSERT_EQ(table->row_count(), 3u);
  const Column& a = table->column(0);
  EXPECT_EQ(a.type, ColumnType::kNumeric);
  EXPECT_FLOAT_EQ(a.numbers[1], 2.5f);
  EXPECT_TRUE(std::isnan(a.numbers[2]));
  const Column& b = table->column(1);
  EXPECT_EQ(b.type, ColumnType::kCategorical);
  EXPECT_EQ(b.text_at(1), "y, z");
  EXPECT_EQ(b.dictionary.size(), 2u);
  const Column& c = table->column(2);
  EXPECT_EQ(c.type, ColumnType::kNumeric);
  EXPECT_TRUE(c.is_missing(0));
  EXPECT_TRUE(c.is_missing(1));
  EXPECT_FLOAT_EQ(c.numbers[2], 3.0f);
}

TEST(CsvReader, HandlesEscapedQuotesEmbeddedNewlinesAndCrlf) {
  auto table = parse_csv("name,n\r\n\"say \"\"hi\"\"\",1\r\n\"two\nlines\",2\r\n\r\n", "t.csv");
  ASSERT_TRUE(table.ok()) << table.status().message();
  ASSERT_EQ(table->row_count(), 2u);
  EXPECT_EQ(table->column(0).text_at(0), "say \"hi\"");
  EXPECT_EQ(table->column(0).text_at(1), "two\nlines");
  EXPECT_FLOAT_EQ(table->column(1).numbers[1], 2.0f);
}

TEST(CsvReader, NamesLineAndColumnOfMalformedRows) {
  auto wrong_count = parse_csv("a,b\n1,2\n3\n", "bad.csv");
  ASSERT_FALSE(wrong_count.ok());
  EXPECT_EQ(wrong_count.status().message(), "bad.csv:3: expected 2 fields as in the header, found 1");

  auto unterminated = parse_csv("a,b\n1,2\n3,\"open\n", "bad.csv");
  ASSERT_FALSE(unterminated.ok());
  EXPECT_EQ(unterminated.status().message(), "bad.csv:3:3: unterminated quoted field (the quote opens here)");

  auto stray = parse_csv("a,b\n1,2\n3,ab\"c\n", "bad.csv");
  ASSERT_FALSE(stray.ok());
  EXPECT_EQ(stray.status().message(), "bad.csv:3:5: quote inside an unquoted field");

  auto after_quote = parse_csv("a,b\n\"x\"y,2\n", "bad.csv");
  ASSERT_FALSE(after_quote.ok());
  EXPECT_NE(after_quote.status().message().find("bad.csv:2:4:"), std::string::npos);

  EXPECT_FALSE(parse_csv("", "empty.csv").ok());
  EXPECT_FALSE(parse_csv("a,a\n1,2\n", "dup.csv").ok());
}

TEST(CsvReader, ParallelChunksMatchSingleThread) {
  // Over 1 MiB so the file is parsed in several chunks, with quoted newlines across the text.
  std::string text = "id,label,value\n";
  for (int row = 0; row < 60000; ++row) {
    text += std::to_string(row) + ",\"cat " + std::to_string(row % 7) + (row % 11 == 0 ? "\nnext" : "") + "\"," +
            std::to_string(row * 0.5) + "\n";
  }
  CsvOptions one_thread;
  one_thread.thread_count = 1;
  CsvOptions four_threads;
  four_threads.thread_count = 4;
  auto serial = parse_csv(text, "big.csv", one_thread);
  auto parallel = parse_csv(text, "big.csv", four_threads);
  ASSERT_TRUE(serial.ok() && parallel.ok());
  EXPECT_EQ(serial->row_count(), 60000u);
  EXPECT_EQ(fingerprint(*serial), fingerprint(*parallel));
  EXPECT_EQ(parallel->column(1).text_at(11), "cat 4\nnext");

  // An error deep in a later chunk still names the right physical line (quoted newlines count).
  std::string broken = text + "1,2\n";
  auto error = parse_csv(broken, "big.csv", four_threads);
  ASSERT_FALSE(error.ok());
  std::size_t lines = 1 + 60000 + 60000 / 11 + 1;
  EXPECT_EQ(error.status().message(),
            "big.csv:" + std::to_string(lines + 1) + ": expected 3 fields as in the header, found 2");
}

TEST(CsvReader, ReadsTheLendingClubFile) {
  auto table = read_csv(testing::data_path("lending_club.csv"));
  ASSERT_TRUE(table.ok()) << table.status().message();
  EXPECT_EQ(table->row_count(), 9857u);
  EXPECT_EQ(table->column_count(), 23u);
  EXPECT_EQ(table->find("Class")->type, ColumnType::kCategorical);
  EXPECT_EQ(table->find("funded_amnt")->type, ColumnType::kNumeric);
  EXPECT_EQ(table->find("addr_state")->dictionary.size(), 50u);
  EXPECT_EQ(read_csv("/no/such/file.csv").status().code(), StatusCode::kIo);
}

// Regression: infinities reached the trainer and evaluation (and hung the AUC).
TEST(CsvReader, RefusesInfiniteNumbersNamingColumnAndLine) {
  auto inf = parse_csv("a,b\n1,2\n3,inf\n", "t.csv");
  ASSERT_FALSE(inf.ok());
  EXPECT_EQ(inf.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(inf.status().message().find("t.csv:3"), std::string::npos) << inf.status().message();
  EXPECT_NE(inf.status().message().find("column 'b'"), std::string::npos) << inf.status().message();
  // Finite as a double, infinite as the float32 Slipway stores.
  auto huge = parse_csv("a,b\n1e300,2\n", "t.csv");
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("'1e300'"), std::string::npos) << huge.status().message();
  EXPECT_FALSE(parse_csv("a\n-Infinity\n", "t.csv").ok());
  // In a text column "inf" is just a category.
  auto text = parse_csv("a\nx\ninf\n", "t.csv");
  ASSERT_TRUE(text.ok()) << text.status().message();
  EXPECT_EQ(text->column(0).type, ColumnType::kCategorical);
  // "nan" is a missing value.
  auto nan = parse_csv("a\n1\nnan\n", "t.csv");
  ASSERT_TRUE(nan.ok());
  EXPECT_TRUE(nan->column(0).is_missing(1));
}

// Regression: a Latin-1 category trained a bundle whose manifest no command could load.
TEST(CsvReader, RefusesBytesThatAreNotUtf8) {
  auto latin1 = parse_csv("city,n\nZ\xfcrich,1\n", "latin1.csv");
  ASSERT_FALSE(latin1.ok());
  EXPECT_NE(latin1.status().message().find("latin1.csv:2:2: the file is not UTF-8"), std::string::npos)
      << latin1.status().message();
  EXPECT_FALSE(parse_csv("na\xffme\n1\n", "t.csv").ok());
  auto utf8 = parse_csv("city,n\nZ\xc3\xbcrich,1\n\xe6\x9d\xb1\xe4\xba\xac,2\n", "utf8.csv");
  ASSERT_TRUE(utf8.ok()) << utf8.status().message();
  EXPECT_EQ(utf8->column(0).text_at(0), "Z\xc3\xbcrich");
}

TEST(CsvReader, RefusesCrOnlyLineEndings) {
  auto table = parse_csv("a,b\r1,2\r3,4\r", "mac.csv");
  ASSERT_FALSE(table.ok());
  EXPECT_NE(table.status().message().find("CR-only"), std::string::npos) << table.status().message();
  EXPECT_TRUE(parse_csv("a,b\r\n1,2\r\n", "dos.csv").ok());
}

// Regression: the reader mapped the file, and a file truncated meanwhile killed the process with
// SIGBUS. Now a changing file is an error or a consistent read, never a crash.
TEST(CsvReader, SurvivesAFileTruncatedWhileBeingRead) {
  testing::TempDir dir;
  std::string path = dir.file("moving.csv");
  std::string content = "a,b\n";
  for (int row = 0; row < 200'000; ++row) content += std::to_string(row) + "," + std::to_string(row * 3) + "\n";
  testing::write_text(path, content);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    while (!done.load()) {
      std::filesystem::resize_file(path, 64);
      std::filesystem::resize_file(path, content.size());
    }
  });
  // Every read ends, with a table or an error naming the file (never SIGBUS, as a mapped file gave).
  for (int attempt = 0; attempt < 50; ++attempt) {
    auto table = read_csv(path, CsvOptions{.thread_count = 2});
    if (!table.ok()) {
      EXPECT_NE(table.status().message().find("moving.csv"), std::string::npos);
    }
  }
  done = true;
  writer.join();
  // Whether a read overlaps a resize above is up to the scheduler; a file that holds more than its
  // size said when it was opened (as /proc's do: size 0) shows the same check every time.
  auto grown = read_file("/proc/self/status");
  ASSERT_FALSE(grown.ok());
  EXPECT_NE(grown.status().message().find("changed size while it was being read"), std::string::npos)
      << grown.status().message();
}

TEST(ReadFile, ReadsPipesToTheirEnd) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::string sent(200'000, 'x');
  std::thread writer([&] {
    std::size_t written = 0;
    while (written < sent.size())
      written += static_cast<std::size_t>(::write(fds[1], sent.data() + written, sent.size() - written));
    ::close(fds[1]);
  });
  auto read = read_file("/proc/self/fd/" + std::to_string(fds[0]));
  writer.join();
  ::close(fds[0]);
  ASSERT_TRUE(read.ok()) << read.status().message();
  EXPECT_EQ(read->size(), sent.size());
}

TEST(Table, ColumnIndexListsKnownColumns) {
  auto table = parse_csv("a,b\n1,2\n", "t.csv");
  auto missing = table->column_index("c");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "no column named 'c'; the columns are: a, b");
}

}  // namespace
}  // namespace slipway::data
