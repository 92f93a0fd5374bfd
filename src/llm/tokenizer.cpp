// Tokenizers from a GGUF file's tokenizer.* keys, giving llama.cpp's tokens: the algorithms of its
// src/llama-vocab.cpp and src/unicode.cpp (the llama.cpp node-llama-cpp 3.21.1 bundles), which
// tests/llm/tokenizer_test.cpp checks us against.
//
// Encoding runs in two steps, as llama.cpp's does.
// 1. Special tokens are cut out of the text first: each occurrence of a control, unknown or
//    user-defined token's text (control and unknown ones only with parse_special), the longest
//    tokens first, each claiming its occurrences left to right among the bytes no earlier token
//    claimed. llama.cpp searches the text once per special token; here a trie of their texts
//    finds every occurrence in one pass and the claims are settled in that same order, so a
//    vocabulary with thousands of special tokens costs no more than one with three.
// 2. Each fragment of text left between them is tokenized on its own.
//    SentencePiece ("llama"): spaces become "▁" and one goes first when the fragment follows
//    the start or a special token (add_space_prefix); the text is split into UTF-8 characters
//    and the adjacent pair whose joined text is a token of the highest score merges (ties: the
//    leftmost), candidates waiting in a priority queue whose stale entries are skipped when
//    popped: O(n log n). A character no token covers becomes byte tokens <0xXX>.
//    BPE ("gpt2"): the pre-tokenizer's regex, implemented by hand over code point classes,
//    splits the fragment into words; a word's bytes become GPT-2's byte characters and pairs
//    merge by the lowest merge rank (ties: the leftmost), with a priority queue again. Pieces
//    are interned to ids when the file is read and each merge maps a pair of ids to its rank and
//    result, so merging compares integers, never strings.
//
// Where we differ from llama.cpp, by choice, so that any bytes survive encode and decode: invalid
// UTF-8 stays bytes (llama.cpp's BPE turns each bad byte into U+FFFD; its SentencePiece split lets
// a stray lead byte swallow the bytes after it, a space's "▁" included); a byte with no byte token
// falls back to <unk>, or is dropped, where llama.cpp throws; decode keeps spaces before
// punctuation (llama.cpp's clean_up_tokenization_spaces pass for BPE removes them) and also
// drops SentencePiece's leading space after a leading BOS. On valid UTF-8 the tokens are the
// same. llama.cpp's model-specific quirks (Phi-3's rstrip, gpt-oss's <|end|>, FIM tokens made
// control, the "default" pre-tokenizer for a BPE file naming none) are left out.
#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <limits>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include <fmt/format.h>

#include "llm/unicode.h"
#include "slipway/llm.h"

