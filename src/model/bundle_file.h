// The bundle file container: header, manifest, aligned sections, checksum trailer.
// Private to the model module; docs/formats.md describes the layout for outsiders.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "slipway/core.h"
#include "slipway/model.h"

namespace slipway::model {

inline constexpr std::size_t kSectionAlignment = 64;

// A section to write. The bytes are borrowed (from the model's arrays) for the duration of
// assemble_bundle_file().
struct SectionBytes {
  std::string name;
  std::span<const std::byte> bytes;
};

// Offsets of each section relative to the start of the data area, in the order given.
std::vector<std::size_t> section_offsets(const std::vector<SectionBytes>& sections);

// Assembles a file from a manifest (which must already list the sections at section_offsets())
// and the sections' bytes.
std::vector<std::byte> assemble_bundle_file(std::string_view manifest_json, const std::vector<SectionBytes>& sections);

struct BundleFileView {
  std::string_view manifest_json;
  std::span<const std::byte> data_area;  // sections live here, at their manifest offsets
};

// Checks the header and the trailer checksum (and the whole-file hash when expected_sha256 is
// given) and returns views into `bytes`.
Result<BundleFileView> open_bundle_file(std::span<const std::byte> bytes,
                                        std::optional<std::string_view> expected_sha256);

}  // namespace slipway::model
