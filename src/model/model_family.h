// The registry of model families: each family (linear, tree ensemble; later MLP, quantized, LLM)
// writes and reads its own part of a bundle file, the fields of the manifest's "model" object
// after "family" and "width", and its binary sections. Bundle::serialize and Bundle::parse look a
// family up by name and know nothing of any family's contents.
//
// Adding a family: one new file src/model/<name>_family.cpp defining
// `const ModelFamily& <name>_family()`, declared and listed in model_families.cpp. Private to the
// model module; docs/formats.md describes each family's fields and sections for outsiders.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "model/bundle_file.h"
#include "model/manifest_reader.h"
#include "slipway/core.h"
#include "slipway/model.h"

namespace slipway::model {

// What a family's write() fills in while Bundle::serialize writes the file.
class FamilyWriter {
 public:
  FamilyWriter(JsonWriter& model_fields, std::vector<SectionBytes>& sections)
      : fields_(model_fields), sections_(sections) {}

  // The manifest's "model" object, open after its "family" and "width" keys: write key/value
  // pairs. Everything written must be a deterministic function of the model (the bundle's bytes
  // are its identity).
  JsonWriter& fields() { return fields_; }

  // Appends a section holding `values`' bytes (little-endian, as the host). Sections go into the
  // file in the order they are added, each at the next 64-byte boundary of the data area. The
  // bytes are not copied: `values` must live until serialize() returns (the model's arrays do).
  template <typename T>
  void add_section(std::string_view name, std::span<const T> values) {
    static_assert(std::is_trivially_copyable_v<T>);
    sections_.push_back({std::string(name), std::as_bytes(values)});
  }

 private:
  JsonWriter& fields_;
  std::vector<SectionBytes>& sections_;
};

// What a family's read() gets from Bundle::parse, once the file's checksum (and expected sha256),
// the manifest's common fields and the section table have been checked.
class FamilyReader {
 public:
  using Sections = std::map<std::string, std::span<const std::byte>, std::less<>>;

  // `sections` view the file's bytes; `mapping` is null, or owns those bytes (Bundle::load's
  // mapping) and then the arrays section() returns view them instead of copying.
  FamilyReader(ManifestReader::Object model_fields, std::size_t width, const Manifest& manifest,
               const Sections& sections, std::shared_ptr<const void> mapping)
      : fields_(model_fields), width_(width), manifest_(manifest), sections_(sections), mapping_(std::move(mapping)) {}

  // The manifest's "model" object (read it with fields_reader(), whose errors name the field).
  ManifestReader::Object fields() const { return fields_; }
  const ManifestReader& fields_reader() const { return reader_; }
  // The model's input width ("width"), already checked against the preprocessing's output.
  std::size_t width() const { return width_; }
  // The bundle's task and class labels, for the family's own consistency checks.
  const Manifest& manifest() const { return manifest_; }

  bool has_section(std::string_view name) const { return sections_.find(name) != sections_.end(); }
  // The section's elements: a view into the mapped file when the bundle is being loaded from one
  // (sections start at 64-byte boundaries of a page-aligned mapping, so every element type is
  // aligned), else a copy. DataLoss naming the section when it is missing or its size is not a
  // whole number of elements.
  template <typename T>
  Result<SharedArray<T>> section(std::string_view name) const {
    auto found = sections_.find(name);
    if (found == sections_.end()) return data_loss("the bundle has no '" + std::string(name) + "' section");
    return elements<T>(found->second, name);
  }
  // The same, but empty when the bundle has no such section.
  template <typename T>
  Result<SharedArray<T>> optional_section(std::string_view name) const {
    auto found = sections_.find(name);
    if (found == sections_.end()) return SharedArray<T>();
    return elements<T>(found->second, name);
  }

 private:
  template <typename T>
  Result<SharedArray<T>> elements(std::span<const std::byte> bytes, std::string_view name) const {
    static_assert(std::is_trivially_copyable_v<T>);
    if (bytes.size() % sizeof(T) != 0) {
      return data_loss("bundle section '" + std::string(name) + "' has a partial element");
    }
    std::size_t count = bytes.size() / sizeof(T);
    if (mapping_ != nullptr && reinterpret_cast<std::uintptr_t>(bytes.data()) % alignof(T) == 0) {
      return SharedArray<T>(std::span<const T>(reinterpret_cast<const T*>(bytes.data()), count), mapping_);
    }
    std::vector<T> values(count);
    if (count != 0) std::memcpy(values.data(), bytes.data(), bytes.size());
    return SharedArray<T>(std::move(values));
  }

  ManifestReader::Object fields_;
  ManifestReader reader_;
  std::size_t width_;
  const Manifest& manifest_;
  const Sections& sections_;
  std::shared_ptr<const void> mapping_;
};

// One model family. Both functions are plain (no state), so the list in model_families.cpp needs no
// initialization order.
struct ModelFamily {
  // The manifest's "model"."family", equal to Model::family() of every model the family writes.
  // A name belongs to exactly one Model class, so write() may static_cast to it.
  std::string_view name;
  // Writes `model` (whose family() is `name`): its manifest fields and its sections.
  void (*write)(const Model& model, FamilyWriter& out);
  // Builds the model from its fields and sections. DataLoss with one sentence naming the field or
  // section that is missing or malformed; the model it returns has input_width() == in.width().
  Result<std::shared_ptr<const Model>> (*read)(const FamilyReader& in);
};

// Every family this build reads and writes (model_families.cpp). Thread-safe.
std::span<const ModelFamily* const> model_families();
// The family called `name`, or null when this build does not know it.
const ModelFamily* find_model_family(std::string_view name);

}  // namespace slipway::model
