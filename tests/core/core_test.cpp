#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <filesystem>

#include "slipway/core.h"
#include "support/test_support.h"

namespace slipway {
namespace {

Result<int> half(int value) {
  if (value % 2 != 0) return invalid_argument("odd");
  return value / 2;
}

Result<int> quarter(int value) {
  SLIPWAY_ASSIGN_OR_RETURN(int halved, half(value));
  return half(halved);
}

TEST(Result, PropagatesErrors) {
  EXPECT_EQ(*quarter(8), 2);
  auto odd = quarter(6);
  ASSERT_FALSE(odd.ok());
  EXPECT_EQ(odd.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(odd.status().message(), "odd");
}

TEST(Sha256, MatchesKnownVectors) {
  EXPECT_EQ(sha256_hex(std::string_view("abc")), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(std::string_view("")), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, FileMatchesMemory) {
  testing::TempDir dir;
  std::string text(3 << 20, 'x');
  testing::write_text(dir.file("big"), text);
  EXPECT_EQ(*sha256_file(dir.file("big")), sha256_hex(std::string_view(text)));
  EXPECT_EQ(sha256_file(dir.file("missing")).status().code(), StatusCode::kIo);
}

TEST(JsonWriter, EscapesAndNests) {
  JsonWriter json;
  json.begin_object().key("a\"b").value("line\nbreak\x01").key("n").value(std::nan(""));
  json.key("list").begin_array().value(1).value(2.5).value(true).null().end_array().end_object();
  EXPECT_EQ(json.str(), R"({"a\"b":"line\nbreak\u0001","n":null,"list":[1,2.5,true,null]})");
}

TEST(Files, WriteAtomicReplacesWholeFileAndLeavesNoTemp) {
  testing::TempDir dir;
  ASSERT_TRUE(write_file_atomic(dir.file("out"), std::string_view("first")).ok());
  ASSERT_TRUE(write_file_atomic(dir.file("out"), std::string_view("second")).ok());
  EXPECT_EQ(*read_file(dir.file("out")), "second");
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 1);
  EXPECT_FALSE(write_file_atomic(dir.file("no/such/folder/out"), std::string_view("x")).ok());
}

TEST(Files, MappedFileReadsBytes) {
  testing::TempDir dir;
  testing::write_text(dir.file("f"), "hello");
  auto mapped = MappedFile::open(dir.file("f"));
  ASSERT_TRUE(mapped.ok());
  EXPECT_EQ(mapped->text(), "hello");
  testing::write_text(dir.file("empty"), "");
  EXPECT_EQ(MappedFile::open(dir.file("empty"))->size(), 0u);
  EXPECT_FALSE(MappedFile::open(dir.path()).ok());
}

TEST(Parallel, RunsEveryIndexOnce) {
  std::vector<std::atomic<int>> hits(1000);
  parallel_for(hits.size(), 4, [&](std::size_t index) { hits[index].fetch_add(1); });
  for (const auto& hit : hits) EXPECT_EQ(hit.load(), 1);
  parallel_for(0, 4, [&](std::size_t) { FAIL(); });
}

TEST(RandomHex, HasRequestedLengthAndVaries) {
  auto first = random_hex(16);
  EXPECT_EQ(first.size(), 32u);
  EXPECT_NE(first, random_hex(16));
}

}  // namespace
}  // namespace slipway
