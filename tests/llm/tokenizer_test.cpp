// Tokenizers and chat templates: tokens equal llama.cpp's on the same files (through
// node-llama-cpp, when it is installed), small hand-made vocabularies whose tokens follow from
// scores (SentencePiece) and merge ranks (BPE), any bytes surviving encode and decode, special
// tokens, hostile metadata refused, and each chat format's exact prompt.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "llm/llama_cpp_peer.h"
#include "slipway/llm.h"
#include "support/test_support.h"

namespace slipway::llm {
namespace {

using Tokens = std::vector<std::int32_t>;

// A file parsed from a writer's bytes, which it keeps alive.
class ParsedFile {
 public:
  explicit ParsedFile(const GgufWriter& writer) : bytes_(*writer.serialize()) {
    auto parsed = GgufFile::parse(std::as_bytes(std::span(bytes_.data(), bytes_.size())), "test.gguf");
    EXPECT_TRUE(parsed.ok()) << parsed.status().message();
    if (parsed.ok()) file_ = std::move(*parsed);
  }
  ParsedFile(const ParsedFile&) = delete;
  ParsedFile& operator=(const ParsedFile&) = delete;
  const GgufFile& file() const { return file_; }
  Result<Tokenizer> tokenizer() const { return Tokenizer::from_gguf(file_); }

 private:
  std::string bytes_;
  GgufFile file_;
};

// A test model's file, written to a temporary folder, and its tokenizer.
struct TestModel {
  explicit TestModel(const std::string& tokenizer_name, std::size_t vocabulary = 512) {
    TestModelShape shape;
    shape.tokenizer = tokenizer_name;
    shape.vocabulary = vocabulary;
    path = dir.file(tokenizer_name + ".gguf");
    Status written = write_test_model(shape, TensorType::kF32, 1, path);
    EXPECT_TRUE(written.ok()) << written.message();
    file = *GgufFile::open(path);
    auto made = Tokenizer::from_gguf(file);
    EXPECT_TRUE(made.ok()) << made.status().message();
    if (made.ok()) tokenizer = *made;
  }
  testing::TempDir dir;
  std::string path;
  GgufFile file;
  Tokenizer tokenizer;
};

// GPT-2's byte characters for ASCII text: a space is "Ġ" (U+0120); printable characters are themselves.
std::string byte_characters(std::string_view text) {
  std::string out;
  for (char character : text) out += character == ' ' ? std::string("\xc4\xa0") : std::string(1, character);
  return out;
}

// A SentencePiece vocabulary from (piece, score) pairs after <unk>, <s> and </s>.
GgufWriter sentencepiece_writer(const std::vector<std::pair<std::string, float>>& pieces,
                                const std::vector<std::int32_t>& extra_types = {}) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<std::int32_t> types = {2, 3, 3};
  for (std::size_t index = 0; index < pieces.size(); ++index) {
    tokens.push_back(pieces[index].first);
    scores.push_back(pieces[index].second);
    types.push_back(index < extra_types.size() ? extra_types[index] : 1);
  }
  GgufWriter writer;
  writer.set("tokenizer.ggml.model", GgufValue::string("llama"));
  writer.set("tokenizer.ggml.tokens", GgufValue::strings(tokens));
  writer.set("tokenizer.ggml.scores", GgufValue::f32s(scores));
  writer.set("tokenizer.ggml.token_type", GgufValue::i32s(types));
  return writer;
}

// A byte-level BPE vocabulary: `pieces` (in GPT-2's byte characters) and its merges, ranked in order.
GgufWriter byte_pair_writer(const std::vector<std::string>& pieces, const std::vector<std::string>& merges,
                            const std::string& pre = "gpt-2") {
  GgufWriter writer;
  writer.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  writer.set("tokenizer.ggml.pre", GgufValue::string(pre));
  writer.set("tokenizer.ggml.tokens", GgufValue::strings(pieces));
  writer.set("tokenizer.ggml.merges", GgufValue::strings(merges));
  writer.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(false));
  return writer;
}

Tokens encode_with(const GgufWriter& writer, std::string_view text) {
  ParsedFile parsed(writer);
  auto tokenizer = parsed.tokenizer();
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
  return tokenizer.ok() ? tokenizer->encode(text, false) : Tokens{};
}

