// The request log writes what it is given, one line per record, under the model's folder, drops
// past its queue's budget, and its retention deletes its own old segments and nothing else.
#include "serve/request_log.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/test_support.h"

namespace slipway::serve {
namespace {

namespace fs = std::filesystem;

RequestLog::Record record_of(std::string model, std::string request) {
  RequestLog::Record record;
  record.time_ms = unix_time_ms();
  record.model = std::move(model);
  record.version = "1";
  record.status = 200;
  record.request = std::move(request);
  record.response = R"({"outputs":[]})";
  return record;
}

std::size_t lines_under(const fs::path& folder) {
  std::size_t lines = 0;
  for (const auto& entry : fs::directory_iterator(folder)) {
    std::ifstream file(entry.path());
    for (std::string line; std::getline(file, line);) ++lines;
  }
  return lines;
}

TEST(RequestLog, WritesRecordsAndItsRetentionTouchesNothingElse) {
  testing::TempDir dir;
  fs::create_directories(dir.file("log/other"));
  testing::write_text(dir.file("log/mine.jsonl"), "{}\n");        // not a segment: kept
  testing::write_text(dir.file("log/other/data.jsonl"), "{}\n");  // nor this
  {
    RequestLog log(RequestLogOptions{dir.file("log"), std::size_t{1} << 20, 4096, std::chrono::hours(1), 8192});
    for (int index = 0; index < 200; ++index) {
      ASSERT_TRUE(log.post(record_of("lending", R"({"inputs":[]})")));
    }
    EXPECT_TRUE(log.post(record_of("fraud", R"({"inputs":[1]})")));
  }  // written out on destruction
  EXPECT_EQ(lines_under(dir.file("log/fraud")), 1u);
  // 200 records of ~150 bytes in segments of 512 bytes (8 KiB / 16), the total held near 8 KiB.
  std::size_t kept = lines_under(dir.file("log/lending"));
  EXPECT_GT(kept, 10u);
  EXPECT_LT(kept, 200u);
  EXPECT_TRUE(fs::exists(dir.file("log/mine.jsonl")));
  EXPECT_TRUE(fs::exists(dir.file("log/other/data.jsonl")));
  for (const auto& entry : fs::directory_iterator(dir.file("log/lending"))) {
    EXPECT_EQ(fs::status(entry.path()).permissions() & fs::perms::others_read, fs::perms::none);
  }
}

TEST(RequestLog, PastItsQueueBudgetRecordsAreDroppedAndCounted) {
  testing::TempDir dir;
  RequestLog log(RequestLogOptions{dir.file("log"), 1000, 1 << 20, std::chrono::hours(1), 1 << 30});
  EXPECT_FALSE(log.post(record_of("lending", std::string(2000, ' '))));
  EXPECT_EQ(log.dropped(), 1u);
  RequestLog off(RequestLogOptions{"", 1000, 1 << 20, std::chrono::hours(1), 1 << 30});
  EXPECT_FALSE(off.post(record_of("lending", "{}")));
}

}  // namespace
}  // namespace slipway::serve
