// GGUF: every metadata value type and tensor type written, read back equal; the tensor data in
// place and aligned; and each way a file can be wrong refused with a message that says how.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "slipway/llm.h"
#include "support/test_support.h"

namespace slipway::llm {
namespace {

std::vector<std::byte> bytes_of(std::size_t count, std::uint8_t seed) {
  std::vector<std::byte> bytes(count);
  for (std::size_t index = 0; index < count; ++index)
    bytes[index] = std::byte(static_cast<std::uint8_t>(index * 31 + seed));
  return bytes;
}

GgufWriter small_model() {
  GgufWriter writer;
  writer.set("general.architecture", GgufValue::string("llama"));
  writer.set("general.name", GgufValue::string("tiny ünïcode"));
  writer.set("llama.context_length", GgufValue::u32(128));
  writer.set("llama.attention.layer_norm_rms_epsilon", GgufValue::f32(1e-5f));
  writer.set("tokenizer.ggml.tokens", GgufValue::strings({"<unk>", "<s>", "</s>", "▁a"}));
  std::vector<float> scores = {0.0f, -1.0f, -2.0f, -3.5f};
  writer.set("tokenizer.ggml.scores", GgufValue::f32s(scores));
  std::vector<std::int32_t> kinds = {2, 3, 3, 1};
  writer.set("tokenizer.ggml.token_type", GgufValue::i32s(kinds));
  writer.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
  writer.set("x.u8", GgufValue::unsigned_integer(GgufValueType::kUint8, 200));
  writer.set("x.i8", GgufValue::signed_integer(GgufValueType::kInt8, -100));
  writer.set("x.u16", GgufValue::unsigned_integer(GgufValueType::kUint16, 60000));
  writer.set("x.i16", GgufValue::signed_integer(GgufValueType::kInt16, -30000));
  writer.set("x.i32", GgufValue::signed_integer(GgufValueType::kInt32, -7));
  writer.set("x.u64", GgufValue::unsigned_integer(GgufValueType::kUint64, 1ULL << 40));
  writer.set("x.i64", GgufValue::signed_integer(GgufValueType::kInt64, -(1LL << 40)));
  writer.set("x.f64", GgufValue::real(GgufValueType::kFloat64, 0.1));
  writer.set("x.nested", GgufValue::array(GgufValueType::kArray, {GgufValue::strings({"a"}), GgufValue::strings({})}));
  EXPECT_TRUE(
      writer.add_tensor("token_embd.weight", {64, 4}, TensorType::kF32, bytes_of(std::size_t{64} * 4 * 4, 1)).ok());
  EXPECT_TRUE(
      writer.add_tensor("blk.0.attn_q.weight", {64, 3}, TensorType::kQ8_0, bytes_of(std::size_t{2} * 34 * 3, 2)).ok());
  EXPECT_TRUE(
      writer.add_tensor("blk.0.ffn_up.weight", {256, 2}, TensorType::kQ4_K, bytes_of(std::size_t{144} * 2, 3)).ok());
  EXPECT_TRUE(writer.add_tensor("norm", {7}, TensorType::kF16, bytes_of(14, 4)).ok());
  return writer;
}

Result<GgufFile> parse(const std::string& bytes) {
  return GgufFile::parse(std::as_bytes(std::span(bytes.data(), bytes.size())), "test.gguf");
}

TEST(Gguf, WritesAndReadsBackEveryValueTypeAndTensor) {
  GgufWriter writer = small_model();
  auto bytes = writer.serialize();
  ASSERT_TRUE(bytes.ok());
  auto file = parse(*bytes);
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 32u);
  EXPECT_EQ(*file->require_string("general.name"), "tiny ünïcode");
  EXPECT_EQ(*file->require_unsigned("llama.context_length"), 128u);
  EXPECT_FLOAT_EQ(static_cast<float>(*file->require_real("llama.attention.layer_norm_rms_epsilon")), 1e-5f);
  EXPECT_EQ(file->find("x.u8")->as_unsigned(), 200u);
  EXPECT_EQ(file->find("x.i8")->as_signed(), -100);
  EXPECT_EQ(file->find("x.i8")->as_unsigned(), std::nullopt);  // negative: no unsigned reading
  EXPECT_EQ(file->find("x.u16")->as_unsigned(), 60000u);
  EXPECT_EQ(file->find("x.i16")->as_signed(), -30000);
  EXPECT_EQ(file->find("x.u64")->as_unsigned(), 1ULL << 40);
  EXPECT_EQ(file->find("x.i64")->as_signed(), -(1LL << 40));
  EXPECT_EQ(file->find("x.f64")->as_real(), 0.1);
  EXPECT_EQ(file->find("tokenizer.ggml.add_bos_token")->as_bool(), true);
  const auto* tokens = file->find("tokenizer.ggml.tokens")->as_array();
  ASSERT_NE(tokens, nullptr);
  ASSERT_EQ(tokens->size(), 4u);
  EXPECT_EQ(*(*tokens)[3].as_string(), "▁a");
  EXPECT_EQ((*file->find("tokenizer.ggml.scores")->as_array())[3].as_real(), -3.5);
  EXPECT_EQ((*file->find("tokenizer.ggml.token_type")->as_array())[0].as_signed(), 2);
  EXPECT_EQ(file->find("x.nested")->as_array()->size(), 2u);
  // Every value equal, in the order written.
  for (const auto& [key, value] : file->metadata()) {
    auto again = small_model().serialize();
    auto reread = parse(*again);
    EXPECT_EQ(*reread->find(key), value) << key;
  }
  ASSERT_EQ(file->tensors().size(), 4u);
  const GgufTensor* q8 = file->tensor("blk.0.attn_q.weight");
  ASSERT_NE(q8, nullptr);
  EXPECT_EQ(q8->dims, (std::vector<std::uint64_t>{64, 3}));
  EXPECT_EQ(q8->bytes, 204u);
  EXPECT_EQ(q8->elements(), 192u);
  for (const auto& tensor : file->tensors()) {
    EXPECT_EQ(tensor.offset % 32, 0u) << tensor.name;
    auto data = file->data(tensor);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(data.data()) % 32, reinterpret_cast<std::uintptr_t>(bytes->data()) % 32);
  }
  auto data = file->data(*q8);
  auto expected = bytes_of(204, 2);
  EXPECT_EQ(std::memcmp(data.data(), expected.data(), expected.size()), 0);
  // Written again, the same bytes.
  EXPECT_EQ(*small_model().serialize(), *bytes);
}

