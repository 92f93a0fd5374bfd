// Unicode for the tokenizers: code point classes as llama.cpp's pre-tokenizers see them (\p{L},
// \p{N}, \s), text split into characters, and the pre-tokenizers' word splitting. Private to llm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace slipway::llm {

inline constexpr std::uint32_t kInvalidCodePoint = 0xFFFFFFFF;

enum class CharClass : std::uint8_t { kOther, kLetter, kNumber, kSpace, kNone /* past the fragment */ };

// One character of a text: where it starts, its code point (kInvalidCodePoint for a byte that
// starts no character) and its class.
struct Character {
  std::size_t offset = 0;
  std::uint32_t code_point = 0;
  CharClass kind = CharClass::kOther;
};

// The length of the UTF-8 character at `offset`: its lead byte's count when the continuation
// bytes follow (llama.cpp's rule: overlong forms and surrogates pass), else 1, a byte alone.
std::size_t lenient_character_length(std::string_view text, std::size_t offset);
// The text's characters: code points, and kInvalidCodePoint for each byte that starts none.
std::vector<Character> characters(std::string_view text);
void append_utf8(std::string& out, std::uint32_t code_point);

// The BPE pre-tokenizers llama.cpp writes by hand for the regexes of GPT-2, Llama 3 and Qwen2.
enum class PreTokenizer { kGpt2, kLlama3, kQwen2 };
// Appends to `ends` the index one past each word's last character.
void split_words(PreTokenizer pre_tokenizer, const std::vector<Character>& text, std::vector<std::size_t>& ends);

}  // namespace slipway::llm