// Texts in many scripts, with the spacing and punctuation the pre-tokenizers treat specially.
const std::vector<std::string>& multilingual_texts() {
  // Literals split where a hex escape would run into the next letter.
  // NOLINTBEGIN(bugprone-suspicious-missing-comma)
  static const std::vector<std::string> kTexts = {
      "Hello world",
      "hello world, the model is serving data that it trained on.",
      "  leading spaces,  double  spaces and a trailing one ",
      "\n\nnew\nlines\r\n\twith tabs\t\n  \n",
      "na\xc3\xafve caf\xc3\xa9 \xe2\x80\x94 d\xc3\xa9j\xc3\xa0 vu, \xc3\xbc"
      "ber Stra\xc3\x9f"
      "e",
      "\xce\x95\xce\xbb\xce\xbb\xce\xb7\xce\xbd\xce\xb9\xce\xba\xce\xac "
      "\xce\xba\xce\xb5\xce\xaf\xce\xbc\xce\xb5\xce\xbd"
      "\xce\xb1",
      "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82, \xd0\xbc\xd0\xb8\xd1\x80!",
      "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88\xe3\x81\xa8"
      "\xe4\xb8\xad\xe6\x96\x87",
      "emoji \xf0\x9f\x8e\x89\xf0\x9f\x9a\x80 done \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd",
      "\xd8\xa7\xd9\x84\xd8\xb9\xd8\xb1\xd8\xa8\xd9\x8a\xd8\xa9 \xd9\x86\xd8\xb5",
      "\xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5\x80 \xed\x95\x9c\xea\xb5\xad\xec\x96\xb4",
      "123 4567 3.14159 1,000,000 \xd9\xa1\xd9\xa2\xd9\xa3",
      "it's don't WE'RE they'll I'd you've 'quoted'",
      "x=1;  y = [2, 3]...\t{\"key\": \"<value>\"}",
  };
  // NOLINTEND(bugprone-suspicious-missing-comma)
  return kTexts;
}

// ---------------------------------------------------------------------------------------------
// Against llama.cpp.

struct PeerResult {
  Tokens tokens;
  std::string detokenized;
};

std::string hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (unsigned char byte : bytes) {
    out += kDigits[byte >> 4];
    out += kDigits[byte & 15];
  }
  return out;
}

std::string unhex(std::string_view digits) {
  std::string out;
  for (std::size_t at = 0; at + 1 < digits.size(); at += 2) {
    out += static_cast<char>(std::stoi(std::string(digits.substr(at, 2)), nullptr, 16));
  }
  return out;
}

// llama.cpp's tokens (no BOS) for each (text, parse_special) case, and its detokenized text.
std::vector<PeerResult> llama_cpp_tokens(const std::string& modules, const std::string& model,
                                         const std::vector<std::pair<std::string, bool>>& cases,
                                         const testing::TempDir& dir) {
  std::string list;
  for (const auto& [text, special] : cases) list += (special ? "1 " : "0 ") + hex(text) + "\n";
  testing::write_text(dir.file("cases.txt"), list);
  auto run = testing::run_command({"/usr/bin/env", "node",
                                   slipway::testing::source_dir() + "/tests/llm/llama_cpp_tokenize.mjs", modules, model,
                                   dir.file("cases.txt")});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  std::vector<PeerResult> results;
  std::istringstream lines(run.out);
  for (std::string line; std::getline(lines, line);) {
    PeerResult result;
    std::size_t bar = line.find('|');
    std::istringstream ids(line.substr(0, bar));
    for (std::string id; std::getline(ids, id, ',');) result.tokens.push_back(std::stoi(id));
    result.detokenized = bar == std::string::npos ? "" : unhex(line.substr(bar + 1));
    results.push_back(std::move(result));
  }
  return results;
}

void expect_tokens_equal_llama_cpps(const std::string& tokenizer_name,
                                    const std::vector<std::pair<std::string, bool>>& extra_cases) {
  std::string modules = testing::llama_cpp_modules();
  if (modules.empty()) GTEST_SKIP() << "Node.js or node-llama-cpp is not available";
  TestModel model(tokenizer_name);
  std::vector<std::pair<std::string, bool>> cases;
  for (const std::string& text : multilingual_texts()) cases.emplace_back(text, false);
  cases.insert(cases.end(), extra_cases.begin(), extra_cases.end());
  std::vector<PeerResult> peer = llama_cpp_tokens(modules, model.path, cases, model.dir);
  ASSERT_EQ(peer.size(), cases.size());
  for (std::size_t index = 0; index < cases.size(); ++index) {
    const auto& [text, special] = cases[index];
    SCOPED_TRACE(::testing::Message() << tokenizer_name << " case " << index << " '" << text << "'");
    Tokens ours = model.tokenizer.encode(text, false, special);
    EXPECT_EQ(ours, peer[index].tokens);
    // llama.cpp keeps the space after a leading BOS, where we drop it (see decode's contract).
    if (!ours.empty() && ours[0] != model.tokenizer.bos()) {
      EXPECT_EQ(model.tokenizer.decode(ours), peer[index].detokenized);
    }
  }
}

// llama.cpp's own tokenizer, on the test model make-test-model writes: SentencePiece merges by
// score, byte fallback for everything outside the ASCII pieces, spaces after special tokens.
TEST(TokenizerPeer, SentencePieceTokensEqualLlamaCpps) {
  expect_tokens_equal_llama_cpps(
      "llama", {{"<s>Hello</s> world<s>", true}, {"<s>Hello</s> world", false}, {"<unk> text", true}, {"a", true}});
}

// GPT-2's word split and byte-level merges by rank.
TEST(TokenizerPeer, BytePairTokensEqualLlamaCpps) {
  expect_tokens_equal_llama_cpps("gpt2", {{"<|endoftext|>hello<|endoftext|> world", true},
                                          {"<|endoftext|>hello", false},
                                          {"the cafe caf\xc3\xa9 theing thethe", false}});
}

