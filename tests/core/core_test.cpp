#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <new>
#include <set>
#include <thread>

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

// A link is written through; directories, FIFOs and empty paths are refused, never replaced.
TEST(Files, WriteAtomicFollowsLinksAndRefusesWhatIsNotAFile) {
  testing::TempDir dir;
  testing::write_text(dir.file("real"), "old");
  std::filesystem::create_symlink(dir.file("real"), dir.file("link"));
  ASSERT_TRUE(write_file_atomic(dir.file("link"), std::string_view("new")).ok());
  EXPECT_TRUE(std::filesystem::is_symlink(dir.file("link")));
  EXPECT_EQ(*read_file(dir.file("real")), "new");
  std::filesystem::create_directory(dir.file("sub"));
  std::filesystem::create_symlink("sub/later", dir.file("dangling"));  // relative, target not there yet
  ASSERT_TRUE(write_file_atomic(dir.file("dangling"), std::string_view("made")).ok());
  EXPECT_TRUE(std::filesystem::is_symlink(dir.file("dangling")));
  EXPECT_EQ(*read_file(dir.file("sub/later")), "made");
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  auto fifo = write_file_atomic(dir.file("fifo"), std::string_view("x"));
  EXPECT_NE(fifo.message().find("is not a regular file"), std::string::npos) << fifo.message();
  EXPECT_FALSE(std::filesystem::is_regular_file(dir.file("fifo")));
  auto directory = write_file_atomic(dir.path(), std::string_view("x"));
  EXPECT_NE(directory.message().find("is a directory"), std::string::npos) << directory.message();
  EXPECT_NE(write_file_atomic(dir.path() + "/", std::string_view("x")).message().find("is a directory"),
            std::string::npos);
  EXPECT_NE(write_file_atomic(dir.file("nothing/"), std::string_view("x")).message().find("ends with '/'"),
            std::string::npos);
  EXPECT_EQ(write_file_atomic("", std::string_view("x")).message(), "the output path is empty");
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

TEST(Memory, HugePageBufferIsZeroedAlignedAndMovable) {
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  HugePageBuffer buffer(3 * kHugePage + 5);
  ASSERT_EQ(buffer.size(), 3 * kHugePage + 5);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffer.data()) % 64, 0u);
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffer.data()) % kHugePage, 0u);  // where huge pages start
#endif
  EXPECT_TRUE(std::all_of(buffer.data(), buffer.data() + buffer.size(), [](std::byte b) { return b == std::byte{0}; }));
  buffer.data()[buffer.size() - 1] = std::byte{7};  // the whole size is writable
  HugePageBuffer moved(std::move(buffer));
  EXPECT_EQ(buffer.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(buffer.size(), 0u);       // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(moved.data()[moved.size() - 1], std::byte{7});
  moved = HugePageBuffer(10);
  EXPECT_EQ(moved.size(), 10u);
  EXPECT_EQ(HugePageBuffer(0).data(), nullptr);
  EXPECT_THROW(HugePageBuffer(std::numeric_limits<std::size_t>::max() - 1), std::bad_alloc);
}

TEST(Parallel, RunsEveryIndexOnce) {
  std::vector<std::atomic<int>> hits(1000);
  parallel_for(hits.size(), 4, [&](std::size_t index) { hits[index].fetch_add(1); });
  for (const auto& hit : hits) EXPECT_EQ(hit.load(), 1);
  parallel_for(0, 4, [&](std::size_t) { FAIL(); });
}

TEST(ThreadTeam, RunsEveryIndexOnceLoopAfterLoop) {
  ThreadTeam team(3);
  EXPECT_EQ(team.size(), 3);
  std::vector<std::atomic<int>> hits(257);
  for (int loop = 0; loop < 2000; ++loop) {
    team.run(hits.size(), [&](std::size_t index) { hits[index].fetch_add(1); });
  }
  for (const auto& hit : hits) EXPECT_EQ(hit.load(), 2000);
  team.run(0, [&](std::size_t) { FAIL(); });
}

