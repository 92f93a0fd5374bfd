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

#include "slipway/llm.h"

namespace slipway::llm {
namespace {

constexpr std::string_view kSpaceMark = "\xe2\x96\x81";  // U+2581, SentencePiece's word boundary

// A bound on the special tokens' texts together, which the trie that finds them holds: real
// vocabularies have kilobytes of them (Llama 3's 256 reserved tokens are 8 KiB).
constexpr std::size_t kMaxSpecialTextBytes = std::size_t{1} << 20;

// ---------------------------------------------------------------------------------------------
// Code point classes, for the pre-tokenizers' \p{L}, \p{N} and \s.

// Inclusive [first, last] pairs, sorted: the runs of general category L* (letters) and N*
// (numbers) in Unicode 14, a run going on across unassigned code points (which keeps the tables
// short), as Python 3.11 prints them with runs("L") and runs("N"):
//   import unicodedata as u
//   def runs(k):
//     out, first, last = [], None, None
//     for c in range(0x110000):
//       cat = u.category(chr(c))
//       if cat[0] == k: first, last = c if first is None else first, c
//       elif cat != "Cn" and first is not None: out, first = out + [first, last], None
//     return out + ([first, last] if first is not None else [])
// On every assigned code point these agree with llama.cpp's tables (checked code point by code
// point); an unassigned one inside a run counts as a letter or number here and as neither there.
constexpr std::uint32_t kLetterRanges[] = {
    0x41,    0x5A,    0x61,    0x7A,    0xAA,    0xAA,    0xB5,    0xB5,    0xBA,    0xBA,    0xC0,    0xD6,    0xD8,
    0xF6,    0xF8,    0x2C1,   0x2C6,   0x2D1,   0x2E0,   0x2E4,   0x2EC,   0x2EC,   0x2EE,   0x2EE,   0x370,   0x374,
    0x376,   0x37D,   0x37F,   0x37F,   0x386,   0x386,   0x388,   0x3F5,   0x3F7,   0x481,   0x48A,   0x559,   0x560,
    0x588,   0x5D0,   0x5F2,   0x620,   0x64A,   0x66E,   0x66F,   0x671,   0x6D3,   0x6D5,   0x6D5,   0x6E5,   0x6E6,
    0x6EE,   0x6EF,   0x6FA,   0x6FC,   0x6FF,   0x6FF,   0x710,   0x710,   0x712,   0x72F,   0x74D,   0x7A5,   0x7B1,
    0x7B1,   0x7CA,   0x7EA,   0x7F4,   0x7F5,   0x7FA,   0x7FA,   0x800,   0x815,   0x81A,   0x81A,   0x824,   0x824,
    0x828,   0x828,   0x840,   0x858,   0x860,   0x887,   0x889,   0x88E,   0x8A0,   0x8C9,   0x904,   0x939,   0x93D,
    0x93D,   0x950,   0x950,   0x958,   0x961,   0x971,   0x980,   0x985,   0x9B9,   0x9BD,   0x9BD,   0x9CE,   0x9CE,
    0x9DC,   0x9E1,   0x9F0,   0x9F1,   0x9FC,   0x9FC,   0xA05,   0xA39,   0xA59,   0xA5E,   0xA72,   0xA74,   0xA85,
    0xAB9,   0xABD,   0xABD,   0xAD0,   0xAE1,   0xAF9,   0xAF9,   0xB05,   0xB39,   0xB3D,   0xB3D,   0xB5C,   0xB61,
    0xB71,   0xB71,   0xB83,   0xBB9,   0xBD0,   0xBD0,   0xC05,   0xC39,   0xC3D,   0xC3D,   0xC58,   0xC61,   0xC80,
    0xC80,   0xC85,   0xCB9,   0xCBD,   0xCBD,   0xCDD,   0xCE1,   0xCF1,   0xCF2,   0xD04,   0xD3A,   0xD3D,   0xD3D,
    0xD4E,   0xD4E,   0xD54,   0xD56,   0xD5F,   0xD61,   0xD7A,   0xD7F,   0xD85,   0xDC6,   0xE01,   0xE30,   0xE32,
    0xE33,   0xE40,   0xE46,   0xE81,   0xEB0,   0xEB2,   0xEB3,   0xEBD,   0xEC6,   0xEDC,   0xF00,   0xF40,   0xF6C,
    0xF88,   0xF8C,   0x1000,  0x102A,  0x103F,  0x103F,  0x1050,  0x1055,  0x105A,  0x105D,  0x1061,  0x1061,  0x1065,
    0x1066,  0x106E,  0x1070,  0x1075,  0x1081,  0x108E,  0x108E,  0x10A0,  0x10FA,  0x10FC,  0x135A,  0x1380,  0x138F,
    0x13A0,  0x13FD,  0x1401,  0x166C,  0x166F,  0x167F,  0x1681,  0x169A,  0x16A0,  0x16EA,  0x16F1,  0x1711,  0x171F,
    0x1731,  0x1740,  0x1751,  0x1760,  0x1770,  0x1780,  0x17B3,  0x17D7,  0x17D7,  0x17DC,  0x17DC,  0x1820,  0x1884,
    0x1887,  0x18A8,  0x18AA,  0x191E,  0x1950,  0x19C9,  0x1A00,  0x1A16,  0x1A20,  0x1A54,  0x1AA7,  0x1AA7,  0x1B05,
    0x1B33,  0x1B45,  0x1B4C,  0x1B83,  0x1BA0,  0x1BAE,  0x1BAF,  0x1BBA,  0x1BE5,  0x1C00,  0x1C23,  0x1C4D,  0x1C4F,
    0x1C5A,  0x1C7D,  0x1C80,  0x1CBF,  0x1CE9,  0x1CEC,  0x1CEE,  0x1CF3,  0x1CF5,  0x1CF6,  0x1CFA,  0x1DBF,  0x1E00,
    0x1FBC,  0x1FBE,  0x1FBE,  0x1FC2,  0x1FCC,  0x1FD0,  0x1FDB,  0x1FE0,  0x1FEC,  0x1FF2,  0x1FFC,  0x2071,  0x2071,
    0x207F,  0x207F,  0x2090,  0x209C,  0x2102,  0x2102,  0x2107,  0x2107,  0x210A,  0x2113,  0x2115,  0x2115,  0x2119,
    0x211D,  0x2124,  0x2124,  0x2126,  0x2126,  0x2128,  0x2128,  0x212A,  0x212D,  0x212F,  0x2139,  0x213C,  0x213F,
    0x2145,  0x2149,  0x214E,  0x214E,  0x2183,  0x2184,  0x2C00,  0x2CE4,  0x2CEB,  0x2CEE,  0x2CF2,  0x2CF3,  0x2D00,
    0x2D6F,  0x2D80,  0x2DDE,  0x2E2F,  0x2E2F,  0x3005,  0x3006,  0x3031,  0x3035,  0x303B,  0x303C,  0x3041,  0x3096,
    0x309D,  0x309F,  0x30A1,  0x30FA,  0x30FC,  0x318E,  0x31A0,  0x31BF,  0x31F0,  0x31FF,  0x3400,  0x4DBF,  0x4E00,
    0xA48C,  0xA4D0,  0xA4FD,  0xA500,  0xA60C,  0xA610,  0xA61F,  0xA62A,  0xA66E,  0xA67F,  0xA69D,  0xA6A0,  0xA6E5,
    0xA717,  0xA71F,  0xA722,  0xA788,  0xA78B,  0xA801,  0xA803,  0xA805,  0xA807,  0xA80A,  0xA80C,  0xA822,  0xA840,
    0xA873,  0xA882,  0xA8B3,  0xA8F2,  0xA8F7,  0xA8FB,  0xA8FB,  0xA8FD,  0xA8FE,  0xA90A,  0xA925,  0xA930,  0xA946,
    0xA960,  0xA97C,  0xA984,  0xA9B2,  0xA9CF,  0xA9CF,  0xA9E0,  0xA9E4,  0xA9E6,  0xA9EF,  0xA9FA,  0xAA28,  0xAA40,
    0xAA42,  0xAA44,  0xAA4B,  0xAA60,  0xAA76,  0xAA7A,  0xAA7A,  0xAA7E,  0xAAAF,  0xAAB1,  0xAAB1,  0xAAB5,  0xAAB6,
    0xAAB9,  0xAABD,  0xAAC0,  0xAAC0,  0xAAC2,  0xAADD,  0xAAE0,  0xAAEA,  0xAAF2,  0xAAF4,  0xAB01,  0xAB5A,  0xAB5C,
    0xAB69,  0xAB70,  0xABE2,  0xAC00,  0xD7FB,  0xF900,  0xFB1D,  0xFB1F,  0xFB28,  0xFB2A,  0xFBB1,  0xFBD3,  0xFD3D,
    0xFD50,  0xFDC7,  0xFDF0,  0xFDFB,  0xFE70,  0xFEFC,  0xFF21,  0xFF3A,  0xFF41,  0xFF5A,  0xFF66,  0xFFDC,  0x10000,
    0x100FA, 0x10280, 0x102D0, 0x10300, 0x1031F, 0x1032D, 0x10340, 0x10342, 0x10349, 0x10350, 0x10375, 0x10380, 0x1039D,
    0x103A0, 0x103CF, 0x10400, 0x1049D, 0x104B0, 0x10563, 0x10570, 0x10855, 0x10860, 0x10876, 0x10880, 0x1089E, 0x108E0,
    0x108F5, 0x10900, 0x10915, 0x10920, 0x10939, 0x10980, 0x109B7, 0x109BE, 0x109BF, 0x10A00, 0x10A00, 0x10A10, 0x10A35,
    0x10A60, 0x10A7C, 0x10A80, 0x10A9C, 0x10AC0, 0x10AC7, 0x10AC9, 0x10AE4, 0x10B00, 0x10B35, 0x10B40, 0x10B55, 0x10B60,
    0x10B72, 0x10B80, 0x10B91, 0x10C00, 0x10CF2, 0x10D00, 0x10D23, 0x10E80, 0x10EA9, 0x10EB0, 0x10F1C, 0x10F27, 0x10F45,
    0x10F70, 0x10F81, 0x10FB0, 0x10FC4, 0x10FE0, 0x10FF6, 0x11003, 0x11037, 0x11071, 0x11072, 0x11075, 0x11075, 0x11083,
    0x110AF, 0x110D0, 0x110E8, 0x11103, 0x11126, 0x11144, 0x11144, 0x11147, 0x11172, 0x11176, 0x11176, 0x11183, 0x111B2,
    0x111C1, 0x111C4, 0x111DA, 0x111DA, 0x111DC, 0x111DC, 0x11200, 0x1122B, 0x11280, 0x112A8, 0x112B0, 0x112DE, 0x11305,
    0x11339, 0x1133D, 0x1133D, 0x11350, 0x11350, 0x1135D, 0x11361, 0x11400, 0x11434, 0x11447, 0x1144A, 0x1145F, 0x114AF,
    0x114C4, 0x114C5, 0x114C7, 0x114C7, 0x11580, 0x115AE, 0x115D8, 0x115DB, 0x11600, 0x1162F, 0x11644, 0x11644, 0x11680,
    0x116AA, 0x116B8, 0x116B8, 0x11700, 0x1171A, 0x11740, 0x1182B, 0x118A0, 0x118DF, 0x118FF, 0x1192F, 0x1193F, 0x1193F,
    0x11941, 0x11941, 0x119A0, 0x119D0, 0x119E1, 0x119E1, 0x119E3, 0x119E3, 0x11A00, 0x11A00, 0x11A0B, 0x11A32, 0x11A3A,
    0x11A3A, 0x11A50, 0x11A50, 0x11A5C, 0x11A89, 0x11A9D, 0x11A9D, 0x11AB0, 0x11C2E, 0x11C40, 0x11C40, 0x11C72, 0x11C8F,
    0x11D00, 0x11D30, 0x11D46, 0x11D46, 0x11D60, 0x11D89, 0x11D98, 0x11D98, 0x11EE0, 0x11EF2, 0x11FB0, 0x11FB0, 0x12000,
    0x12399, 0x12480, 0x12FF0, 0x13000, 0x1342E, 0x14400, 0x16A5E, 0x16A70, 0x16ABE, 0x16AD0, 0x16AED, 0x16B00, 0x16B2F,
    0x16B40, 0x16B43, 0x16B63, 0x16E7F, 0x16F00, 0x16F4A, 0x16F50, 0x16F50, 0x16F93, 0x16FE1, 0x16FE3, 0x16FE3, 0x17000,
    0x1BC99, 0x1D400, 0x1D6C0, 0x1D6C2, 0x1D6DA, 0x1D6DC, 0x1D6FA, 0x1D6FC, 0x1D714, 0x1D716, 0x1D734, 0x1D736, 0x1D74E,
    0x1D750, 0x1D76E, 0x1D770, 0x1D788, 0x1D78A, 0x1D7A8, 0x1D7AA, 0x1D7C2, 0x1D7C4, 0x1D7CB, 0x1DF00, 0x1DF1E, 0x1E100,
    0x1E12C, 0x1E137, 0x1E13D, 0x1E14E, 0x1E14E, 0x1E290, 0x1E2AD, 0x1E2C0, 0x1E2EB, 0x1E7E0, 0x1E8C4, 0x1E900, 0x1E943,
    0x1E94B, 0x1E94B, 0x1EE00, 0x1EEBB, 0x20000, 0x3134A};
constexpr std::uint32_t kNumberRanges[] = {
    0x30,    0x39,    0xB2,    0xB3,    0xB9,    0xB9,    0xBC,    0xBE,    0x660,   0x669,   0x6F0,   0x6F9,   0x7C0,
    0x7C9,   0x966,   0x96F,   0x9E6,   0x9EF,   0x9F4,   0x9F9,   0xA66,   0xA6F,   0xAE6,   0xAEF,   0xB66,   0xB6F,
    0xB72,   0xB77,   0xBE6,   0xBF2,   0xC66,   0xC6F,   0xC78,   0xC7E,   0xCE6,   0xCEF,   0xD58,   0xD5E,   0xD66,
    0xD78,   0xDE6,   0xDEF,   0xE50,   0xE59,   0xED0,   0xED9,   0xF20,   0xF33,   0x1040,  0x1049,  0x1090,  0x1099,
    0x1369,  0x137C,  0x16EE,  0x16F0,  0x17E0,  0x17F9,  0x1810,  0x1819,  0x1946,  0x194F,  0x19D0,  0x19DA,  0x1A80,
    0x1A99,  0x1B50,  0x1B59,  0x1BB0,  0x1BB9,  0x1C40,  0x1C49,  0x1C50,  0x1C59,  0x2070,  0x2070,  0x2074,  0x2079,
    0x2080,  0x2089,  0x2150,  0x2182,  0x2185,  0x2189,  0x2460,  0x249B,  0x24EA,  0x24FF,  0x2776,  0x2793,  0x2CFD,
    0x2CFD,  0x3007,  0x3007,  0x3021,  0x3029,  0x3038,  0x303A,  0x3192,  0x3195,  0x3220,  0x3229,  0x3248,  0x324F,
    0x3251,  0x325F,  0x3280,  0x3289,  0x32B1,  0x32BF,  0xA620,  0xA629,  0xA6E6,  0xA6EF,  0xA830,  0xA835,  0xA8D0,
    0xA8D9,  0xA900,  0xA909,  0xA9D0,  0xA9D9,  0xA9F0,  0xA9F9,  0xAA50,  0xAA59,  0xABF0,  0xABF9,  0xFF10,  0xFF19,
    0x10107, 0x10133, 0x10140, 0x10178, 0x1018A, 0x1018B, 0x102E1, 0x102FB, 0x10320, 0x10323, 0x10341, 0x10341, 0x1034A,
    0x1034A, 0x103D1, 0x103D5, 0x104A0, 0x104A9, 0x10858, 0x1085F, 0x10879, 0x1087F, 0x108A7, 0x108AF, 0x108FB, 0x108FF,
    0x10916, 0x1091B, 0x109BC, 0x109BD, 0x109C0, 0x109FF, 0x10A40, 0x10A48, 0x10A7D, 0x10A7E, 0x10A9D, 0x10A9F, 0x10AEB,
    0x10AEF, 0x10B58, 0x10B5F, 0x10B78, 0x10B7F, 0x10BA9, 0x10BAF, 0x10CFA, 0x10CFF, 0x10D30, 0x10E7E, 0x10F1D, 0x10F26,
    0x10F51, 0x10F54, 0x10FC5, 0x10FCB, 0x11052, 0x1106F, 0x110F0, 0x110F9, 0x11136, 0x1113F, 0x111D0, 0x111D9, 0x111E1,
    0x111F4, 0x112F0, 0x112F9, 0x11450, 0x11459, 0x114D0, 0x114D9, 0x11650, 0x11659, 0x116C0, 0x116C9, 0x11730, 0x1173B,
    0x118E0, 0x118F2, 0x11950, 0x11959, 0x11C50, 0x11C6C, 0x11D50, 0x11D59, 0x11DA0, 0x11DA9, 0x11FC0, 0x11FD4, 0x12400,
    0x1246E, 0x16A60, 0x16A69, 0x16AC0, 0x16AC9, 0x16B50, 0x16B61, 0x16E80, 0x16E96, 0x1D2E0, 0x1D2F3, 0x1D360, 0x1D378,
    0x1D7CE, 0x1D7FF, 0x1E140, 0x1E149, 0x1E2F0, 0x1E2F9, 0x1E8C7, 0x1E8CF, 0x1E950, 0x1E959, 0x1EC71, 0x1ECAB, 0x1ECAD,
    0x1ECAF, 0x1ECB1, 0x1ED2D, 0x1ED2F, 0x1ED3D, 0x1F100, 0x1F10C, 0x1FBF0, 0x1FBF9};

bool in_ranges(std::span<const std::uint32_t> ranges, std::uint32_t code_point) {
  auto above = std::upper_bound(ranges.begin(), ranges.end(), code_point);
  auto index = static_cast<std::size_t>(above - ranges.begin());
  // Past a first and not past its last, or exactly on a last.
  return index % 2 == 1 || (index > 0 && ranges[index - 1] == code_point);
}

enum class CharClass : std::uint8_t { kOther, kLetter, kNumber, kSpace, kNone /* past the fragment */ };

bool is_whitespace(std::uint32_t code_point) {
  // llama.cpp's set: Unicode White_Space less U+001C-001F.
  return (code_point >= 0x09 && code_point <= 0x0D) || code_point == 0x20 || code_point == 0x85 || code_point == 0xA0 ||
         code_point == 0x1680 || (code_point >= 0x2000 && code_point <= 0x200A) || code_point == 0x2028 ||
         code_point == 0x2029 || code_point == 0x202F || code_point == 0x205F || code_point == 0x3000;
}

constexpr std::uint32_t kInvalidCodePoint = 0xFFFFFFFF;

CharClass classify(std::uint32_t code_point) {
  // Invalid bytes are symbols, as the U+FFFD llama.cpp puts in their place.
  if (code_point == kInvalidCodePoint) return CharClass::kOther;
  if (is_whitespace(code_point)) return CharClass::kSpace;
  if (code_point < 0x80) {
    if ((code_point | 0x20) >= 'a' && (code_point | 0x20) <= 'z') return CharClass::kLetter;
    return code_point >= '0' && code_point <= '9' ? CharClass::kNumber : CharClass::kOther;
  }
  if (in_ranges(kLetterRanges, code_point)) return CharClass::kLetter;
  if (in_ranges(kNumberRanges, code_point)) return CharClass::kNumber;
  return CharClass::kOther;
}

void append_utf8(std::string& out, std::uint32_t code_point) {
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
}

// One character of a text: where it starts, its code point (kInvalidCodePoint for a byte that
// starts no character) and its class.
struct Character {
  std::size_t offset = 0;
  std::uint32_t code_point = 0;
  CharClass kind = CharClass::kOther;
};

// The length of the UTF-8 character at `offset`: its lead byte's count when the continuation
// bytes follow (llama.cpp's rule: overlong forms and surrogates pass), else 1, a byte alone.
// llama.cpp's SentencePiece split trusts the lead byte, letting a stray one swallow the next
// bytes (a space's "▁" included, which then decodes as "▁"); standing alone keeps text lossless.
std::size_t character_length(std::string_view text, std::size_t offset) {
  const auto lead = static_cast<std::uint8_t>(text[offset]);
  const std::size_t length = lead < 0x80             ? 1
                             : (lead & 0xE0) == 0xC0 ? 2
                             : (lead & 0xF0) == 0xE0 ? 3
                             : (lead & 0xF8) == 0xF0 ? 4
                                                     : 1;
  if (offset + length > text.size()) return 1;
  for (std::size_t at = offset + 1; at < offset + length; ++at) {
    if ((static_cast<std::uint8_t>(text[at]) & 0xC0) != 0x80) return 1;
  }
  return length;
}

// The text's characters: code points, and kInvalidCodePoint for each byte that starts none.
std::vector<Character> characters(std::string_view text) {
  static constexpr std::array<std::uint8_t, 5> kLeadBits = {0, 0x7F, 0x1F, 0x0F, 0x07};
  std::vector<Character> result;
  result.reserve(text.size());
  for (std::size_t offset = 0; offset < text.size();) {
    const std::size_t length = character_length(text, offset);
    const auto lead = static_cast<std::uint8_t>(text[offset]);
    std::uint32_t code_point = lead & kLeadBits[length];
    for (std::size_t at = offset + 1; at < offset + length; ++at) {
      code_point = code_point << 6 | (static_cast<std::uint8_t>(text[at]) & 0x3Fu);
    }
    if (length == 1 && lead >= 0x80) code_point = kInvalidCodePoint;
    result.push_back({offset, code_point, classify(code_point)});
    offset += length;
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers: llama.cpp's hand-written forms of the regexes, over characters. Each appends
// the index one past each word's last character to `ends`.

class WordSplitter {
 public:
  WordSplitter(const std::vector<Character>& text, std::vector<std::size_t>& ends) : text_(text), ends_(ends) {}

  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  void gpt2() {
    const std::size_t count = text_.size();
    for (std::size_t at = 0; at < count;) {
      const std::uint32_t code_point = text_[at].code_point;
      if (std::size_t length = contraction(at, false); length > 0) {
        at = end_word(at + length);
        continue;
      }
      CharClass next = code_point == ' ' ? kind(at + 1) : kind(at);
      if (next == CharClass::kLetter || next == CharClass::kNumber || next == CharClass::kOther) {
        const CharClass run = next;
        at += code_point == ' ' ? 1 : 0;
        while (kind(at) == run) ++at;
        end_word(at);
        continue;
      }
      at = whitespace(at, false);
    }
  }

  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,D}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+ with D = 3 (Llama 3) or 1 (Qwen2).
  void llama3(std::size_t digits) {
    const std::size_t count = text_.size();
    for (std::size_t at = 0; at < count;) {
      const std::uint32_t code_point = text_[at].code_point;
      const CharClass here = kind(at);
      if (std::size_t length = contraction(at, true); length > 0) {
        at = end_word(at + length);
        continue;
      }
      if (code_point != '\r' && code_point != '\n' && here != CharClass::kNumber &&
          (here == CharClass::kLetter || kind(at + 1) == CharClass::kLetter)) {
        ++at;
        while (kind(at) == CharClass::kLetter) ++at;
        end_word(at);
        continue;
      }
      if (here == CharClass::kNumber) {
        for (std::size_t group = 0; kind(at) == CharClass::kNumber && group < digits; ++group) ++at;
        end_word(at);
        continue;
      }
      CharClass next = code_point == ' ' ? kind(at + 1) : here;
      if (next == CharClass::kOther || next == CharClass::kNone) {
        at += code_point == ' ' ? 1 : 0;
        while (kind(at) == CharClass::kOther) ++at;
        while (at < count && (text_[at].code_point == '\r' || text_[at].code_point == '\n')) ++at;
        end_word(at);
        continue;
      }
      at = whitespace(at, true);
    }
  }

 private:
  CharClass kind(std::size_t at) const { return at < text_.size() ? text_[at].kind : CharClass::kNone; }

  std::size_t end_word(std::size_t end) {
    if (ends_.empty() ? end > 0 : end > ends_.back()) ends_.push_back(end);
    return end;
  }

  // The length of an English contraction at `at` ('s, 're, ...), or 0.
  std::size_t contraction(std::size_t at, bool any_case) const {
    if (text_[at].code_point != '\'' || at + 1 >= text_.size()) return 0;
    auto letter = [&](std::size_t position) -> std::uint32_t {
      std::uint32_t code_point = text_[position].code_point;
      return any_case && code_point >= 'A' && code_point <= 'Z' ? code_point + 32 : code_point;
    };
    std::uint32_t first = letter(at + 1);
    if (first == 's' || first == 't' || first == 'm' || first == 'd') return 2;
    if (at + 2 >= text_.size()) return 0;
    std::uint32_t second = letter(at + 2);
    bool two = (first == 'r' && second == 'e') || (first == 'v' && second == 'e') || (first == 'l' && second == 'l');
    return two ? 3 : 0;
  }

  // \s*[\r\n]+ (when `line_breaks`), \s+(?!\S) and \s+ at `at`; returns where the next word starts.
  std::size_t whitespace(std::size_t at, bool line_breaks) {
    std::size_t spaces = 0, after_line_break = 0;
    while (kind(at + spaces) == CharClass::kSpace) {
      std::uint32_t code_point = text_[at + spaces].code_point;
      if (code_point == '\r' || code_point == '\n') after_line_break = at + spaces + 1;
      ++spaces;
    }
    if (line_breaks && after_line_break > 0) return end_word(after_line_break);
    // Runs of spaces before a word leave their last space to it.
    if (spaces > 1 && at + spaces < text_.size()) return end_word(at + spaces - 1);
    return end_word(at + std::max<std::size_t>(spaces, 1));
  }

  const std::vector<Character>& text_;
  std::vector<std::size_t>& ends_;
};

enum class PreTokenizer { kGpt2, kLlama3, kQwen2 };

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
    std::size_t length = character_length(text, offset);
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
  WordSplitter splitter(text, ends);
  switch (pre_tokenizer) {
    case PreTokenizer::kGpt2:
      splitter.gpt2();
      break;
    case PreTokenizer::kLlama3:
      splitter.llama3(3);
      break;
    case PreTokenizer::kQwen2:
      splitter.llama3(1);
      break;
  }
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