TEST(Gguf, OpensAMappedFileWithItsAlignment) {
  testing::TempDir dir;
  GgufWriter writer = small_model();
  writer.set("general.alignment", GgufValue::u32(64));
  ASSERT_TRUE(writer.write(dir.file("model.gguf")).ok());
  auto file = GgufFile::open(dir.file("model.gguf"));
  ASSERT_TRUE(file.ok()) << file.status().message();
  EXPECT_EQ(file->alignment(), 64u);
  for (const auto& tensor : file->tensors()) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(file->data(tensor).data()) % 64, 0u) << tensor.name;
  }
  EXPECT_FALSE(GgufFile::open(dir.file("missing.gguf")).ok());
}

TEST(Gguf, TensorTypesAndSizes) {
  TensorType type{};
  ASSERT_TRUE(tensor_type_by_name("q4_0", type));
  EXPECT_EQ(type, TensorType::kQ4_0);
  ASSERT_TRUE(tensor_type_by_name("BF16", type));
  EXPECT_EQ(type, TensorType::kBF16);
  EXPECT_FALSE(tensor_type_by_name("q9_9", type));
  EXPECT_EQ(tensor_type_info(static_cast<TensorType>(4)), nullptr);  // a removed ggml type
  EXPECT_EQ(*tensor_bytes(TensorType::kQ4_0, std::vector<std::uint64_t>{64, 10}), 2u * 18 * 10);
  EXPECT_EQ(*tensor_bytes(TensorType::kQ4_K, std::vector<std::uint64_t>{512}), 288u);
  EXPECT_FALSE(tensor_bytes(TensorType::kQ8_0, std::vector<std::uint64_t>{33}).ok());
  EXPECT_FALSE(tensor_bytes(TensorType::kF32, std::vector<std::uint64_t>{1ULL << 62, 1ULL << 62}).ok());
  GgufWriter writer;
  EXPECT_FALSE(writer.add_tensor("w", {32}, TensorType::kQ8_0, bytes_of(33, 0)).ok());  // 34 needed
  EXPECT_FALSE(writer.add_tensor("", {1}, TensorType::kF32, bytes_of(4, 0)).ok());
  EXPECT_FALSE(writer.add_tensor(std::string(64, 'n'), {1}, TensorType::kF32, bytes_of(4, 0)).ok());
  EXPECT_TRUE(writer.add_tensor("w", {1}, TensorType::kF32, bytes_of(4, 0)).ok());
  EXPECT_FALSE(writer.add_tensor("w", {1}, TensorType::kF32, bytes_of(4, 0)).ok());  // twice
}

