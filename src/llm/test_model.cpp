// slipway llm make-test-model: a random-weight Llama in GGUF with a small working tokenizer.
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "slipway/kernels.h"
#include "slipway/llm.h"

namespace slipway::llm {
namespace {

constexpr std::string_view kSpace = "\xe2\x96\x81";  // U+2581, SentencePiece's word boundary

// SentencePiece-style pieces: the control tokens, the 256 byte tokens, every printable ASCII
// character alone and after a word boundary, common English words and endings, then two- and
// three-letter filler pieces up to `vocabulary`. Scores fall with the order, so merges prefer
// the earlier (more common) pieces.
struct Vocabulary {
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<std::int32_t> types;  // 1 normal, 2 unknown, 3 control, 6 byte
};

Result<Vocabulary> test_vocabulary(std::size_t size) {
  Vocabulary vocabulary;
  std::set<std::string> seen;
  auto add = [&](const std::string& piece, std::int32_t type) {
    if (vocabulary.tokens.size() >= size || !seen.insert(piece).second) return;
    vocabulary.tokens.push_back(piece);
    vocabulary.scores.push_back(type == 1 ? -static_cast<float>(vocabulary.tokens.size()) : 0.0f);
    vocabulary.types.push_back(type);
  };
  add("<unk>", 2);
  add("<s>", 3);
  add("</s>", 3);
  for (int byte = 0; byte < 256; ++byte) add(fmt::format("<0x{:02X}>", byte), 6);
  const std::size_t minimum = vocabulary.tokens.size() + 1;
  if (size < minimum + 100) {
    return invalid_argument(
        fmt::format("a test model's vocabulary needs at least {} tokens (the control and byte "
                    "tokens, and some pieces)",
                    minimum + 100));
  }
  add(std::string(kSpace), 1);
  for (const char* word :
       {"the", "of",    "and",  "to",    "in",    "is",    "that",  "it", "for", "on", "with", "as",
        "was", "model", "data", "train", "serve", "hello", "world", "a",  "an",  "be", "this", "by"}) {
    add(std::string(kSpace) + word, 1);
  }
  for (const char* ending : {"ing", "ed", "er", "es", "ly", "th", "he", "in", "an", "re", "on", "at", "en", "nd"}) {
    add(ending, 1);
  }
  for (char c = 33; c < 127; ++c) {
    add(std::string(1, c), 1);
    add(std::string(kSpace) + c, 1);
  }
  for (char first = 'a'; first <= 'z'; ++first) {
    for (char second = 'a'; second <= 'z'; ++second) add(std::string{first, second}, 1);
  }
  for (char first = 'a'; first <= 'z' && vocabulary.tokens.size() < size; ++first) {
    for (char second = 'a'; second <= 'z'; ++second) {
      for (char third = 'a'; third <= 'z'; ++third) add(std::string(kSpace) + first + second + third, 1);
    }
  }
  for (std::size_t filler = 0; vocabulary.tokens.size() < size; ++filler) add(fmt::format("<filler{}>", filler), 1);
  return vocabulary;
}

// Byte-level BPE pieces: GPT-2's 256 byte characters (in byte order), the pieces merges build
// (each word assembled left to right, after a space "Ġ" first, so that " the" becomes one token,
// then alone), filler up to the vocabulary, and the special tokens last (as GPT-2's
// <|endoftext|> and Llama 3's <|begin_of_text|>, ... are).
struct BytePairVocabulary {
  std::vector<std::string> tokens;
  std::vector<std::int32_t> types;  // 1 normal, 3 control
  std::vector<std::string> merges;
};

Result<BytePairVocabulary> byte_pair_vocabulary(std::size_t size, const std::vector<std::string>& specials) {
  // GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others for
  // U+0100 onwards.
  std::array<std::string, 256> characters;
  for (int byte = 0, extra = 0x100; byte < 256; ++byte) {
    bool printable = (byte >= 0x21 && byte <= 0x7E) || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
    int code_point = printable ? byte : extra++;
    characters[static_cast<std::size_t>(byte)] =
        code_point < 0x80
            ? std::string(1, static_cast<char>(code_point))
            : std::string{static_cast<char>(0xC0 | (code_point >> 6)), static_cast<char>(0x80 | (code_point & 0x3F))};
  }
  BytePairVocabulary vocabulary;
  std::set<std::string> seen;
  auto add = [&](const std::string& piece, std::int32_t type) {
    if (seen.insert(piece).second) {
      vocabulary.tokens.push_back(piece);
      vocabulary.types.push_back(type);
    }
  };
  for (const std::string& character : characters) add(character, 1);
  auto build = [&](const std::string& word) {
    std::string piece;
    for (unsigned char byte : word) {
      const std::string& next = characters[byte];
      if (!piece.empty()) {
        std::string merge = piece + " " + next;
        if (seen.count(piece + next) == 0) vocabulary.merges.push_back(merge);
        add(piece + next, 1);
      }
      piece += next;
    }
  };
  // Common English words, and a few accented, Cyrillic and Japanese ones whose merges join
  // pieces of UTF-8 characters, as GPT-2's do.
  std::vector<std::string> words;
  std::istringstream list(
      "the of and to in is that it for on with as was model data train serve hello world a an be this by "
      "caf\xc3\xa9 \xc3\xbc"
      "ber \xd0\xbc\xd0\xb8\xd1\x80 \xe6\x97\xa5\xe6\x9c\xac");
  for (std::string word; list >> word;) words.push_back(word);
  for (const std::string& word : words) build(" " + word);
  for (const std::string& word : words) build(word);
  for (const char* ending : {"ing", "ed", "er", "es", "ly", "'s", "..."}) build(ending);
  const std::size_t minimum = vocabulary.tokens.size() + specials.size();
  if (size < minimum) {
    return invalid_argument(
        fmt::format("a test model's byte-level BPE vocabulary needs at least {} tokens (the byte characters, the "
                    "merged pieces and the special tokens)",
                    minimum));
  }
  for (std::size_t filler = 0; vocabulary.tokens.size() + specials.size() < size; ++filler) {
    add(fmt::format("<filler{}>", filler), 1);
  }
  for (const std::string& special : specials) add(special, 3);
  return vocabulary;
}

// Llama 3 Instruct's chat template (meta-llama/Meta-Llama-3-8B-Instruct).
constexpr std::string_view kLlama3ChatTemplate =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}";

// The tokenizer.* keys for `shape.tokenizer`.
Status set_tokenizer(const TestModelShape& shape, GgufWriter& writer) {
  if (shape.tokenizer == "llama") {
    SLIPWAY_ASSIGN_OR_RETURN(Vocabulary vocabulary, test_vocabulary(shape.vocabulary));
    writer.set("tokenizer.ggml.model", GgufValue::string("llama"));
    writer.set("tokenizer.ggml.tokens", GgufValue::strings(vocabulary.tokens));
    writer.set("tokenizer.ggml.scores", GgufValue::f32s(vocabulary.scores));
    writer.set("tokenizer.ggml.token_type", GgufValue::i32s(vocabulary.types));
    writer.set("tokenizer.ggml.unknown_token_id", GgufValue::u32(0));
    writer.set("tokenizer.ggml.bos_token_id", GgufValue::u32(1));
    writer.set("tokenizer.ggml.eos_token_id", GgufValue::u32(2));
    writer.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(true));
    writer.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(false));
    return Status::ok_status();
  }
  const bool llama3 = shape.tokenizer == "llama3";
  if (!llama3 && shape.tokenizer != "gpt2") {
    return invalid_argument(
        fmt::format("a test model's tokenizer is \"llama\", \"gpt2\" or \"llama3\", not \"{}\"", shape.tokenizer));
  }
  const std::vector<std::string> specials =
      llama3 ? std::vector<std::string>{"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                        "<|end_header_id|>", "<|eot_id|>"}
             : std::vector<std::string>{"<|endoftext|>"};
  SLIPWAY_ASSIGN_OR_RETURN(BytePairVocabulary vocabulary, byte_pair_vocabulary(shape.vocabulary, specials));
  const auto first_special = static_cast<std::uint32_t>(vocabulary.tokens.size() - specials.size());
  writer.set("tokenizer.ggml.model", GgufValue::string("gpt2"));
  // "gpt-2" and "llama-bpe" are the names llama.cpp gives GPT-2's and Llama 3's word splits.
  writer.set("tokenizer.ggml.pre", GgufValue::string(llama3 ? "llama-bpe" : "gpt-2"));
  writer.set("tokenizer.ggml.tokens", GgufValue::strings(vocabulary.tokens));
  writer.set("tokenizer.ggml.token_type", GgufValue::i32s(vocabulary.types));
  writer.set("tokenizer.ggml.merges", GgufValue::strings(vocabulary.merges));
  writer.set("tokenizer.ggml.bos_token_id", GgufValue::u32(first_special));
  writer.set("tokenizer.ggml.eos_token_id", GgufValue::u32(first_special + (llama3 ? 1 : 0)));
  writer.set("tokenizer.ggml.add_bos_token", GgufValue::boolean(llama3));
  writer.set("tokenizer.ggml.add_eos_token", GgufValue::boolean(false));
  if (llama3) writer.set("tokenizer.chat_template", GgufValue::string(std::string(kLlama3ChatTemplate)));
  return Status::ok_status();
}

}  // namespace

