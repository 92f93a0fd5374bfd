#include "slipway/core.h"

namespace slipway {

std::size_t utf8_character_length(std::string_view text, std::size_t at) {
  auto byte = [&](std::size_t i) { return static_cast<unsigned char>(text[at + i]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80) return 1;
  const std::size_t length = lead >= 0xC2 && lead <= 0xDF   ? 2
                             : lead >= 0xE0 && lead <= 0xEF ? 3
                             : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                            : 0;
  if (length == 0 || at + length > text.size()) return 0;
  unsigned char low = 0x80, high = 0xBF;  // the second byte's range
  if (lead == 0xE0) low = 0xA0;           // no overlong three-byte forms
  if (lead == 0xED) high = 0x9F;          // no surrogates
  if (lead == 0xF0) low = 0x90;           // no overlong four-byte forms
  if (lead == 0xF4) high = 0x8F;          // nothing past U+10FFFF
  if (byte(1) < low || byte(1) > high) return 0;
  for (std::size_t i = 2; i < length; ++i) {
    if ((byte(i) & 0xC0) != 0x80) return 0;
  }
  return length;
}

bool is_valid_utf8(std::string_view text) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t length = utf8_character_length(text, at);
    if (length == 0) return false;
    at += length;
  }
  return true;
}

}  // namespace slipway