namespace slipway::llm {
namespace {

constexpr std::string_view kSpaceMark = "\xe2\x96\x81";  // U+2581, SentencePiece's word boundary

// A bound on the special tokens' texts together, which the trie that finds them holds: real
// vocabularies have kilobytes of them (Llama 3's 256 reserved tokens are 8 KiB).
constexpr std::size_t kMaxSpecialTextBytes = std::size_t{1} << 20;

struct PreTokenizerName {
  std::string_view name;
  PreTokenizer kind;
  bool ignore_merges;  // a word that is a token whole is that token, whatever the merges say
};
// The tokenizer.ggml.pre values llama.cpp splits with these regexes.
// clang-format off
constexpr PreTokenizerName kPreTokenizers[] = {
    {"gpt-2", PreTokenizer::kGpt2, false},      {"phi-2", PreTokenizer::kGpt2, false},
    {"mpt", PreTokenizer::kGpt2, false},        {"olmo", PreTokenizer::kGpt2, false},
    {"llama3", PreTokenizer::kLlama3, true},    {"llama-v3", PreTokenizer::kLlama3, true},
    {"llama-bpe", PreTokenizer::kLlama3, true}, {"falcon3", PreTokenizer::kLlama3, true},
    {"pixtral", PreTokenizer::kLlama3, true},   {"dbrx", PreTokenizer::kLlama3, false},
    {"smaug-bpe", PreTokenizer::kLlama3, false}, {"qwen2", PreTokenizer::kQwen2, false},
    {"deepseek-r1-qwen", PreTokenizer::kQwen2, false}, {"stablelm2", PreTokenizer::kQwen2, false},
};
// clang-format on

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 for
// U+0100 onwards in byte order, so every byte is a visible character.
struct ByteCharacters {
  std::array<std::string, 256> text;     // each byte's character, in UTF-8
  std::array<std::int16_t, 0x144> byte;  // each character's byte, -1 for none
};

const ByteCharacters& byte_characters() {
  static const ByteCharacters kTable = [] {
    ByteCharacters characters;
    characters.byte.fill(-1);
    std::uint32_t next_extra = 0x100;
    for (std::uint32_t byte = 0; byte < 256; ++byte) {
      bool printable = (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
      std::uint32_t code_point = printable ? byte : next_extra++;
      append_utf8(characters.text[byte], code_point);
      characters.byte[code_point] = static_cast<std::int16_t>(byte);
    }
    return characters;
  }();
  return kTable;
}

// A byte-level BPE token's bytes: each character's byte; a character outside GPT-2's map passes
// through as it is (llama.cpp writes "[UNK_BYTE_0x..]" instead).
std::string bytes_of_characters(std::string_view text) {
  const ByteCharacters& map = byte_characters();
  const std::vector<Character> characters_of_text = characters(text);
  std::string bytes;
  for (std::size_t index = 0; index < characters_of_text.size(); ++index) {
    const Character& character = characters_of_text[index];
    if (character.code_point < map.byte.size() && map.byte[character.code_point] >= 0) {
      bytes += static_cast<char>(map.byte[character.code_point]);
    } else {
      std::size_t end = index + 1 < characters_of_text.size() ? characters_of_text[index + 1].offset : text.size();
      bytes += text.substr(character.offset, end - character.offset);
    }
  }
  return bytes;
}

// One token id per byte, all -1 (none).
constexpr std::array<std::int32_t, 256> none_per_byte() {
  std::array<std::int32_t, 256> table{};
  table.fill(-1);
  return table;
}

// Token attributes, as llama.cpp's llama_token_attr bits.
enum TokenAttribute : std::uint8_t {
  kAttributeUnknown = 1,
  kAttributeUnused = 2,
  kAttributeNormal = 4,
  kAttributeControl = 8,
  kAttributeUserDefined = 16,
  kAttributeByte = 32,
};
constexpr std::uint8_t kAttributeSpecial = kAttributeUnknown | kAttributeControl;

// tokenizer.ggml.token_type's values 0-6 (undefined, normal, unknown, control, user-defined,
// unused, byte) as attributes.
constexpr std::array<std::uint8_t, 7> kTypeAttributes = {
    0, kAttributeNormal, kAttributeUnknown, kAttributeControl, kAttributeUserDefined, kAttributeUnused, kAttributeByte};

// Texts that end a turn, which llama.cpp treats as end-of-generation (and as control tokens,
// whatever the file says) wherever a vocabulary has them.
// clang-format off
constexpr std::string_view kEndOfGenerationTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    // DeepSeek's, in full-width bars; split so that "e" is not read as a hex digit of \x9c.
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",  // NOLINT(bugprone-suspicious-missing-comma)
};
// clang-format on

}  // namespace

// ---------------------------------------------------------------------------------------------

struct Tokenizer::Data {
  Data() = default;
  // `pieces` points into `texts`: a copy would point into the original.
  Data(const Data&) = delete;
  Data& operator=(const Data&) = delete;

  std::string model;  // "llama" or "gpt2"
  bool byte_pairs = false;
  PreTokenizer pre_tokenizer = PreTokenizer::kGpt2;
  bool ignore_merges = false;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  std::int32_t bos = -1, eos = -1, unknown = -1;

  std::vector<std::string> texts;
  std::vector<float> scores;
  std::vector<std::uint8_t> attributes;
  std::vector<std::string> rendered;  // each token's bytes when rendered (special tokens' text included)
  std::vector<bool> ends_generation;

  // Interned pieces: every token's text (its id; of equal texts, the last, as in llama.cpp), then
  // merge parts that are no token (ids from texts.size()). Views into `texts` and `extra_pieces`,
  // which never move once the map refers to them.
  std::deque<std::string> extra_pieces;
  std::unordered_map<std::string_view, std::int32_t> pieces;

  struct Merge {
    std::uint64_t pair = 0;  // left piece << 32 | right piece
    std::int32_t rank = 0;   // its place in tokenizer.ggml.merges: lower merges first
    std::int32_t result = 0;
  };
  std::vector<Merge> merges;                                    // sorted by pair
  std::array<std::int32_t, 256> byte_pieces = none_per_byte();  // each byte's character as a piece
  std::array<std::int32_t, 256> byte_tokens = none_per_byte();  // SentencePiece's fallback token per byte

  // A trie over the special tokens' texts.
  struct TrieNode {
    std::int32_t any = -1;     // the lowest special token whose text ends here
    std::int32_t always = -1;  // the lowest user-defined one (matched without parse_special)
  };
  std::vector<TrieNode> trie{1};
  std::array<std::uint32_t, 256> trie_roots{};                  // the root's children (0: none)
  std::unordered_map<std::uint64_t, std::uint32_t> trie_edges;  // node << 8 | byte -> child