// Llama 3's word split (digits in threes, line breaks kept together), and whole words that are
// tokens taken before merging.
TEST(TokenizerPeer, Llama3TokensEqualLlamaCpps) {
  expect_tokens_equal_llama_cpps(
      "llama3", {{"<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>", true},
                 {"<|begin_of_text|>hello", false},
                 {"1234567 12 x1234y", false},
                 {"a\r\n\r\n  b  \n c  ", false},
                 {"HELLO'S 'RE 'Ll", false}});
}

// ---------------------------------------------------------------------------------------------
// Known vocabularies.

// SentencePiece merges the pair whose joined piece scores highest, the leftmost of equal scores.
TEST(Tokenizer, SentencePieceScoresDecideMerges) {
  // Ids: 3 ▁, 4 a, 5 b, 6 c, 7 ab, 8 bc, 9 ▁a, 10 ▁ab.
  auto vocabulary = [](float ab, float bc) {
    return sentencepiece_writer({{"\xe2\x96\x81", -9},
                                 {"a", -9},
                                 {"b", -9},
                                 {"c", -9},
                                 {"ab", ab},
                                 {"bc", bc},
                                 {"\xe2\x96\x81"
                                  "a",
                                  -2},
                                 {"\xe2\x96\x81"
                                  "ab",
                                  -0.5f}});
  };
  // "bc" scores above "▁a" and "ab": ▁ a bc, then ▁a bc.
  EXPECT_EQ(encode_with(vocabulary(-5, -1), "abc"), (Tokens{9, 8}));
  // "ab" first: ▁ ab c, then ▁ab c.
  EXPECT_EQ(encode_with(vocabulary(-0.1f, -1), "abc"), (Tokens{10, 6}));
  // Equal scores: the leftmost pair merges first.
  GgufWriter ties = sentencepiece_writer({{"\xe2\x96\x81", -1}, {"a", -1}, {"aa", -1}});
  EXPECT_EQ(encode_with(ties, "aaa"), (Tokens{3, 5, 4}));
  // No add_space_prefix: no ▁ first.
  ties.set("tokenizer.ggml.add_space_prefix", GgufValue::boolean(false));
  EXPECT_EQ(encode_with(ties, "aaa"), (Tokens{5, 4}));
}

// A character no piece covers becomes its bytes' tokens, <unk> for a byte without one.
TEST(Tokenizer, SentencePieceFallsBackToBytesThenUnknown) {
  GgufWriter writer = sentencepiece_writer({{"\xe2\x96\x81", -1}, {"<0xC3>", 0}, {"<0xA9>", 0}}, {1, 6, 6});
  // é is C3 A9, ü C3 BC.
  EXPECT_EQ(encode_with(writer, "\xc3\xa9\xc3\xbc"), (Tokens{3, 4, 5, 4, 0}));
}

// BPE merges the pair of the lowest rank first, the leftmost of equal ranks.
TEST(Tokenizer, BytePairMergeRanksDecide) {
  // Ids: 0 a, 1 b, 2 c, 3 ab, 4 bc, 5 abc.
  const std::vector<std::string> pieces = {"a", "b", "c", "ab", "bc", "abc"};
  EXPECT_EQ(encode_with(byte_pair_writer(pieces, {"a b", "b c"}), "abc"), (Tokens{3, 2}));
  EXPECT_EQ(encode_with(byte_pair_writer(pieces, {"b c", "a b"}), "abc"), (Tokens{0, 4}));
  EXPECT_EQ(encode_with(byte_pair_writer(pieces, {"b c", "a b", "a bc"}), "abc"), (Tokens{5}));
  EXPECT_EQ(encode_with(byte_pair_writer({"a", "aa"}, {"a a"}), "aaa"), (Tokens{1, 0}));
}

// Words never merge across the pre-tokenizer's boundaries: GPT-2 keeps a number whole, Llama 3
// splits it in threes and takes a word that is a token whole.
TEST(Tokenizer, BytePairWordsFollowThePreTokenizer) {
  const std::vector<std::string> pieces = {
      "o", byte_characters(" "), "o" + byte_characters(" "), "1", "2", "3", "4", "12", "123", "1234"};
  const std::vector<std::string> merges = {"o " + byte_characters(" "), "1 2", "12 3", "123 4"};
  // "o Ġ" never merges: the space starts the next word.
  EXPECT_EQ(encode_with(byte_pair_writer(pieces, merges), "o o"), (Tokens{0, 1, 0}));
  EXPECT_EQ(encode_with(byte_pair_writer(pieces, merges), "1234"), (Tokens{9}));
  EXPECT_EQ(encode_with(byte_pair_writer(pieces, merges, "llama-bpe"), "1234"), (Tokens{8, 6}));
  EXPECT_EQ(encode_with(byte_pair_writer(pieces, merges, "qwen2"), "1234"), (Tokens{3, 4, 5, 6}));
  // With Llama 3, a word that is a token is that token though no merge builds it.
  EXPECT_EQ(encode_with(byte_pair_writer({"a", "b", "ab"}, {"x y"}, "llama-bpe"), "ab"), (Tokens{2}));
  EXPECT_EQ(encode_with(byte_pair_writer({"a", "b", "ab"}, {"x y"}, "gpt-2"), "ab"), (Tokens{0, 1}));
}