Status write_test_model(const TestModelShape& shape, TensorType type, std::uint64_t seed, const std::string& path) {
  if (!supported_weight_type(type))
    return invalid_argument("make-test-model writes F32, F16, BF16, Q8_0, Q4_0 or Q4_K");
  if (shape.embedding == 0 || shape.layers == 0 || shape.heads == 0 || shape.kv_heads == 0 || shape.feed_forward == 0 ||
      shape.context == 0) {
    return invalid_argument("every dimension of a test model must be at least 1");
  }
  if (shape.embedding % shape.heads != 0 || shape.heads % shape.kv_heads != 0 ||
      (shape.embedding / shape.heads) % 2 != 0) {
    return invalid_argument(
        "the width must be a multiple of the heads, with an even head size, and the key/value "
        "heads must divide the heads");
  }
  const TensorTypeInfo* info = tensor_type_info(type);
  if (shape.embedding % info->block_elements != 0 || shape.feed_forward % info->block_elements != 0) {
    return invalid_argument(
        fmt::format("{} stores rows in blocks of {} values: the width ({}) and the feed-forward "
                    "size ({}) must be multiples of it",
                    info->name, info->block_elements, shape.embedding, shape.feed_forward));
  }
  const std::size_t head_dim = shape.embedding / shape.heads, kv_width = shape.kv_heads * head_dim;
  GgufWriter writer;
  writer.set("general.architecture", GgufValue::string("llama"));
  writer.set("general.name", GgufValue::string("slipway test model"));
  writer.set("general.file_type", GgufValue::u32(gguf_file_type(type)));
  if (info->block_elements > 1) writer.set("general.quantization_version", GgufValue::u32(2));
  writer.set("llama.context_length", GgufValue::u32(static_cast<std::uint32_t>(shape.context)));
  writer.set("llama.embedding_length", GgufValue::u32(static_cast<std::uint32_t>(shape.embedding)));
  writer.set("llama.block_count", GgufValue::u32(static_cast<std::uint32_t>(shape.layers)));
  writer.set("llama.feed_forward_length", GgufValue::u32(static_cast<std::uint32_t>(shape.feed_forward)));
  writer.set("llama.rope.dimension_count", GgufValue::u32(static_cast<std::uint32_t>(head_dim)));
  writer.set("llama.attention.head_count", GgufValue::u32(static_cast<std::uint32_t>(shape.heads)));
  writer.set("llama.attention.head_count_kv", GgufValue::u32(static_cast<std::uint32_t>(shape.kv_heads)));
  writer.set("llama.attention.layer_norm_rms_epsilon", GgufValue::f32(1e-5f));
  writer.set("llama.rope.freq_base", GgufValue::f32(shape.rope_base));
  writer.set("llama.vocab_size", GgufValue::u32(static_cast<std::uint32_t>(shape.vocabulary)));
  SLIPWAY_RETURN_IF_ERROR(set_tokenizer(shape, writer));

  std::mt19937_64 random(seed);
  // Matrices scaled by 1 / sqrt(inputs), so activations keep about unit size through the layers.
  auto matrix = [&](const std::string& name, std::size_t rows, std::size_t columns, float scale) -> Status {
    std::normal_distribution<float> normal(0.0f, scale / std::sqrt(static_cast<float>(columns)));
    std::vector<float> values(rows * columns);
    for (float& value : values) value = normal(random);
    SLIPWAY_ASSIGN_OR_RETURN(auto bytes, encode_tensor(values, type));
    return writer.add_tensor(name, {columns, rows}, type, std::move(bytes));
  };
  auto norm = [&](const std::string& name) -> Status {
    std::normal_distribution<float> normal(1.0f, 0.1f);
    std::vector<float> values(shape.embedding);
    for (float& value : values) value = normal(random);
    std::vector<std::byte> bytes(values.size() * sizeof(float));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return writer.add_tensor(name, {shape.embedding}, TensorType::kF32, std::move(bytes));
  };
  const auto embedding = static_cast<float>(std::sqrt(static_cast<double>(shape.embedding)));
  SLIPWAY_RETURN_IF_ERROR(matrix("token_embd.weight", shape.vocabulary, shape.embedding, embedding));
  for (std::size_t layer = 0; layer < shape.layers; ++layer) {
    std::string prefix = fmt::format("blk.{}.", layer);
    SLIPWAY_RETURN_IF_ERROR(norm(prefix + "attn_norm.weight"));
    SLIPWAY_RETURN_IF_ERROR(matrix(prefix + "attn_q.weight", shape.embedding, shape.embedding, 1.0f));
    SLIPWAY_RETURN_IF_ERROR(matrix(prefix + "attn_k.weight", kv_width, shape.embedding, 1.0f));
    SLIPWAY_RETURN_IF_ERROR(matrix(prefix + "attn_v.weight", kv_width, shape.embedding, 1.0f));
    SLIPWAY_RETURN_IF_ERROR(matrix(prefix + "attn_output.weight", shape.embedding, shape.embedding, 1.0f));
    SLIPWAY_RETURN_IF_ERROR(norm(prefix + "ffn_norm.weight"));
    SLIPWAY_RETURN_IF_ERROR(matrix(prefix + "ffn_gate.weight", shape.feed_forward, shape.embedding, 1.0f));
    SLIPWAY_RETURN_IF_ERROR(matrix(prefix + "ffn_up.weight", shape.feed_forward, shape.embedding, 1.0f));
    SLIPWAY_RETURN_IF_ERROR(matrix(prefix + "ffn_down.weight", shape.embedding, shape.feed_forward, 1.0f));
  }
  SLIPWAY_RETURN_IF_ERROR(norm("output_norm.weight"));
  if (!shape.tied_output) {
    SLIPWAY_RETURN_IF_ERROR(matrix("output.weight", shape.vocabulary, shape.embedding, 1.0f));
  }
  return writer.write(path);
}

}  // namespace slipway::llm