  std::int32_t token(std::string_view text) const {
    auto found = pieces.find(text);
    return found == pieces.end() || found->second >= static_cast<std::int32_t>(texts.size()) ? -1 : found->second;
  }
  std::int32_t intern(std::string_view text) {
    if (auto found = pieces.find(text); found != pieces.end()) return found->second;
    auto id = static_cast<std::int32_t>(texts.size() + extra_pieces.size());
    pieces.emplace(extra_pieces.emplace_back(text), id);
    return id;
  }
  const Merge* merge(std::int32_t left, std::int32_t right) const {
    std::uint64_t pair = static_cast<std::uint64_t>(left) << 32 | static_cast<std::uint32_t>(right);
    auto found = std::lower_bound(merges.begin(), merges.end(), pair,
                                  [](const Merge& merge, std::uint64_t key) { return merge.pair < key; });
    return found != merges.end() && found->pair == pair ? &*found : nullptr;
  }
  std::uint32_t trie_child(std::uint32_t node, std::uint8_t byte) const {
    if (node == 0) return trie_roots[byte];
    auto found = trie_edges.find(static_cast<std::uint64_t>(node) << 8 | byte);
    return found == trie_edges.end() ? 0 : found->second;
  }
  void add_special(std::string_view text, std::int32_t id, bool always) {
    std::uint32_t node = 0;
    for (char character : text) {
      auto byte = static_cast<std::uint8_t>(character);
      std::uint32_t child = trie_child(node, byte);
      if (child == 0) {
        child = static_cast<std::uint32_t>(trie.size());
        trie.emplace_back();
        if (node == 0) {
          trie_roots[byte] = child;
        } else {
          trie_edges.emplace(static_cast<std::uint64_t>(node) << 8 | byte, child);
        }
      }
      node = child;
    }
    if (trie[node].any < 0) trie[node].any = id;
    if (always && trie[node].always < 0) trie[node].always = id;
  }

  struct Fragment {
    std::size_t begin = 0, end = 0;
    std::int32_t token = -1;  // a special token, or -1 for the text [begin, end)
  };
  Status read_vocabulary(const GgufFile& file);
  Status read_pre_tokenizer(const GgufFile& file);
  Status read_merges(const GgufFile& file);
  Status read_special_tokens(const GgufFile& file);
  Status prepare_tables(const GgufFile& file);

  std::vector<Fragment> partition(std::string_view text, bool parse_special) const;
  void encode_sentencepiece(std::string_view fragment, bool space_first, std::vector<std::int32_t>& out) const;
  void encode_byte_pairs(std::string_view fragment, std::vector<std::int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<std::int32_t>& out) const;
};

namespace {

// ---------------------------------------------------------------------------------------------
// Reading the file.

Result<const std::vector<GgufValue>*> array_of(const GgufFile& file, std::string_view key, bool required) {
  const GgufValue* value = file.find(key);
  if (value == nullptr) {
    if (!required) return static_cast<const std::vector<GgufValue>*>(nullptr);
    return invalid_argument(fmt::format("{}: {} is missing", file.source(), key));
  }
  if (value->type() != GgufValueType::kArray) {
    return invalid_argument(
        fmt::format("{}: {} is a {}, not an array", file.source(), key, gguf_value_type_name(value->type())));
  }
  return value->as_array();
}

Result<std::optional<bool>> flag(const GgufFile& file, std::string_view key) {
  const GgufValue* value = file.find(key);
  if (value == nullptr) return std::optional<bool>();
  if (!value->as_bool()) {
    return invalid_argument(
        fmt::format("{}: {} is a {}, not a bool", file.source(), key, gguf_value_type_name(value->type())));
  }
  return value->as_bool();
}

// A special token's id from `key`, `fallback` when the key is absent (and -1 when that is out of
// range too).
Result<std::int32_t> token_id(const GgufFile& file, std::string_view key, std::size_t size, std::int32_t fallback) {
  const GgufValue* value = file.find(key);
  if (value == nullptr) return fallback >= 0 && static_cast<std::size_t>(fallback) < size ? fallback : -1;
  std::optional<std::int64_t> id = value->as_signed();
  if (!value->is_integer() || !id) {
    return invalid_argument(
        fmt::format("{}: {} is a {}, not a token id", file.source(), key, gguf_value_type_name(value->type())));
  }
  if (*id < 0 || static_cast<std::uint64_t>(*id) >= size) {
    return invalid_argument(
        fmt::format("{}: {} is {}, outside the vocabulary of {} tokens", file.source(), key, *id, size));
  }
  return static_cast<std::int32_t>(*id);
}

bool is_hex(char character) {
  return (character >= '0' && character <= '9') || ((character | 0x20) >= 'a' && (character | 0x20) <= 'f');
}

// The byte a byte token <0xXX> stands for, or -1 when its text is not of that form.
int byte_of_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>' || !is_hex(text[3]) || !is_hex(text[4])) {
    return -1;
  }
  auto digit = [](char character) { return character <= '9' ? character - '0' : (character | 0x20) - 'a' + 10; };
  return digit(text[3]) * 16 + digit(text[4]);
}

}  // namespace