// ---------------------------------------------------------------------------------------------
// Any text round-trips.

TEST(Tokenizer, AnyBytesRoundTripInEveryModel) {
  std::vector<std::string> texts = multilingual_texts();
  texts.push_back("");
  texts.push_back(" ");
  texts.push_back("\xff\xfe invalid \xc3 utf-8 \xe2\x82 \x80\xc0\xaf \xed\xa0\x80 \xf5\x80\x80\x80 end\xe2");
  std::string every_byte;
  for (int byte = 0; byte < 256; ++byte) every_byte += static_cast<char>(byte);
  texts.push_back(every_byte);
  for (const char* name : {"llama", "gpt2", "llama3"}) {
    TestModel model(name);
    for (const std::string& text : texts) {
      SCOPED_TRACE(std::string(name) + " '" + text + "'");
      for (bool add_special : {false, true}) {
        Tokens tokens = model.tokenizer.encode(text, add_special);
        for (std::int32_t token : tokens) ASSERT_LT(static_cast<std::size_t>(token), model.tokenizer.size());
        EXPECT_EQ(model.tokenizer.decode(tokens), text);
        // Pieces joined are decode's text but for SentencePiece's first space.
        std::string joined;
        for (std::int32_t token : tokens) joined += model.tokenizer.piece(token);
        if (model.tokenizer.model() == "llama" && !text.empty()) {
          EXPECT_EQ(joined, " " + text);
        } else {
          EXPECT_EQ(joined, text);
        }
      }
    }
  }
}

// SentencePiece spells what its pieces lack in bytes: the test model's pieces are ASCII.
TEST(Tokenizer, SentencePieceSpellsOtherScriptsInByteTokens) {
  TestModel model("llama");
  // ▁ then é's two bytes: <0xC3> is 3 + 0xC3.
  EXPECT_EQ(model.tokenizer.encode("\xc3\xa9", false),
            (Tokens{model.tokenizer.find("\xe2\x96\x81"), 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(model.tokenizer.piece(3 + 0xC3), "\xc3");
}

// ---------------------------------------------------------------------------------------------
// BOS, EOS and special tokens.

TEST(Tokenizer, BosAndEosFollowTheFile) {
  Tokenizer empty;  // default-constructed: no vocabulary
  EXPECT_TRUE(empty.encode("text").empty());
  EXPECT_EQ(empty.decode(Tokens{0, 1}), "");
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.bos(), -1);

  TestModel llama("llama");
  EXPECT_EQ(llama.tokenizer.model(), "llama");
  EXPECT_EQ(llama.tokenizer.bos(), 1);
  EXPECT_EQ(llama.tokenizer.eos(), 2);
  EXPECT_TRUE(llama.tokenizer.adds_bos());
  Tokens with_bos = llama.tokenizer.encode("hello");
  ASSERT_FALSE(with_bos.empty());
  EXPECT_EQ(with_bos[0], 1);
  EXPECT_EQ(Tokens(with_bos.begin() + 1, with_bos.end()), llama.tokenizer.encode("hello", false));
  EXPECT_EQ(llama.tokenizer.encode(""), (Tokens{1}));
  EXPECT_TRUE(llama.tokenizer.encode("", false).empty());
  EXPECT_TRUE(llama.tokenizer.ends_generation(2));
  EXPECT_FALSE(llama.tokenizer.ends_generation(1));
  EXPECT_FALSE(llama.tokenizer.ends_generation(-1));
  EXPECT_FALSE(llama.tokenizer.ends_generation(1 << 20));
  // Control tokens render only when asked; decode's first space goes after BOS.
  Tokens sentence = llama.tokenizer.encode("hello world");
  sentence.push_back(2);
  EXPECT_EQ(llama.tokenizer.decode(sentence), "hello world");
  EXPECT_EQ(llama.tokenizer.decode(sentence, true), "<s> hello world</s>");
  EXPECT_EQ(llama.tokenizer.piece(2), "");
  EXPECT_EQ(llama.tokenizer.piece(2, true), "</s>");
  EXPECT_EQ(llama.tokenizer.piece(-3), "");
  EXPECT_EQ(llama.tokenizer.decode(Tokens{-1, 100000, llama.tokenizer.find("\xe2\x96\x81hello")}), "hello");

  // add_eos_token puts EOS last.
  GgufWriter writer;
  for (const auto& [key, value] : llama.file.metadata()) writer.set(key, value);
  writer.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(true));
  writer.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(false));
  ParsedFile eos_file(writer);
  Tokens with_eos = eos_file.tokenizer()->encode("hello");
  EXPECT_EQ(with_eos.back(), 2);
  EXPECT_NE(with_eos.front(), 1);

  TestModel gpt2("gpt2");
  EXPECT_EQ(gpt2.tokenizer.model(), "gpt2");
  EXPECT_FALSE(gpt2.tokenizer.adds_bos());
  EXPECT_EQ(gpt2.tokenizer.encode("hello"), gpt2.tokenizer.encode("hello", false));
  EXPECT_EQ(gpt2.tokenizer.bos(), gpt2.tokenizer.find("<|endoftext|>"));
  EXPECT_TRUE(gpt2.tokenizer.ends_generation(gpt2.tokenizer.find("<|endoftext|>")));

  TestModel llama3("llama3");
  EXPECT_EQ(llama3.tokenizer.encode("hello")[0], llama3.tokenizer.find("<|begin_of_text|>"));
  EXPECT_TRUE(llama3.tokenizer.ends_generation(llama3.tokenizer.find("<|eot_id|>")));
  EXPECT_TRUE(llama3.tokenizer.ends_generation(llama3.tokenizer.find("<|end_of_text|>")));
  EXPECT_FALSE(llama3.tokenizer.ends_generation(llama3.tokenizer.find("<|start_header_id|>")));
  Tokens sentence3 = llama3.tokenizer.encode(" hello world");
  EXPECT_EQ(llama3.tokenizer.decode(sentence3), " hello world");
  EXPECT_EQ(llama3.tokenizer.decode(sentence3, true), "<|begin_of_text|> hello world");
}