TEST(ThreadTeam, WakesThreadsThatFellAsleep) {
  ThreadTeam team(2);
  for (int loop = 0; loop < 3; ++loop) {
    // Past the team's spinning time, so its thread sleeps and must be woken.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::mutex mutex;
    std::condition_variable arrived;
    std::set<std::thread::id> runners;
    // Two tasks, each waiting (at most ten seconds) until the other thread has taken one: only a
    // woken team thread lets them finish at once.
    team.run(2, [&](std::size_t) {
      std::unique_lock lock(mutex);
      runners.insert(std::this_thread::get_id());
      arrived.notify_all();
      arrived.wait_for(lock, std::chrono::seconds(10), [&] { return runners.size() == 2; });
    });
    EXPECT_EQ(runners.size(), 2u) << "loop " << loop;
  }
}

TEST(ThreadTeam, MoreThreadsThanCoresRunEveryTaskOnce) {
  // Eight threads on a machine of few cores: threads preempted mid-claim, or waking after their
  // loop has ended and the next begun, must neither lose a task nor run one twice.
  ThreadTeam team(8);
  std::atomic<std::size_t> total{0};
  for (int loop = 0; loop < 1000; ++loop) team.run(4, [&](std::size_t) { total.fetch_add(1); });
  EXPECT_EQ(total.load(), 4000u);
}

TEST(ThreadTeam, OfOneRunsOnTheCaller) {
  ThreadTeam team(1);
  const auto caller = std::this_thread::get_id();
  team.run(10, [&](std::size_t) { EXPECT_EQ(std::this_thread::get_id(), caller); });
}

TEST(Utf8, AcceptsWellFormedTextAndRefusesWhatUnicodeForbids) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain, \xc3\xa9t\xc3\xa9, \xe4\xb8\xad, \xf0\x9f\x98\x80, \xf4\x8f\xbf\xbf"));
  EXPECT_EQ(utf8_character_length("\xf0\x9f\x98\x80", 0), 4u);
  EXPECT_EQ(utf8_character_length("a\xc3\xa9", 1), 2u);
  for (std::string_view bad : {"\xc0\x80", "\xe0\x80\xaf", "\xf0\x80\x80\xaf",  // overlong forms
                               "\xed\xa0\x80",                                  // a surrogate
                               "\xf4\x90\x80\x80", "\xf5\x80\x80\x80",          // past U+10FFFF
                               "\x80", "\xc3", "\xe4\xb8", "\xc3(", "\xff"}) {
    EXPECT_FALSE(is_valid_utf8(bad)) << ::testing::PrintToString(std::string(bad));
    EXPECT_EQ(utf8_character_length(bad, 0), 0u);
  }
}

TEST(RandomHex, HasRequestedLengthAndVaries) {
  auto first = random_hex(16);
  EXPECT_EQ(first.size(), 32u);
  EXPECT_NE(first, random_hex(16));
}

}  // namespace
}  // namespace slipway