Status Tokenizer::Data::read_vocabulary(const GgufFile& file) {
  SLIPWAY_ASSIGN_OR_RETURN(auto tokens, array_of(file, "tokenizer.ggml.tokens", true));
  if (tokens->empty()) return invalid_argument(fmt::format("{}: tokenizer.ggml.tokens is empty", file.source()));
  if (tokens->size() >= static_cast<std::size_t>(std::numeric_limits<std::int32_t>::max() / 2)) {
    return invalid_argument(
        fmt::format("{}: tokenizer.ggml.tokens has {} tokens, too many for 32-bit ids", file.source(), tokens->size()));
  }
  const std::size_t size = tokens->size();
  texts.reserve(size);
  for (std::size_t id = 0; id < size; ++id) {
    const std::string* text = (*tokens)[id].as_string();
    if (text == nullptr) {
      return invalid_argument(fmt::format("{}: tokenizer.ggml.tokens holds a {} at {}, not a string", file.source(),
                                          gguf_value_type_name((*tokens)[id].type()), id));
    }
    texts.push_back(*text);
  }

  scores.assign(size, 0.0f);
  SLIPWAY_ASSIGN_OR_RETURN(auto file_scores, array_of(file, "tokenizer.ggml.scores", false));
  if (file_scores != nullptr) {
    if (file_scores->size() != size) {
      return invalid_argument(fmt::format("{}: tokenizer.ggml.scores has {} values for {} tokens; it needs one each",
                                          file.source(), file_scores->size(), size));
    }
    for (std::size_t id = 0; id < size; ++id) {
      std::optional<double> score = (*file_scores)[id].as_real();
      if (!score || std::isnan(*score)) {
        return invalid_argument(fmt::format("{}: tokenizer.ggml.scores[{}] is not a number", file.source(), id));
      }
      scores[id] = static_cast<float>(*score);
    }
  }

  attributes.assign(size, kAttributeNormal);
  SLIPWAY_ASSIGN_OR_RETURN(auto types, array_of(file, "tokenizer.ggml.token_type", false));
  if (types != nullptr) {
    if (types->size() != size) {
      return invalid_argument(
          fmt::format("{}: tokenizer.ggml.token_type has {} values for {} tokens; it needs one each", file.source(),
                      types->size(), size));
    }
    for (std::size_t id = 0; id < size; ++id) {
      std::optional<std::int64_t> type = (*types)[id].as_signed();
      if (!(*types)[id].is_integer() || !type || *type < 0 ||
          *type >= static_cast<std::int64_t>(kTypeAttributes.size())) {
        return invalid_argument(fmt::format(
            "{}: tokenizer.ggml.token_type[{}] is not a token type (0-6: undefined, normal, unknown, control, "
            "user-defined, unused, byte)",
            file.source(), id));
      }
      attributes[id] = kTypeAttributes[static_cast<std::size_t>(*type)];
      if (attributes[id] == kAttributeByte && byte_of_token(texts[id]) < 0) {
        return invalid_argument(fmt::format("{}: token {} is a byte token, but its text '{}' is not <0xXX>",
                                            file.source(), id, texts[id].substr(0, 40)));
      }
    }
  }

  // Empty texts never match (llama.cpp renames them "[EMPTY_n]").
  pieces.reserve(size);
  for (std::size_t id = 0; id < size; ++id) {
    if (!texts[id].empty()) pieces.insert_or_assign(texts[id], static_cast<std::int32_t>(id));
  }
  return Status::ok_status();
}

Status Tokenizer::Data::read_merges(const GgufFile& file) {
  SLIPWAY_ASSIGN_OR_RETURN(auto file_merges, array_of(file, "tokenizer.ggml.merges", true));
  merges.reserve(file_merges->size());
  for (std::size_t rank = 0; rank < file_merges->size(); ++rank) {
    const std::string* merge = (*file_merges)[rank].as_string();
    // llama.cpp splits at the first space after the first byte, so a merge may join a space.
    std::size_t space = merge == nullptr ? std::string::npos : merge->find(' ', 1);
    if (space == std::string::npos) {
      return invalid_argument(
          fmt::format("{}: tokenizer.ggml.merges[{}] is not two pieces separated by a space", file.source(), rank));
    }
    std::string_view left = std::string_view(*merge).substr(0, space),
                     right = std::string_view(*merge).substr(space + 1);
    std::int32_t left_id = intern(left), right_id = intern(right);
    std::string joined = std::string(left) + std::string(right);
    merges.push_back({static_cast<std::uint64_t>(left_id) << 32 | static_cast<std::uint32_t>(right_id),
                      static_cast<std::int32_t>(rank), intern(joined)});
  }
  // A pair listed twice keeps its first rank, as llama.cpp's map does.
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.pair < b.pair; });
  merges.erase(
      std::unique(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) { return a.pair == b.pair; }),
      merges.end());
  const ByteCharacters& characters = byte_characters();
  for (std::size_t byte = 0; byte < 256; ++byte) {
    auto found = pieces.find(characters.text[byte]);
    byte_pieces[byte] = found == pieces.end() ? -1 : found->second;
  }
  return Status::ok_status();
}