// Each way a file can be wrong, with what the message must say.
TEST(Gguf, RefusesDamagedFilesSayingWhy) {
  std::string good = *small_model().serialize();
  auto refused = [](const std::string& bytes, const std::string& expected) {
    auto file = parse(bytes);
    ASSERT_FALSE(file.ok()) << "accepted; wanted: " << expected;
    EXPECT_NE(file.status().message().find(expected), std::string::npos) << file.status().message();
  };
  refused("", "truncated");
  refused("GGML" + good.substr(4), "not a GGUF file");
  std::string version = good;
  version[4] = 1;
  refused(version, "GGUF version 1 is not supported");
  version[4] = 9;
  refused(version, "GGUF version 9");
  // Cut anywhere in the header, metadata or tensor infos: truncated, never a crash.
  for (std::size_t cut = 0; cut + 32 < good.size(); cut += 7) {  // (the last 32: padding after the data)
    auto file = parse(good.substr(0, cut));
    EXPECT_FALSE(file.ok()) << "cut at " << cut;
  }
  refused(good.substr(0, good.size() - 100), "runs past the end of the file");
  // A tensor count the file cannot hold.
  std::string counts = good;
  std::uint64_t huge = 1ULL << 60;
  std::memcpy(counts.data() + 8, &huge, 8);
  refused(counts, "more than the file can hold");
  // An unknown tensor type, a misaligned offset, too many dimensions, a zero dimension: written by
  // hand after the metadata of an empty model.
  auto one_tensor = [](std::uint32_t dims, std::uint64_t dim, std::uint32_t type, std::uint64_t offset) {
    std::string bytes = "GGUF";
    auto put = [&](auto value) { bytes.append(reinterpret_cast<const char*>(&value), sizeof(value)); };
    put(std::uint32_t{3});
    put(std::uint64_t{1});  // one tensor
    put(std::uint64_t{0});  // no metadata
    put(std::uint64_t{1});  // its name's length
    bytes += "t";
    put(dims);
    for (std::uint32_t index = 0; index < dims; ++index) put(dim);
    put(type);
    put(offset);
    bytes.append(4096, '\0');
    return bytes;
  };
  EXPECT_TRUE(parse(one_tensor(1, 32, 0, 0)).ok());
  refused(one_tensor(1, 32, 77, 0), "unknown type 77");
  refused(one_tensor(1, 32, 0, 8), "not a multiple of the alignment 32");
  refused(one_tensor(5, 2, 0, 0), "has 5 dimensions");
  refused(one_tensor(1, 0, 0, 0), "a dimension of 0");
  refused(one_tensor(1, 33, 8, 0), "multiple of its block of 32");
  refused(one_tensor(1, 1ULL << 40, 0, 0), "runs past the end");
  // Metadata: an unknown value type, a bool that is not 0 or 1, an array longer than the file, a
  // duplicated key, a bad alignment, nesting past the limit.
  auto one_key = [](std::uint32_t type, const std::string& value, const std::string& key = "a.key") {
    std::string bytes = "GGUF";
    auto put = [&](auto number) { bytes.append(reinterpret_cast<const char*>(&number), sizeof(number)); };
    put(std::uint32_t{3});
    put(std::uint64_t{0});
    put(std::uint64_t{1});
    put(std::uint64_t{key.size()});
    bytes += key;
    put(type);
    bytes += value;
    return bytes;
  };
  refused(one_key(13, "x"), "unknown value type 13");
  refused(one_key(7, std::string(1, '\x02')), "a bool holds 2");
  std::string long_array = std::string("\x04\0\0\0", 4) + std::string("\xff\xff\xff\xff\xff\xff\xff\x0f", 8);
  refused(one_key(9, long_array), "more than the");
  std::string nested;
  for (int depth = 0; depth < 10; ++depth) nested += std::string("\x09\0\0\0\x01\0\0\0\0\0\0\0", 12);
  refused(one_key(9, nested), "nested more than 8 deep");
  refused(one_key(8, std::string("\xff\xff\xff\xff\0\0\0\0", 8)), "truncated");
  refused(one_key(4, std::string("\x0c\0\0\0", 4), "general.alignment"),
          "general.alignment must be a positive multiple of 8");
  // Arrays whose elements the file's bytes could hold, but past 2^22 in all.
  std::uint64_t many = (std::uint64_t{1} << 22) + 1;
  std::string huge_array = std::string("\0\0\0\0", 4) + std::string(reinterpret_cast<const char*>(&many), 8);
  refused(one_key(9, huge_array + std::string(many, 'x')), "more than 4194304 elements in all");
  // A hundred thousand keys: refused or read in time, never quadratic (duplicates found by hash).
  std::string keys = "GGUF";
  auto put = [&](auto number) { keys.append(reinterpret_cast<const char*>(&number), sizeof(number)); };
  put(std::uint32_t{3});
  put(std::uint64_t{0});
  put(std::uint64_t{100'000});
  for (std::uint32_t index = 0; index < 100'000; ++index) {
    put(std::uint64_t{4});
    put(index);
    put(std::uint32_t{0});
    keys += 'v';
  }
  EXPECT_TRUE(parse(keys).ok());
  // The writer refuses what the reader would.
  GgufWriter aligned = small_model();
  aligned.set("general.alignment", GgufValue::u32(12));
  EXPECT_FALSE(aligned.serialize().ok());
  GgufWriter mixed;
  mixed.set("k", GgufValue::array(GgufValueType::kUint32, {GgufValue::u32(1), GgufValue::f32(2)}));
  EXPECT_FALSE(mixed.serialize().ok());
  GgufWriter unnamed;
  unnamed.set("", GgufValue::u32(1));
  EXPECT_FALSE(unnamed.serialize().ok());
  std::string doubled = one_key(4, std::string("\x01\0\0\0", 4));
  std::uint64_t two = 2;
  std::memcpy(doubled.data() + 16, &two, 8);
  doubled += doubled.substr(24);
  refused(doubled, "appears twice");
}

TEST(Gguf, RequiredKeysSayWhatIsMissingOrWrong) {
  auto file = parse(*small_model().serialize());
  ASSERT_TRUE(file.ok());
  auto missing = file->require_unsigned("llama.block_count");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("the required key 'llama.block_count' is missing"), std::string::npos);
  auto wrong = file->require_unsigned("general.name");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("it is a string"), std::string::npos);
  EXPECT_FALSE(file->require_string("llama.context_length").ok());
  EXPECT_EQ(file->require_real("llama.context_length").value(), 128.0);
}

}  // namespace
}  // namespace slipway::llm
