#include <openssl/evp.h>
#include <openssl/rand.h>

#include <fstream>

#include "slipway/core.h"

namespace slipway {

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(context_), EVP_sha256(), nullptr);
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(context_)); }

void Sha256::update(std::span<const std::byte> bytes) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(context_), bytes.data(), bytes.size());
}

void Sha256::update(std::string_view text) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(context_), text.data(), text.size());
}

std::array<std::uint8_t, 32> Sha256::finish() {
  std::array<std::uint8_t, 32> digest{};
  unsigned int length = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(context_), digest.data(), &length);
  return digest;
}

std::string to_hex(std::span<const std::uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 0xF];
  }
  return out;
}

std::string sha256_hex(std::span<const std::byte> bytes) {
  Sha256 hasher;
  hasher.update(bytes);
  auto digest = hasher.finish();
  return to_hex(digest);
}

std::string sha256_hex(std::string_view text) { return sha256_hex(std::as_bytes(std::span(text.data(), text.size()))); }

bool constant_time_equal(std::string_view left, std::string_view right) {
  if (left.size() != right.size()) return false;
  unsigned char difference = 0;
  for (std::size_t index = 0; index < left.size(); ++index) {
    difference |= static_cast<unsigned char>(left[index] ^ right[index]);
  }
  return difference == 0;
}

Result<std::string> sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_error("cannot open '" + path + "' for reading");
  Sha256 hasher;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    hasher.update(std::string_view(buffer.data(), static_cast<std::size_t>(in.gcount())));
  }
  if (in.bad()) return io_error("error while reading '" + path + "'");
  auto digest = hasher.finish();
  return to_hex(digest);
}

std::string random_hex(std::size_t byte_count) {
  std::vector<std::uint8_t> bytes(byte_count);
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    // OpenSSL's generator failing is not recoverable in any meaningful way; fall back to time.
    auto seed = static_cast<std::uint64_t>(monotonic_ns());
    for (auto& byte : bytes) {
      seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
      byte = static_cast<std::uint8_t>(seed >> 56);
    }
  }
  return to_hex(bytes);
}

}  // namespace slipway