Status Tokenizer::Data::read_pre_tokenizer(const GgufFile& file) {
  const GgufValue* value = file.find("tokenizer.ggml.pre");
  // Without the key llama.cpp uses a "default" split it warns degrades quality; GPT-2's own
  // regex is what a file that says nothing most likely needs.
  if (value == nullptr) return Status::ok_status();
  const std::string* name = value->as_string();
  if (name == nullptr) return invalid_argument(fmt::format("{}: tokenizer.ggml.pre is not a string", file.source()));
  if (*name == "default") return Status::ok_status();
  for (const PreTokenizerName& known : kPreTokenizers) {
    if (known.name == *name) {
      pre_tokenizer = known.kind;
      ignore_merges = known.ignore_merges;
      return Status::ok_status();
    }
  }
  return invalid_argument(
      fmt::format("{}: the pre-tokenizer '{}' (tokenizer.ggml.pre) is not supported; Slipway splits words as GPT-2 "
                  "(\"gpt-2\"), Llama 3 (\"llama-bpe\") and Qwen2 (\"qwen2\") do",
                  file.source(), *name));
}

Status Tokenizer::Data::read_special_tokens(const GgufFile& file) {
  const std::size_t size = texts.size();
  const bool sentencepiece = !byte_pairs;
  SLIPWAY_ASSIGN_OR_RETURN(bos, token_id(file, "tokenizer.ggml.bos_token_id", size, sentencepiece ? 1 : -1));
  SLIPWAY_ASSIGN_OR_RETURN(eos, token_id(file, "tokenizer.ggml.eos_token_id", size, sentencepiece ? 2 : -1));
  SLIPWAY_ASSIGN_OR_RETURN(unknown, token_id(file, "tokenizer.ggml.unknown_token_id", size, sentencepiece ? 0 : -1));
  SLIPWAY_ASSIGN_OR_RETURN(std::int32_t end_of_turn, token_id(file, "tokenizer.ggml.eot_token_id", size, -1));
  SLIPWAY_ASSIGN_OR_RETURN(std::int32_t end_of_message, token_id(file, "tokenizer.ggml.eom_token_id", size, -1));
  for (std::string_view key : {"tokenizer.ggml.padding_token_id", "tokenizer.ggml.separator_token_id"}) {
    SLIPWAY_RETURN_IF_ERROR(token_id(file, key, size, -1).status());
  }

  add_bos = sentencepiece || pre_tokenizer == PreTokenizer::kLlama3;
  add_space_prefix = sentencepiece;
  SLIPWAY_ASSIGN_OR_RETURN(auto bos_flag, flag(file, "tokenizer.ggml.add_bos_token"));
  SLIPWAY_ASSIGN_OR_RETURN(auto eos_flag, flag(file, "tokenizer.ggml.add_eos_token"));
  SLIPWAY_ASSIGN_OR_RETURN(auto space_flag, flag(file, "tokenizer.ggml.add_space_prefix"));
  add_bos = bos_flag.value_or(add_bos);
  add_eos = eos_flag.value_or(false);
  add_space_prefix = space_flag.value_or(add_space_prefix);
  if (add_bos && bos < 0) {
    return invalid_argument(
        fmt::format("{}: tokenizer.ggml.add_bos_token is set, but there is no BOS token (tokenizer.ggml.bos_token_id)",
                    file.source()));
  }
  if (add_eos && eos < 0) {
    return invalid_argument(
        fmt::format("{}: tokenizer.ggml.add_eos_token is set, but there is no EOS token (tokenizer.ggml.eos_token_id)",
                    file.source()));
  }

  ends_generation.assign(size, false);
  for (std::int32_t id : {eos, end_of_turn, end_of_message}) {
    if (id >= 0) ends_generation[static_cast<std::size_t>(id)] = true;
  }
  for (std::string_view text : kEndOfGenerationTexts) {
    std::int32_t id = token(text);
    if (id < 0) continue;
    ends_generation[static_cast<std::size_t>(id)] = true;
    attributes[static_cast<std::size_t>(id)] |= kAttributeControl;
  }
  return Status::ok_status();
}