namespace slipway {
namespace {

enum class Shape { kRound, kSquare };

struct Nested {
  int depth = 3;
};

struct Example {
  int count = 4;
  double rate = 0.5;
  bool enabled = false;
  Shape shape = Shape::kRound;
  std::string label = "x";
  std::vector<std::size_t> sizes;
  std::chrono::microseconds delay{250};
  Nested nested;
};

const ConfigSchema<Example>& example_schema() {
  static const ConfigSchema<Example> kSchema(
      "example config",
      {
          config_field({"count", ConfigType::kInt, "", 0, 10, {}, "How many."}, &Example::count),
          config_field({"rate", ConfigType::kNumber, "", 0, 1, {}, "How fast."}, &Example::rate),
          config_field({"enabled", ConfigType::kBool, "", 0, 0, {}, "Whether."}, &Example::enabled),
          config_field({"shape", ConfigType::kChoice, "", 0, 0, {"round", "square"}, "Which."}, &Example::shape),
          config_field({"label", ConfigType::kText, "", 0, 0, {}, "Named."}, &Example::label),
          config_field({"sizes", ConfigType::kIntList, "", 1, 64, {}, "Sizes."}, &Example::sizes),
          config_field({"delay_us", ConfigType::kInt, "", 0, 1'000'000, {}, "Wait."}, &Example::delay),
          config_field({"depth", ConfigType::kInt, "", 1, 8, {}, "Deep."}, &Example::nested, &Nested::depth),
      });
  return kSchema;
}

TEST(ConfigSchema, DefaultsComeFromTheStruct) {
  const auto& schema = example_schema();
  EXPECT_EQ(schema.find("count")->key.default_value, "4");
  EXPECT_EQ(schema.find("rate")->key.default_value, "0.5");
  EXPECT_EQ(schema.find("shape")->key.default_value, "round");
  EXPECT_EQ(schema.find("delay_us")->key.default_value, "250");
  Example defaults = schema.defaults();
  EXPECT_EQ(schema.values(defaults), schema.values(Example{}));
}

TEST(ConfigSchema, AppliesAndRoundTrips) {
  const auto& schema = example_schema();
  Example example;
  ASSERT_TRUE(schema
                  .apply(example, {{"count", "7"},
                                   {"rate", "0.125"},
                                   {"enabled", "on"},
                                   {"shape", "square"},
                                   {"label", "hello world"},
                                   {"sizes", "8, 16,32"},
                                   {"delay_us", "1000"},
                                   {"depth", "5"}})
                  .ok());
  EXPECT_EQ(example.count, 7);
  EXPECT_EQ(example.rate, 0.125);
  EXPECT_TRUE(example.enabled);
  EXPECT_EQ(example.shape, Shape::kSquare);
  EXPECT_EQ(example.label, "hello world");
  EXPECT_EQ(example.sizes, (std::vector<std::size_t>{8, 16, 32}));
  EXPECT_EQ(example.delay, std::chrono::microseconds(1000));
  EXPECT_EQ(example.nested.depth, 5);
  auto values = schema.values(example);
  EXPECT_EQ(values.at("sizes"), "8,16,32");
  EXPECT_EQ(values.at("enabled"), "true");
  Example again;
  ASSERT_TRUE(schema.apply(again, values).ok());
  EXPECT_EQ(schema.values(again), values);
}

TEST(ConfigSchema, UnknownKeySuggestsTheClosest) {
  Example example;
  Status status = example_schema().apply(example, {{"cuont", "1"}});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "unknown example config key 'cuont'; did you mean 'count'? the keys are: count, rate, enabled, shape, "
            "label, sizes, delay_us, depth");
  Status far = example_schema().apply(example, {{"zzzzzzzz", "1"}});
  EXPECT_EQ(far.message().find("did you mean"), std::string::npos) << far.message();
}

TEST(ConfigSchema, RefusesMalformedAndOutOfRangeValuesWithoutChangingAnything) {
  const auto& schema = example_schema();
  Example example;
  Status range = schema.apply(example, {{"count", "11"}, {"rate", "0.25"}});
  EXPECT_EQ(range.message(), "example config 'count' must be an integer from 0 to 10, not '11'");
  EXPECT_EQ(example.rate, 0.5);  // all or nothing
  EXPECT_EQ(schema.apply(example, {{"rate", "fast"}}).message(),
            "example config 'rate' must be a number from 0 to 1, not 'fast'");
  EXPECT_EQ(schema.apply(example, {{"enabled", "maybe"}}).message(),
            "example config 'enabled' must be true or false, not 'maybe'");
  EXPECT_EQ(schema.apply(example, {{"shape", "oval"}}).message(),
            "example config 'shape' must be one of round, square, not 'oval'");
  EXPECT_EQ(schema.apply(example, {{"sizes", "8,0"}}).message(),
            "example config 'sizes' must be a comma-separated list of integers from 1 to 64, not '8,0'");
  EXPECT_FALSE(schema.apply(example, {{"count", "3.5"}}).ok());
  EXPECT_FALSE(schema.apply(example, {{"rate", "nan"}}).ok());
}

TEST(ConfigSchema, MarkdownTableHasOneRowPerKey) {
  std::string table = example_schema().markdown_table();
  EXPECT_EQ(table.rfind("| key | type | default | allowed | description |\n|---|---|---|---|---|\n", 0), 0u);
  EXPECT_NE(table.find("| `count` | integer | `4` | 0 to 10 | How many. |\n"), std::string::npos) << table;
  EXPECT_NE(table.find("| `shape` | choice | `round` | round, square | Which. |\n"), std::string::npos);
  EXPECT_NE(table.find("| `sizes` | integer list | (none) | integers from 1 to 64, comma-separated | Sizes. |\n"),
            std::string::npos);
}

}  // namespace
}  // namespace slipway
