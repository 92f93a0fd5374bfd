#include "model/bundle_file.h"

#include <cstring>
#include <optional>

namespace slipway::model {
namespace {

constexpr char kMagic[8] = {'S', 'L', 'I', 'P', 'B', 'N', 'D', 'L'};
constexpr char kTrailerMagic[8] = {'S', 'L', 'I', 'P', 'S', 'H', 'A', '2'};
constexpr std::size_t kHeaderSize = 24;
constexpr std::size_t kTrailerSize = 8 + 32;

std::size_t align_up(std::size_t value) {
  return (value + kSectionAlignment - 1) / kSectionAlignment * kSectionAlignment;
}

template <typename T>
void append_pod(std::vector<std::byte>& out, T value) {
  const auto* bytes = reinterpret_cast<const std::byte*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

template <typename T>
T read_pod(std::span<const std::byte> bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

}  // namespace

std::vector<std::size_t> section_offsets(const std::vector<SectionBytes>& sections) {
  std::vector<std::size_t> offsets;
  std::size_t offset = 0;
  for (const auto& section : sections) {
    offsets.push_back(offset);
    offset = align_up(offset + section.bytes.size());
  }
  return offsets;
}

std::vector<std::byte> assemble_bundle_file(std::string_view manifest_json, const std::vector<SectionBytes>& sections) {
  std::vector<std::byte> out;
  const auto* magic = reinterpret_cast<const std::byte*>(kMagic);
  out.insert(out.end(), magic, magic + sizeof kMagic);
  append_pod<std::uint32_t>(out, kBundleFormatVersion);
  append_pod<std::uint32_t>(out, 0);  // flags, reserved
  append_pod<std::uint64_t>(out, manifest_json.size());
  const auto* manifest = reinterpret_cast<const std::byte*>(manifest_json.data());
  out.insert(out.end(), manifest, manifest + manifest_json.size());
  out.resize(align_up(out.size()), std::byte{0});
  std::size_t data_start = out.size();
  auto offsets = section_offsets(sections);
  for (std::size_t index = 0; index < sections.size(); ++index) {
    out.resize(data_start + offsets[index], std::byte{0});
    out.insert(out.end(), sections[index].bytes.begin(), sections[index].bytes.end());
  }
  Sha256 hasher;
  hasher.update(std::span<const std::byte>(out));
  auto digest = hasher.finish();
  const auto* trailer = reinterpret_cast<const std::byte*>(kTrailerMagic);
  out.insert(out.end(), trailer, trailer + sizeof kTrailerMagic);
  const auto* digest_bytes = reinterpret_cast<const std::byte*>(digest.data());
  out.insert(out.end(), digest_bytes, digest_bytes + digest.size());
  return out;
}

Result<BundleFileView> open_bundle_file(std::span<const std::byte> bytes,
                                        std::optional<std::string_view> expected_sha256) {
  if (bytes.size() < kHeaderSize + kTrailerSize || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    return invalid_argument("not a Slipway bundle (the file does not start with the bundle header)");
  }
  auto version = read_pod<std::uint32_t>(bytes, 8);
  if (version != kBundleFormatVersion) {
    return invalid_argument("bundle format version " + std::to_string(version) +
                            " is not supported (this Slipway reads version " + std::to_string(kBundleFormatVersion) +
                            ")");
  }
  std::size_t body_size = bytes.size() - kTrailerSize;
  if (std::memcmp(bytes.data() + body_size, kTrailerMagic, sizeof kTrailerMagic) != 0) {
    return data_loss("the bundle is truncated or damaged (its checksum trailer is missing)");
  }
  Sha256 hasher;
  hasher.update(bytes.first(body_size));
  auto digest = hasher.finish();
  if (std::memcmp(digest.data(), bytes.data() + body_size + 8, digest.size()) != 0) {
    return data_loss("the bundle is damaged: its content does not match its checksum");
  }
  if (expected_sha256) {
    std::string actual = sha256_hex(bytes);
    if (actual != *expected_sha256) {
      return data_loss("the bundle's sha256 is " + actual + " but " + std::string(*expected_sha256) + " was expected");
    }
  }
  auto manifest_size = read_pod<std::uint64_t>(bytes, 16);
  if (manifest_size > body_size - kHeaderSize) return data_loss("the bundle's manifest length is out of range");
  BundleFileView view;
  view.manifest_json = std::string_view(reinterpret_cast<const char*>(bytes.data()) + kHeaderSize, manifest_size);
  std::size_t data_start = align_up(kHeaderSize + manifest_size);
  if (data_start > body_size) data_start = body_size;
  view.data_area = bytes.subspan(data_start, body_size - data_start);
  return view;
}

}  // namespace slipway::model