// What each token renders as, and the tables encoding looks bytes and special tokens up in.
Status Tokenizer::Data::prepare_tables(const GgufFile& file) {
  const std::size_t size = texts.size();
  auto special = [&](std::size_t id) { return (attributes[id] & (kAttributeSpecial | kAttributeUserDefined)) != 0; };
  std::size_t special_bytes = 0;
  for (std::size_t id = 0; id < size; ++id) special_bytes += special(id) ? texts[id].size() : 0;
  if (special_bytes > kMaxSpecialTextBytes) {
    return invalid_argument(
        fmt::format("{}: the special tokens' texts take {} bytes, more than the {} any real vocabulary stays within",
                    file.source(), special_bytes, kMaxSpecialTextBytes));
  }
  rendered.resize(size);
  for (std::size_t id = 0; id < size; ++id) {
    const std::string& text = texts[id];
    std::string& bytes = rendered[id];
    if (special(id)) {
      bytes = text;
      if (!text.empty()) add_special(text, static_cast<std::int32_t>(id), !(attributes[id] & kAttributeSpecial));
    } else if (attributes[id] & kAttributeNormal) {
      if (byte_pairs) {
        bytes = bytes_of_characters(text);
      } else {
        for (std::size_t at = 0; at < text.size();) {
          if (text.compare(at, kSpaceMark.size(), kSpaceMark) == 0) {
            bytes += ' ';
            at += kSpaceMark.size();
          } else {
            bytes += text[at++];
          }
        }
      }
    } else if (attributes[id] & kAttributeByte) {
      bytes = std::string(1, static_cast<char>(byte_of_token(text)));
    }
  }
  // SentencePiece's fallback for a byte no piece covers: <0xXX>, else the byte alone, else <unk>.
  for (int byte = 0; byte < 256; ++byte) {
    std::int32_t id = token(fmt::format("<0x{:02X}>", byte));
    if (id < 0) id = token(std::string(1, static_cast<char>(byte)));
    byte_tokens[static_cast<std::size_t>(byte)] = id >= 0 ? id : unknown;
  }
  return Status::ok_status();
}

// ---------------------------------------------------------------------------------------------
// Encoding.

std::vector<Tokenizer::Data::Fragment> Tokenizer::Data::partition(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({0, text.size(), -1});
  // The special tokens the text holds at all, found with the trie in one pass; usually none.
  std::unordered_set<std::int32_t> found;
  for (std::size_t start = 0; start < text.size(); ++start) {
    std::uint32_t node = 0;
    for (std::size_t at = start; at < text.size(); ++at) {
      node = trie_child(node, static_cast<std::uint8_t>(text[at]));
      if (node == 0) break;
      std::int32_t token = parse_special ? trie[node].any : trie[node].always;
      if (token >= 0) found.insert(token);
    }
  }
  std::vector<std::int32_t> present(found.begin(), found.end());
  std::sort(present.begin(), present.end());
  // llama.cpp's order: the longest first (of equal lengths, the lowest id), each cutting its
  // occurrences out of the text left, left to right.
  std::stable_sort(present.begin(), present.end(), [&](std::int32_t a, std::int32_t b) {
    return texts[static_cast<std::size_t>(a)].size() > texts[static_cast<std::size_t>(b)].size();
  });
  for (std::int32_t token : present) {
    const std::string& special = texts[static_cast<std::size_t>(token)];
    std::vector<Fragment> cut;
    for (const Fragment& fragment : fragments) {
      std::size_t position = fragment.begin;
      while (fragment.token < 0) {
        std::size_t match = text.substr(0, fragment.end).find(special, position);
        if (match == std::string_view::npos) break;
        if (match > position) cut.push_back({position, match, -1});
        cut.push_back({match, match + special.size(), token});
        position = match + special.size();
      }
      if (fragment.token >= 0) {
        cut.push_back(fragment);
      } else if (position < fragment.end) {
        cut.push_back({position, fragment.end, -1});
      }
    }
    fragments = std::move(cut);
  }
  return fragments;
}