TEST(Tokenizer, SpecialTokensMatchOnlyWhenParsed) {
  TestModel model("llama");
  // Parsed, the text after a special token gets SentencePiece's space, as at the start.
  Tokens hello = model.tokenizer.encode("hello", false), spaced = model.tokenizer.encode(" hello", false);
  Tokens expected = {1};
  expected.insert(expected.end(), hello.begin(), hello.end());
  expected.push_back(2);
  EXPECT_EQ(model.tokenizer.encode("<s>hello</s>", false, true), expected);
  expected = {1};
  expected.insert(expected.end(), spaced.begin(), spaced.end());
  EXPECT_EQ(model.tokenizer.encode("<s> hello", false, true), expected);
  Tokens plain = model.tokenizer.encode("<s>hello</s>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  EXPECT_EQ(model.tokenizer.decode(plain), "<s>hello</s>");

  TestModel llama3("llama3");
  const std::int32_t eot = llama3.tokenizer.find("<|eot_id|>");
  Tokens parsed = llama3.tokenizer.encode("a<|eot_id|>b<|eot_id|>", false, true);
  EXPECT_EQ(std::count(parsed.begin(), parsed.end(), eot), 2);
  Tokens unparsed = llama3.tokenizer.encode("a<|eot_id|>b", false, false);
  EXPECT_EQ(std::count(unparsed.begin(), unparsed.end(), eot), 0);
  EXPECT_EQ(llama3.tokenizer.decode(parsed), "ab");
  EXPECT_EQ(llama3.tokenizer.decode(parsed, true), "a<|eot_id|>b<|eot_id|>");
}

// User-defined tokens are cut out even without parse_special; longer special tokens win.
TEST(Tokenizer, UserDefinedAndOverlappingSpecialTokens) {
  // Ids: 3 ▁, 4 a, 5 b, 6 <tool>, 7 <tool>x (control), 8 <to (user-defined).
  GgufWriter writer = sentencepiece_writer(
      {{"\xe2\x96\x81", -1}, {"a", -1}, {"b", -1}, {"<tool>", 0}, {"<tool>x", 0}, {"<to", 0}}, {1, 1, 1, 4, 3, 4});
  ParsedFile parsed(writer);
  Tokenizer tokenizer = *parsed.tokenizer();
  EXPECT_EQ(tokenizer.encode("a<tool>b", false, false), (Tokens{3, 4, 6, 3, 5}));
  EXPECT_EQ(tokenizer.encode("a<tool>xb", false, true), (Tokens{3, 4, 7, 3, 5}));
  // User-defined tokens render without render_special, control ones only with it.
  EXPECT_EQ(tokenizer.decode(Tokens{6, 7}), "<tool>");
  EXPECT_EQ(tokenizer.decode(Tokens{6, 7}, true), "<tool><tool>x");
}

// Nested special tokens over a long run of their characters: each found once, the longest
// cutting first; and a vocabulary whose special texts would make the matcher huge is refused.
TEST(Tokenizer, SpecialTokenMatchingStaysBounded) {
  std::vector<std::pair<std::string, float>> pieces = {{"\xe2\x96\x81", -1}};
  std::vector<std::int32_t> types = {1};
  for (std::size_t length = 1; length <= 40; ++length) {
    pieces.emplace_back(std::string(length, 'a'), 0);
    types.push_back(4);  // user-defined: matched without parse_special
  }
  ParsedFile parsed(sentencepiece_writer(pieces, types));
  Tokenizer tokenizer = *parsed.tokenizer();
  const std::string text(200'000, 'a');
  Tokens tokens = tokenizer.encode(text, false);
  ASSERT_EQ(tokens.size(), 5000u);
  EXPECT_EQ(std::count(tokens.begin(), tokens.end(), 43), 5000);  // "a" x 40
  EXPECT_EQ(tokenizer.decode(tokens), text);

  ParsedFile huge(sentencepiece_writer({{std::string(600'000, 'x'), 0}, {std::string(600'000, 'y'), 0}}, {4, 4}));
  auto refused = huge.tokenizer();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("the special tokens' texts take 1200012 bytes, more than the 1048576"),
            std::string::npos)
      << refused.status().message();
}

// ---------------------------------------------------------------------------------------------
// Hostile files.

TEST(Tokenizer, RefusesMalformedMetadata) {
  auto refused = [](const GgufWriter& writer, const std::string& expected) {
    ParsedFile parsed(writer);
    auto tokenizer = parsed.tokenizer();
    ASSERT_FALSE(tokenizer.ok()) << expected;
    EXPECT_EQ(tokenizer.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(tokenizer.status().message().find(expected), std::string::npos) << tokenizer.status().message();
  };
  auto spm = [] { return sentencepiece_writer({{"\xe2\x96\x81", -1}, {"a", -1}}); };
  GgufWriter writer;
  refused(writer, "tokenizer.ggml.model is missing");
  writer = spm();
  writer.set("tokenizer.ggml.model", GgufValue::string("bert"));
  refused(writer, "the tokenizer model 'bert'");
  writer = spm();
  writer.set("tokenizer.ggml.model", GgufValue::u32(1));
  refused(writer, "tokenizer.ggml.model is a u32, not a string");
  writer = spm();
  writer.set("tokenizer.ggml.tokens", GgufValue::string("<unk>"));
  refused(writer, "tokenizer.ggml.tokens is a string, not an array");
  writer = spm();
  writer.set("tokenizer.ggml.tokens", GgufValue::strings({}));
  refused(writer, "tokenizer.ggml.tokens is empty");
  writer = spm();
  std::vector<std::int32_t> numbers = {1, 2, 3, 4, 5};
  writer.set("tokenizer.ggml.tokens", GgufValue::i32s(numbers));
  refused(writer, "tokenizer.ggml.tokens holds a i32 at 0, not a string");
  writer = spm();
  std::vector<float> short_scores = {0, 0};
  writer.set("tokenizer.ggml.scores", GgufValue::f32s(short_scores));
  refused(writer, "tokenizer.ggml.scores has 2 values for 5 tokens");
  writer = spm();
  std::vector<float> nan_scores = {0, 0, 0, std::nanf(""), 0};
  writer.set("tokenizer.ggml.scores", GgufValue::f32s(nan_scores));
  refused(writer, "tokenizer.ggml.scores[3] is not a number");
  writer = spm();
  std::vector<std::int32_t> bad_types = {2, 3, 3, 1, 9};
  writer.set("tokenizer.ggml.token_type", GgufValue::i32s(bad_types));
  refused(writer, "tokenizer.ggml.token_type[4] is not a token type");
  writer = spm();
  std::vector<std::int32_t> byte_type = {2, 3, 3, 1, 6};
  writer.set("tokenizer.ggml.token_type", GgufValue::i32s(byte_type));
  refused(writer, "token 4 is a byte token, but its text 'a' is not <0xXX>");
  writer = spm();
  writer.set("tokenizer.ggml.bos_token_id", GgufValue::u32(5));
  refused(writer, "tokenizer.ggml.bos_token_id is 5, outside the vocabulary of 5 tokens");
  writer = spm();
  writer.set("tokenizer.ggml.eot_token_id", GgufValue::signed_integer(GgufValueType::kInt32, -1));
  refused(writer, "tokenizer.ggml.eot_token_id is -1");
  writer = spm();
  writer.set("tokenizer.ggml.eos_token_id", GgufValue::string("2"));
  refused(writer, "tokenizer.ggml.eos_token_id is a string, not a token id");
  writer = spm();
  writer.set("tokenizer.ggml.add_bos_token", GgufValue::u32(1));
  refused(writer, "tokenizer.ggml.add_bos_token is a u32, not a bool");
  // A vocabulary of 1 token: the default BOS (1) does not exist, yet add_bos_token asks for it.
  writer = sentencepiece_writer({});
  writer.set("tokenizer.ggml.tokens", GgufValue::strings({"a"}));
  writer.set("tokenizer.ggml.scores", GgufValue::f32s(std::vector<float>{0}));
  writer.set("tokenizer.ggml.token_type", GgufValue::i32s(std::vector<std::int32_t>{1}));
  refused(writer, "add_bos_token is set, but there is no BOS token");

  GgufWriter bpe = byte_pair_writer({"a", "b"}, {"a b"});
  bpe.set("tokenizer.ggml.merges", GgufValue::strings({"a b", "ab"}));
  refused(bpe, "tokenizer.ggml.merges[1] is not two pieces separated by a space");
  bpe.set("tokenizer.ggml.merges", GgufValue::i32s(numbers));
  refused(bpe, "tokenizer.ggml.merges[0] is not two pieces");
  bpe.set("tokenizer.ggml.merges", GgufValue::strings({"a b"}));
  bpe.set("tokenizer.ggml.pre", GgufValue::string("deepseek-llm"));
  refused(bpe, "the pre-tokenizer 'deepseek-llm' (tokenizer.ggml.pre) is not supported");
  GgufWriter no_merges;
  no_merges.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  no_merges.set("tokenizer.ggml.tokens", GgufValue::strings({"a"}));
  refused(no_merges, "tokenizer.ggml.merges is missing");
}

// Merges naming pieces that are no token, or building pieces no token has, still encode.
TEST(Tokenizer, OddButValidMergesStillEncode) {
  // "x y" joins pieces outside the vocabulary; "a b" builds "ab", which is no token either.
  Tokens tokens = encode_with(byte_pair_writer({"a", "b"}, {"x y", "a b", "a b"}), "ab ab");
  // "ab" is no token: its bytes are looked up alone (the space's byte character "Ġ" is none).
  EXPECT_EQ(tokens, (Tokens{0, 1, 0, 1}));
}

// ---------------------------------------------------------------------------------------------
// Long inputs.

// 200 KB encode in far less than the quadratic time a naive merge loop would take; the limit is
// generous, for sanitizer builds, and the release build takes a few tens of milliseconds.
TEST(Tokenizer, LongTextsEncodeInNearLinearTime) {
  std::string text;
  while (text.size() < 200'000) {
    for (const std::string& sentence : multilingual_texts()) text += sentence + " ";
  }
  const std::string one_word(200'000, 'a');
  for (const char* name : {"llama", "gpt2", "llama3"}) {
    TestModel model(name);
    auto start = std::chrono::steady_clock::now();
    Tokens tokens = model.tokenizer.encode(text, false, true);
    Tokens word = model.tokenizer.encode(one_word, false);
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 20.0) << name;
    EXPECT_EQ(model.tokenizer.decode(tokens), text) << name;
    EXPECT_EQ(model.tokenizer.decode(word), one_word) << name;
  }
  // A special token every few characters.
  TestModel llama3("llama3");
  std::string turns;
  while (turns.size() < 200'000) turns += "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>";
  Tokens tokens = llama3.tokenizer.encode(turns, false, true);
  EXPECT_EQ(std::count(tokens.begin(), tokens.end(), llama3.tokenizer.find("<|eot_id|>")),
            static_cast<std::ptrdiff_t>(
                turns.size() / std::string_view("<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>").size()));
  EXPECT_EQ(llama3.tokenizer.decode(tokens, true), turns);
}

// ---------------------------------------------------------------------------------------------
// Chat templates.

std::vector<ChatMessage> conversation() {
  return {{"system", "Be brief."}, {"user", " Hi! "}, {"assistant", "Hello.\n"}, {"user", "Tell me a joke"}};
}

// A file with only a tokenizer (the SentencePiece test model's) and, if given, a chat template.
std::unique_ptr<ParsedFile> chat_file(const TestModel& model, const std::string& chat_template) {
  GgufWriter writer;
  for (const auto& [key, value] : model.file.metadata()) {
    if (key.starts_with("tokenizer.")) writer.set(key, value);
  }
  if (!chat_template.empty()) writer.set("tokenizer.chat_template", GgufValue::string(chat_template));
  return std::make_unique<ParsedFile>(writer);
}

constexpr std::string_view kLlama2Template =
    "{% if messages[0]['role'] == 'system' %}...{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' "
    "+ message['content'] %}...{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}...";
constexpr std::string_view kChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + "
    "'\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

TEST(ChatTemplate, Llama2PromptIsTheReferenceTemplates) {
  TestModel model("llama");
  auto file = chat_file(model, std::string(kLlama2Template));
  auto prompt = render_chat(file->file(), model.tokenizer, conversation());
  ASSERT_TRUE(prompt.ok()) << prompt.status().message();
  EXPECT_EQ(*prompt,
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi! [/INST] Hello. </s><s>[INST] Tell me a joke [/INST]");
  // No template in the file and no <|im_start|>: Llama 2 too.
  auto fallback = render_chat(chat_file(model, "")->file(), model.tokenizer, conversation());
  EXPECT_EQ(*fallback, *prompt);
  // BOS is text: encoded with parse_special, it is the BOS token, and no other is added.
  Tokens tokens = model.tokenizer.encode(*prompt, false, true);
  EXPECT_EQ(tokens[0], 1);
  EXPECT_EQ(std::count(tokens.begin(), tokens.end(), 1), 2);
  EXPECT_EQ(std::count(tokens.begin(), tokens.end(), 2), 1);
  // Without a system message.
  std::vector<ChatMessage> one = {{"user", "Hi"}};
  EXPECT_EQ(*render_chat(file->file(), model.tokenizer, one), "<s>[INST] Hi [/INST]");
}

TEST(ChatTemplate, Llama3PromptIsTheReferenceTemplates) {
  TestModel model("llama3");  // its file has Llama 3 Instruct's template
  auto prompt = render_chat(model.file, model.tokenizer, conversation());
  ASSERT_TRUE(prompt.ok()) << prompt.status().message();
  EXPECT_EQ(*prompt,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nTell me a joke<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  auto without = render_chat(model.file, model.tokenizer, conversation(), false);
  EXPECT_EQ(
      *without,
      prompt->substr(0, prompt->size() - std::string_view("<|start_header_id|>assistant<|end_header_id|>\n\n").size()));
  Tokens tokens = model.tokenizer.encode(*prompt, false, true);
  EXPECT_EQ(tokens[0], model.tokenizer.bos());
  EXPECT_EQ(std::count(tokens.begin(), tokens.end(), model.tokenizer.find("<|eot_id|>")), 4);
  EXPECT_EQ(model.tokenizer.decode(tokens, true), *prompt);
}

TEST(ChatTemplate, ChatMlPromptIsTheReferenceTemplates) {
  TestModel gpt2("gpt2");  // adds no BOS
  GgufWriter writer;
  for (const auto& [key, value] : gpt2.file.metadata()) {
    if (key.starts_with("tokenizer.")) writer.set(key, value);
  }
  writer.set("tokenizer.chat_template", GgufValue::string(std::string(kChatMlTemplate)));
  ParsedFile file(writer);
  auto prompt = render_chat(file.file(), gpt2.tokenizer, conversation());
  ASSERT_TRUE(prompt.ok()) << prompt.status().message();
  EXPECT_EQ(*prompt,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi! <|im_end|>\n"
            "<|im_start|>assistant\nHello.\n<|im_end|>\n<|im_start|>user\nTell me a joke<|im_end|>\n"
            "<|im_start|>assistant\n");
  // A tokenizer that adds BOS gets it in front; a vocabulary with <|im_start|> and no template
  // is ChatML.
  TestModel llama("llama");
  std::vector<ChatMessage> one = {{"user", "Hi"}};
  EXPECT_EQ(*render_chat(chat_file(llama, std::string(kChatMlTemplate))->file(), llama.tokenizer, one, false),
            "<s><|im_start|>user\nHi<|im_end|>\n");
  GgufWriter with_im;
  with_im.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  with_im.set("tokenizer.ggml.tokens", GgufValue::strings({"a", "<|im_start|>", "<|im_end|>"}));
  with_im.set("tokenizer.ggml.merges", GgufValue::strings({}));
  ParsedFile im_file(with_im);
  Tokenizer im_tokenizer = *im_file.tokenizer();
  EXPECT_EQ(*render_chat(im_file.file(), im_tokenizer, one), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // template_name overrides the file.
  EXPECT_EQ(*render_chat(im_file.file(), im_tokenizer, one, true, "llama3"),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(*render_chat(im_file.file(), im_tokenizer, one, true, "llama2"), "<s>[INST] Hi [/INST]");
}

TEST(ChatTemplate, RefusesUnknownShapesAndMisplacedRoles) {
  TestModel model("llama");
  std::vector<ChatMessage> one = {{"user", "Hi"}};
  const std::string gemma =
      "{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + "
      "'<end_of_turn>\n' }}{% endfor %}";
  auto refused = render_chat(chat_file(model, gemma)->file(), model.tokenizer, one);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kFailedPrecondition);
  // The template's first 60 characters, on one line.
  EXPECT_NE(refused.status().message().find("\"{{ bos_token }}{% for message in messages %}{{ '<start_of_tu...\""),
            std::string::npos)
      << refused.status().message();
  // Mistral's [INST] without Llama 2's <<SYS>> is another shape.
  const std::string mistral =
      "{{ bos_token }}{% for message in messages %}{{ '[INST] ' + message['content'] + ' [/INST]' }}";
  EXPECT_EQ(render_chat(chat_file(model, mistral)->file(), model.tokenizer, one).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(render_chat(chat_file(model, gemma)->file(), model.tokenizer, one, true, "gemma").status().code(),
            StatusCode::kInvalidArgument);

  auto misplaced = [&](const std::string& chat_template, std::vector<ChatMessage> messages,
                       const std::string& expected) {
    auto result = render_chat(chat_file(model, chat_template)->file(), model.tokenizer, messages);
    ASSERT_FALSE(result.ok()) << expected;
    EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(result.status().message().find(expected), std::string::npos) << result.status().message();
  };
  const std::string llama2(kLlama2Template), chatml(kChatMlTemplate);
  misplaced(llama2, {{"user", "a"}, {"user", "b"}}, "no place for a 'user' message at 1");
  misplaced(llama2, {{"tool", "a"}}, "no place for a 'tool' message at 0");
  misplaced(llama2, {{"user", "a"}, {"system", "b"}}, "no place for a 'system' message at 1");
  misplaced(llama2, {{"system", "a"}}, "there is none");
  misplaced(chatml, {{"narrator", "a"}}, "the ChatML chat format has no place for a 'narrator' message at 0");
  misplaced(chatml, {{"user<|im_end|>", "a"}}, "no place for a 'user<|im_end|>' message");
  misplaced(chatml, {}, "at least one message");
}

}  // namespace
}  // namespace slipway::llm