void Tokenizer::Data::encode_sentencepiece(std::string_view fragment, bool space_first,
                                           std::vector<std::int32_t>& out) const {
  std::string text;
  text.reserve(fragment.size() + kSpaceMark.size());
  if (space_first) text += kSpaceMark;
  for (char character : fragment) {
    if (character == ' ') {
      text += kSpaceMark;
    } else {
      text += character;
    }
  }
  struct Symbol {
    std::size_t start = 0, length = 0;
    std::int64_t previous = -1, next = -1;
  };
  std::vector<Symbol> symbols;
  for (std::size_t offset = 0; offset < text.size();) {
    std::size_t length = lenient_character_length(text, offset);
    auto index = static_cast<std::int64_t>(symbols.size());
    symbols.push_back({offset, length, index - 1, offset + length == text.size() ? -1 : index + 1});
    offset += length;
  }
  struct Candidate {
    float score;
    std::int64_t left, right;
    std::size_t length;
  };
  // The highest score first; of equal scores, the leftmost pair.
  auto after = [](const Candidate& a, const Candidate& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(after)> queue(after);
  auto consider = [&](std::int64_t left, std::int64_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& first = symbols[static_cast<std::size_t>(left)];
    std::size_t length = first.length + symbols[static_cast<std::size_t>(right)].length;
    std::int32_t joined = token(std::string_view(text).substr(first.start, length));
    if (joined >= 0) queue.push({scores[static_cast<std::size_t>(joined)], left, right, length});
  };
  for (std::size_t index = 1; index < symbols.size(); ++index) {
    consider(static_cast<std::int64_t>(index) - 1, static_cast<std::int64_t>(index));
  }
  while (!queue.empty()) {
    Candidate candidate = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<std::size_t>(candidate.left)];
    Symbol& right = symbols[static_cast<std::size_t>(candidate.right)];
    // A pair one of whose symbols has merged since is stale.
    if (left.length == 0 || right.length == 0 || left.length + right.length != candidate.length) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].previous = candidate.left;
    consider(left.previous, candidate.left);
    consider(candidate.left, left.next);
  }
  for (std::int64_t index = symbols.empty() ? -1 : 0; index >= 0;
       index = symbols[static_cast<std::size_t>(index)].next) {
    const Symbol& symbol = symbols[static_cast<std::size_t>(index)];
    std::string_view piece = std::string_view(text).substr(symbol.start, symbol.length);
    if (std::int32_t id = token(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char byte : piece) {
      std::int32_t id = byte_tokens[static_cast<std::uint8_t>(byte)];
      if (id >= 0) out.push_back(id);
    }
  }
}

void Tokenizer::Data::encode_byte_pairs(std::string_view fragment, std::vector<std::int32_t>& out) const {
  std::vector<Character> text = characters(fragment);
  std::vector<std::size_t> ends;
  split_words(pre_tokenizer, text, ends);
  std::size_t begin = 0;
  for (std::size_t end : ends) {
    std::size_t end_byte = end < text.size() ? text[end].offset : fragment.size();
    encode_word(fragment.substr(begin, end_byte - begin), out);
    begin = end_byte;
  }
}

void Tokenizer::Data::encode_word(std::string_view word, std::vector<std::int32_t>& out) const {
  const ByteCharacters& characters = byte_characters();
  if (ignore_merges) {
    std::string mapped;
    for (char byte : word) mapped += characters.text[static_cast<std::uint8_t>(byte)];
    if (std::int32_t id = token(mapped); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  struct Symbol {
    std::int32_t piece;
    std::size_t start, length;
    std::int64_t previous, next;
  };
  std::vector<Symbol> symbols(word.size());
  for (std::size_t index = 0; index < word.size(); ++index) {
    auto at = static_cast<std::int64_t>(index);
    symbols[index] = {byte_pieces[static_cast<std::uint8_t>(word[index])], index, 1, at - 1,
                      index + 1 == word.size() ? -1 : at + 1};
  }
  struct Candidate {
    std::int32_t rank, result;
    std::int64_t left, right;
    std::size_t length;
  };
  // The lowest rank first; of equal ranks, the leftmost pair.
  auto after = [](const Candidate& a, const Candidate& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(after)> queue(after);
  auto consider = [&](std::int64_t left, std::int64_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& first = symbols[static_cast<std::size_t>(left)];
    const Symbol& second = symbols[static_cast<std::size_t>(right)];
    if (first.piece < 0 || second.piece < 0) return;
    if (const Merge* found = merge(first.piece, second.piece)) {
      queue.push({found->rank, found->result, left, right, first.length + second.length});
    }
  };
  for (std::size_t index = 1; index < symbols.size(); ++index) {
    consider(static_cast<std::int64_t>(index) - 1, static_cast<std::int64_t>(index));
  }
  while (!queue.empty()) {
    Candidate candidate = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<std::size_t>(candidate.left)];
    Symbol& right = symbols[static_cast<std::size_t>(candidate.right)];
    if (left.length == 0 || right.length == 0 || left.length + right.length != candidate.length) continue;
    left.piece = candidate.result;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].previous = candidate.left;
    consider(left.previous, candidate.left);
    consider(candidate.left, left.next);
  }
  const auto vocabulary = static_cast<std::int32_t>(texts.size());
  for (std::int64_t index = symbols.empty() ? -1 : 0; index >= 0;
       index = symbols[static_cast<std::size_t>(index)].next) {
    const Symbol& symbol = symbols[static_cast<std::size_t>(index)];
    if (symbol.piece >= 0 && symbol.piece < vocabulary) {
      out.push_back(symbol.piece);
      continue;
    }
    // No token: llama.cpp looks each byte of the mapped characters up alone, which finds the
    // printable ASCII ones.
    for (std::size_t at = symbol.start; at < symbol.start + symbol.length; ++at) {
      for (char mapped : characters.text[static_cast<std::uint8_t>(word[at])]) {
        if (std::int32_t id = token(std::string_view(&mapped, 1)); id >= 0) out.push_back(id);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------

Result<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  const GgufValue* model = file.find("tokenizer.ggml.model");
  if (model == nullptr) {
    return invalid_argument(
        fmt::format("{}: the file has no tokenizer (tokenizer.ggml.model is missing)", file.source()));
  }
  if (model->as_string() == nullptr) {
    return invalid_argument(fmt::format("{}: tokenizer.ggml.model is a {}, not a string", file.source(),
                                        gguf_value_type_name(model->type())));
  }
  auto data = std::make_shared<Data>();
  data->model = *model->as_string();
  if (data->model != "llama" && data->model != "gpt2") {
    return invalid_argument(
        fmt::format("{}: the tokenizer model '{}' (tokenizer.ggml.model) is not supported; Slipway reads \"llama\" "
                    "(SentencePiece) and \"gpt2\" (byte-level BPE)",
                    file.source(), data->model));
  }
  data->byte_pairs = data->model == "gpt2";
  SLIPWAY_RETURN_IF_ERROR(data->read_vocabulary(file));
  if (data->byte_pairs) {
    SLIPWAY_RETURN_IF_ERROR(data->read_pre_tokenizer(file));
    SLIPWAY_RETURN_IF_ERROR(data->read_merges(file));
  }
  SLIPWAY_RETURN_IF_ERROR(data->read_special_tokens(file));
  SLIPWAY_RETURN_IF_ERROR(data->prepare_tables(file));
  Tokenizer tokenizer;
  tokenizer.data_ = std::move(data);
  return tokenizer;
}

const Tokenizer::Data& Tokenizer::data() const {
  static const Data kEmpty;
  return data_ ? *data_ : kEmpty;
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const Data& data = this->data();
  std::vector<std::int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_special && data.add_bos) out.push_back(data.bos);
  // SentencePiece puts a space before text that starts the input or follows a special token.
  bool after_special = true;
  for (const Data::Fragment& fragment : data.partition(text, parse_special)) {
    if (fragment.token >= 0) {
      out.push_back(fragment.token);
      after_special = true;
      continue;
    }
    std::string_view part = text.substr(fragment.begin, fragment.end - fragment.begin);
    if (data.byte_pairs) {
      data.encode_byte_pairs(part, out);
    } else {
      data.encode_sentencepiece(part, data.add_space_prefix && after_special, out);
    }
    after_special = false;
  }
  if (add_special && data.add_eos) out.push_back(data.eos);
  return out;
}

std::string Tokenizer::piece(std::int32_t token, bool render_special) const {
  const Data& data = this->data();
  if (token < 0 || static_cast<std::size_t>(token) >= data.texts.size()) return {};
  if (!render_special && (data.attributes[static_cast<std::size_t>(token)] & kAttributeSpecial)) return {};
  return data.rendered[static_cast<std::size_t>(token)];
}

std::string Tokenizer::decode(std::span<const std::int32_t> tokens, bool render_special) const {
  std::string text;
  bool strip_space = data().add_space_prefix;
  std::size_t first = 0;
  if (!tokens.empty() && tokens[0] == data().bos && data().bos >= 0 && piece(tokens[0], render_special).empty()) {
    first = 1;
  }
  for (std::size_t index = 0; index < tokens.size(); ++index) {
    if (tokens[index] < 0 || static_cast<std::size_t>(tokens[index]) >= size()) continue;
    std::string next = piece(tokens[index], render_special);
    if (strip_space && index >= first) {
      if (!next.empty() && next[0] == ' ') next.erase(0, 1);
      strip_space = false;
    }
    text += next;
  }
  return text;
}

std::size_t Tokenizer::size() const { return data().texts.size(); }
std::string_view Tokenizer::model() const { return data().model; }
std::int32_t Tokenizer::bos() const { return data().bos; }
std::int32_t Tokenizer::eos() const { return data().eos; }
bool Tokenizer::adds_bos() const { return data().add_bos; }

bool Tokenizer::ends_generation(std::int32_t token) const {
  return token >= 0 && static_cast<std::size_t>(token) < data().ends_generation.size() &&
         data().ends_generation[static_cast<std::size_t>(token)];
}

std::int32_t Tokenizer::find(std::string_view text) const { return data().token(text); }

}  // namespace slipway::llm
