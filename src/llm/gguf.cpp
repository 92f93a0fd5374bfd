// GGUF v3 (ggml's docs/gguf.md): header, metadata, tensor infos, padding, tensor data; little-endian.
#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cstring>
#include <limits>
#include <unordered_set>

#include <fmt/format.h>

#include "slipway/llm.h"

namespace slipway::llm {
namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr std::uint32_t kWrittenVersion = 3;

static_assert(std::endian::native == std::endian::little, "GGUF is read and written in place as little-endian");

constexpr TensorTypeInfo kTensorTypes[] = {
    {"F32", 1, 4},      {"F16", 1, 2},      {"Q4_0", 32, 18},   {"Q4_1", 32, 20},   {"", 0, 0},
    {"", 0, 0},         {"Q5_0", 32, 22},   {"Q5_1", 32, 24},   {"Q8_0", 32, 34},   {"Q8_1", 32, 36},
    {"Q2_K", 256, 84},  {"Q3_K", 256, 110}, {"Q4_K", 256, 144}, {"Q5_K", 256, 176}, {"Q6_K", 256, 210},
    {"Q8_K", 256, 292}, {"", 0, 0},         {"", 0, 0},         {"", 0, 0},         {"", 0, 0},
    {"", 0, 0},         {"", 0, 0},         {"", 0, 0},         {"", 0, 0},         {"I8", 1, 1},
    {"I16", 1, 2},      {"I32", 1, 4},      {"I64", 1, 8},      {"F64", 1, 8},      {"", 0, 0},
    {"BF16", 1, 2},
};

// The smallest number of bytes one element of a metadata array can take: a count that could not
// fit in the bytes left is refused before anything is allocated for it.
std::uint64_t smallest_encoding(GgufValueType type) {
  switch (type) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kString:  // its length
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    case GgufValueType::kArray:  // element type and count
      return 12;
  }
  return 1;
}

bool known_value_type(std::uint32_t type) { return type <= static_cast<std::uint32_t>(GgufValueType::kFloat64); }

// Reads the file front to back, every read checked against the bytes left.
class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const std::string& source) : bytes_(bytes), source_(source) {}

  std::uint64_t offset() const { return offset_; }
  std::uint64_t remaining() const { return bytes_.size() - offset_; }

  template <typename T>
  Status read(T& value, std::string_view what) {
    if (remaining() < sizeof(T)) return truncated(what);
    std::memcpy(&value, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return {};
  }

  Status read_string(std::string& text, std::string_view what, std::uint64_t longest) {
    std::uint64_t length = 0;
    SLIPWAY_RETURN_IF_ERROR(read(length, what));
    if (length > remaining()) return truncated(what);
    if (length > longest) {
      return invalid_argument(fmt::format("{}: {} at byte {} is {} bytes long; at most {} are allowed", source_, what,
                                          offset_ - 8, length, longest));
    }
    text.assign(reinterpret_cast<const char*>(bytes_.data() + offset_), length);
    offset_ += length;
    return {};
  }

  Status error(std::string_view message) const {
    return invalid_argument(fmt::format("{}: {} (at byte {})", source_, message, offset_));
  }
  Status truncated(std::string_view what) const {
    return invalid_argument(fmt::format("{}: the file ends inside {} (at byte {} of {}): it is truncated", source_,
                                        what, offset_, bytes_.size()));
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& source_;
  std::uint64_t offset_ = 0;
};

// Metadata array elements a file may hold in all: each is a GgufValue in memory (tens of bytes
// for one byte of file), so a count the file's bytes could hold is not bound enough. Real
// vocabularies (tokens, scores, types, merges) total well under a million.
constexpr std::uint64_t kMaxArrayElements = std::uint64_t{1} << 22;

Status read_value(Cursor& cursor, GgufValueType type, std::uint32_t depth, GgufValue& value,
                  std::uint64_t& elements_left);

template <typename T>
Status read_number(Cursor& cursor, GgufValueType type, GgufValue& value) {
  T number{};
  SLIPWAY_RETURN_IF_ERROR(cursor.read(number, "a metadata value"));
  if constexpr (std::is_floating_point_v<T>) {
    value = GgufValue::real(type, static_cast<double>(number));
  } else if constexpr (std::is_signed_v<T>) {
    value = GgufValue::signed_integer(type, number);
  } else {
    value = GgufValue::unsigned_integer(type, number);
  }
  return {};
}

Status read_value(Cursor& cursor, GgufValueType type, std::uint32_t depth, GgufValue& value,
                  std::uint64_t& elements_left) {
  switch (type) {
    case GgufValueType::kUint8:
      return read_number<std::uint8_t>(cursor, type, value);
    case GgufValueType::kInt8:
      return read_number<std::int8_t>(cursor, type, value);
    case GgufValueType::kUint16:
      return read_number<std::uint16_t>(cursor, type, value);
    case GgufValueType::kInt16:
      return read_number<std::int16_t>(cursor, type, value);
    case GgufValueType::kUint32:
      return read_number<std::uint32_t>(cursor, type, value);
    case GgufValueType::kInt32:
      return read_number<std::int32_t>(cursor, type, value);
    case GgufValueType::kUint64:
      return read_number<std::uint64_t>(cursor, type, value);
    case GgufValueType::kInt64:
      return read_number<std::int64_t>(cursor, type, value);
    case GgufValueType::kFloat32:
      return read_number<float>(cursor, type, value);
    case GgufValueType::kFloat64:
      return read_number<double>(cursor, type, value);
    case GgufValueType::kBool: {
      std::uint8_t byte = 0;
      SLIPWAY_RETURN_IF_ERROR(cursor.read(byte, "a metadata value"));
      if (byte > 1) return cursor.error(fmt::format("a bool holds {} (only 0 and 1 are allowed)", byte));
      value = GgufValue::boolean(byte == 1);
      return {};
    }
    case GgufValueType::kString: {
      std::string text;
      SLIPWAY_RETURN_IF_ERROR(cursor.read_string(text, "a metadata string", std::numeric_limits<std::uint64_t>::max()));
      value = GgufValue::string(std::move(text));
      return {};
    }
    case GgufValueType::kArray: {
      if (depth >= kGgufMaxArrayDepth) {
        return cursor.error(fmt::format("arrays are nested more than {} deep", kGgufMaxArrayDepth));
      }
      std::uint32_t element_type = 0;
      std::uint64_t count = 0;
      SLIPWAY_RETURN_IF_ERROR(cursor.read(element_type, "an array's element type"));
      if (!known_value_type(element_type)) {
        return cursor.error(fmt::format("an array's elements have unknown type {}", element_type));
      }
      SLIPWAY_RETURN_IF_ERROR(cursor.read(count, "an array's length"));
      auto element = static_cast<GgufValueType>(element_type);
      if (count > cursor.remaining() / smallest_encoding(element)) {
        return cursor.error(fmt::format("an array claims {} elements, more than the {} bytes left can hold", count,
                                        cursor.remaining()));
      }
      if (count > elements_left) {
        return cursor.error(fmt::format("the metadata arrays hold more than {} elements in all", kMaxArrayElements));
      }
      elements_left -= count;
      std::vector<GgufValue> elements(count);
      for (auto& item : elements) SLIPWAY_RETURN_IF_ERROR(read_value(cursor, element, depth + 1, item, elements_left));
      value = GgufValue::array(element, std::move(elements));
      return {};
    }
  }
  return cursor.error(fmt::format("a metadata value has unknown type {}", static_cast<std::uint32_t>(type)));
}

// a * b, or false on overflow.
bool multiply(std::uint64_t a, std::uint64_t b, std::uint64_t& product) {
  return !__builtin_mul_overflow(a, b, &product);
}

std::uint64_t align_up(std::uint64_t offset, std::uint64_t alignment) {
  return offset + (alignment - offset % alignment) % alignment;
}

// Appends little-endian values to a file's bytes.
class Encoder {
 public:
  explicit Encoder(std::string& out) : out_(out) {}
  template <typename T>
  void put(T value) {
    char raw[sizeof(T)];
    std::memcpy(raw, &value, sizeof(T));
    out_.append(raw, sizeof(T));
  }
  void put_string(std::string_view text) {
    put<std::uint64_t>(text.size());
    out_.append(text);
  }
  void put_value(const GgufValue& value) {
    switch (value.type()) {
      case GgufValueType::kUint8:
        return put(static_cast<std::uint8_t>(*value.as_unsigned()));
      case GgufValueType::kInt8:
        return put(static_cast<std::int8_t>(*value.as_signed()));
      case GgufValueType::kUint16:
        return put(static_cast<std::uint16_t>(*value.as_unsigned()));
      case GgufValueType::kInt16:
        return put(static_cast<std::int16_t>(*value.as_signed()));
      case GgufValueType::kUint32:
        return put(static_cast<std::uint32_t>(*value.as_unsigned()));
      case GgufValueType::kInt32:
        return put(static_cast<std::int32_t>(*value.as_signed()));
      case GgufValueType::kUint64:
        return put(*value.as_unsigned());
      case GgufValueType::kInt64:
        return put(*value.as_signed());
      case GgufValueType::kFloat32:
        return put(static_cast<float>(*value.as_real()));
      case GgufValueType::kFloat64:
        return put(*value.as_real());
      case GgufValueType::kBool:
        return put(static_cast<std::uint8_t>(*value.as_bool() ? 1 : 0));
      case GgufValueType::kString:
        return put_string(*value.as_string());
      case GgufValueType::kArray:
        put(static_cast<std::uint32_t>(value.element_type()));
        put<std::uint64_t>(value.as_array()->size());
        for (const auto& element : *value.as_array()) put_value(element);
        return;
    }
  }

 private:
  std::string& out_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Values.

std::string gguf_value_type_name(GgufValueType type) {
  static constexpr std::array<std::string_view, 13> kNames = {"u8",   "i8",     "u16",   "i16", "u32", "i32", "f32",
                                                              "bool", "string", "array", "u64", "i64", "f64"};
  auto index = static_cast<std::uint32_t>(type);
  return index < kNames.size() ? std::string(kNames[index]) : "type " + std::to_string(index);
}

GgufValue GgufValue::unsigned_integer(GgufValueType type, std::uint64_t value) {
  GgufValue made;
  made.type_ = type;
  made.bits_ = value;
  return made;
}

GgufValue GgufValue::signed_integer(GgufValueType type, std::int64_t value) {
  GgufValue made;
  made.type_ = type;
  made.bits_ = static_cast<std::uint64_t>(value);
  return made;
}

GgufValue GgufValue::real(GgufValueType type, double value) {
  GgufValue made;
  made.type_ = type;
  made.real_ = value;
  return made;
}

GgufValue GgufValue::boolean(bool value) {
  GgufValue made;
  made.type_ = GgufValueType::kBool;
  made.bits_ = value ? 1 : 0;
  return made;
}

GgufValue GgufValue::string(std::string value) {
  GgufValue made;
  made.type_ = GgufValueType::kString;
  made.text_ = std::move(value);
  return made;
}

GgufValue GgufValue::array(GgufValueType element_type, std::vector<GgufValue> elements) {
  GgufValue made;
  made.type_ = GgufValueType::kArray;
  made.element_type_ = element_type;
  made.elements_ = std::move(elements);
  return made;
}

GgufValue GgufValue::strings(const std::vector<std::string>& values) {
  std::vector<GgufValue> elements;
  elements.reserve(values.size());
  for (const auto& value : values) elements.push_back(string(value));
  return array(GgufValueType::kString, std::move(elements));
}

GgufValue GgufValue::f32s(std::span<const float> values) {
  std::vector<GgufValue> elements;
  elements.reserve(values.size());
  for (float value : values) elements.push_back(f32(value));
  return array(GgufValueType::kFloat32, std::move(elements));
}

GgufValue GgufValue::i32s(std::span<const std::int32_t> values) {
  std::vector<GgufValue> elements;
  elements.reserve(values.size());
  for (std::int32_t value : values) elements.push_back(signed_integer(GgufValueType::kInt32, value));
  return array(GgufValueType::kInt32, std::move(elements));
}

bool GgufValue::is_integer() const {
  switch (type_) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

namespace {
bool is_signed_type(GgufValueType type) {
  return type == GgufValueType::kInt8 || type == GgufValueType::kInt16 || type == GgufValueType::kInt32 ||
         type == GgufValueType::kInt64;
}
}  // namespace

std::optional<std::uint64_t> GgufValue::as_unsigned() const {
  if (!is_integer()) return std::nullopt;
  if (is_signed_type(type_) && static_cast<std::int64_t>(bits_) < 0) return std::nullopt;
  return bits_;
}

std::optional<std::int64_t> GgufValue::as_signed() const {
  if (!is_integer()) return std::nullopt;
  if (!is_signed_type(type_) && bits_ > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    return std::nullopt;
  }
  return static_cast<std::int64_t>(bits_);
}

std::optional<double> GgufValue::as_real() const {
  if (type_ == GgufValueType::kFloat32 || type_ == GgufValueType::kFloat64) return real_;
  if (!is_integer()) return std::nullopt;
  return is_signed_type(type_) ? static_cast<double>(static_cast<std::int64_t>(bits_)) : static_cast<double>(bits_);
}

std::optional<bool> GgufValue::as_bool() const {
  if (type_ != GgufValueType::kBool) return std::nullopt;
  return bits_ != 0;
}

const std::string* GgufValue::as_string() const { return type_ == GgufValueType::kString ? &text_ : nullptr; }

const std::vector<GgufValue>* GgufValue::as_array() const {
  return type_ == GgufValueType::kArray ? &elements_ : nullptr;
}

// ---------------------------------------------------------------------------------------------
// Tensor types.

const TensorTypeInfo* tensor_type_info(TensorType type) {
  auto index = static_cast<std::size_t>(type);
  if (index >= std::size(kTensorTypes) || kTensorTypes[index].block_elements == 0) return nullptr;
  return &kTensorTypes[index];
}

bool tensor_type_by_name(std::string_view name, TensorType& type) {
  for (std::size_t index = 0; index < std::size(kTensorTypes); ++index) {
    std::string_view known = kTensorTypes[index].name;
    if (known.empty() || known.size() != name.size()) continue;
    if (std::equal(known.begin(), known.end(), name.begin(), [](char a, char b) {
          return std::toupper(static_cast<unsigned char>(a)) == std::toupper(static_cast<unsigned char>(b));
        })) {
      type = static_cast<TensorType>(index);
      return true;
    }
  }
  return false;
}

std::uint64_t GgufTensor::elements() const {
  std::uint64_t count = 1;
  for (std::uint64_t dim : dims) count *= dim;
  return count;
}

Result<std::uint64_t> tensor_bytes(TensorType type, std::span<const std::uint64_t> dims) {
  const TensorTypeInfo* info = tensor_type_info(type);
  if (info == nullptr) return invalid_argument(fmt::format("unknown tensor type {}", static_cast<std::uint32_t>(type)));
  if (dims.empty()) return invalid_argument("a tensor needs at least one dimension");
  if (dims[0] % info->block_elements != 0) {
    return invalid_argument(fmt::format("a {} tensor's first dimension ({}) must be a multiple of its block of {}",
                                        info->name, dims[0], info->block_elements));
  }
  std::uint64_t bytes = dims[0] / info->block_elements;
  bool fits = multiply(bytes, info->block_bytes, bytes);
  for (std::size_t dim = 1; dim < dims.size() && fits; ++dim) fits = multiply(bytes, dims[dim], bytes);
  if (!fits) return invalid_argument("a tensor's size overflows 64 bits");
  return bytes;
}

// ---------------------------------------------------------------------------------------------
// Reading.

Result<GgufFile> GgufFile::open(const std::string& path) {
  SLIPWAY_ASSIGN_OR_RETURN(auto mapped, MappedFile::open(path));
  auto mapping = std::make_shared<MappedFile>(std::move(mapped));
  mapping->advise_normal_access();
  SLIPWAY_ASSIGN_OR_RETURN(auto file, parse(mapping->bytes(), path));
  file.mapping_ = std::move(mapping);
  return file;
}

Result<GgufFile> GgufFile::parse(std::span<const std::byte> bytes, const std::string& source) {
  GgufFile file;
  file.bytes_ = bytes;
  file.source_ = source;
  Cursor cursor(bytes, file.source_);
  std::uint32_t magic = 0;
  SLIPWAY_RETURN_IF_ERROR(cursor.read(magic, "the header"));
  if (magic != kMagic) {
    return invalid_argument(source + ": not a GGUF file (it does not start with the bytes 'GGUF')");
  }
  SLIPWAY_RETURN_IF_ERROR(cursor.read(file.version_, "the header"));
  if (file.version_ != 2 && file.version_ != 3) {
    return invalid_argument(fmt::format(
        "{}: GGUF version {} is not supported (versions 2 and 3 are; a version 1 file can be converted with a "
        "current llama.cpp)",
        source, file.version_));
  }
  std::uint64_t tensor_count = 0, metadata_count = 0;
  SLIPWAY_RETURN_IF_ERROR(cursor.read(tensor_count, "the header"));
  SLIPWAY_RETURN_IF_ERROR(cursor.read(metadata_count, "the header"));
  // A key takes at least 13 bytes (length, type, one byte of value), a tensor info 24.
  if (metadata_count > cursor.remaining() / 13 || tensor_count > cursor.remaining() / 24) {
    return cursor.error(fmt::format("the header claims {} metadata keys and {} tensors, more than the file can hold",
                                    metadata_count, tensor_count));
  }
  // Reserved only up to what a plausible file has: the counts are the file's word.
  constexpr std::uint64_t kPlausibleCount = 4096;
  file.metadata_.reserve(std::min(metadata_count, kPlausibleCount));
  std::unordered_set<std::string> keys, names;
  std::uint64_t elements_left = kMaxArrayElements;
  for (std::uint64_t index = 0; index < metadata_count; ++index) {
    std::string key;
    SLIPWAY_RETURN_IF_ERROR(cursor.read_string(key, "a metadata key", kGgufMaxKeyBytes));
    if (key.empty()) return cursor.error("a metadata key is empty");
    if (!keys.insert(key).second) return cursor.error("metadata key '" + key + "' appears twice");
    std::uint32_t type = 0;
    SLIPWAY_RETURN_IF_ERROR(cursor.read(type, "a metadata value's type"));
    if (!known_value_type(type)) {
      return cursor.error(fmt::format("metadata key '{}' has unknown value type {}", key, type));
    }
    GgufValue value;
    SLIPWAY_RETURN_IF_ERROR(read_value(cursor, static_cast<GgufValueType>(type), 0, value, elements_left));
    file.metadata_.emplace_back(std::move(key), std::move(value));
  }
  if (const GgufValue* alignment = file.find("general.alignment")) {
    auto value = alignment->as_unsigned();
    if (!value || *value == 0 || *value % 8 != 0 || *value > (std::uint64_t{1} << 24)) {
      return invalid_argument(source + ": general.alignment must be a positive multiple of 8 (at most 2^24)");
    }
    file.alignment_ = *value;
  }
  file.tensors_.reserve(std::min(tensor_count, kPlausibleCount));
  for (std::uint64_t index = 0; index < tensor_count; ++index) {
    GgufTensor tensor;
    SLIPWAY_RETURN_IF_ERROR(cursor.read_string(tensor.name, "a tensor name", kGgufMaxTensorNameBytes));
    if (tensor.name.empty()) return cursor.error("a tensor has an empty name");
    if (!names.insert(tensor.name).second) return cursor.error("tensor '" + tensor.name + "' appears twice");
    std::uint32_t dims = 0;
    SLIPWAY_RETURN_IF_ERROR(cursor.read(dims, "a tensor's dimension count"));
    if (dims == 0 || dims > kGgufMaxDims) {
      return cursor.error(
          fmt::format("tensor '{}' has {} dimensions (1 to {} are allowed)", tensor.name, dims, kGgufMaxDims));
    }
    tensor.dims.resize(dims);
    for (auto& dim : tensor.dims) {
      SLIPWAY_RETURN_IF_ERROR(cursor.read(dim, "a tensor's dimensions"));
      if (dim == 0) return cursor.error("tensor '" + tensor.name + "' has a dimension of 0");
    }
    std::uint32_t type = 0;
    SLIPWAY_RETURN_IF_ERROR(cursor.read(type, "a tensor's type"));
    tensor.type = static_cast<TensorType>(type);
    if (tensor_type_info(tensor.type) == nullptr) {
      return cursor.error(fmt::format("tensor '{}' has unknown type {}", tensor.name, type));
    }
    SLIPWAY_RETURN_IF_ERROR(cursor.read(tensor.offset, "a tensor's offset"));
    auto bytes = tensor_bytes(tensor.type, tensor.dims);
    if (!bytes.ok()) return cursor.error("tensor '" + tensor.name + "': " + bytes.status().message());
    tensor.bytes = *bytes;
    if (tensor.offset % file.alignment_ != 0) {
      return cursor.error(fmt::format("tensor '{}' starts at offset {}, not a multiple of the alignment {}",
                                      tensor.name, tensor.offset, file.alignment_));
    }
    file.tensors_.push_back(std::move(tensor));
  }
  file.data_start_ = align_up(cursor.offset(), file.alignment_);
  for (const auto& tensor : file.tensors_) {
    std::uint64_t available = bytes.size() > file.data_start_ ? bytes.size() - file.data_start_ : 0;
    if (tensor.offset > available || tensor.bytes > available - tensor.offset) {
      return invalid_argument(fmt::format(
          "{}: tensor '{}' ({} bytes at offset {}) runs past the end of the file ({} bytes of tensor data): the file "
          "is truncated or damaged",
          source, tensor.name, tensor.bytes, tensor.offset, available));
    }
  }
  return file;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& [name, value] : metadata_) {
    if (name == key) return &value;
  }
  return nullptr;
}

Result<std::uint64_t> GgufFile::require_unsigned(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return invalid_argument(fmt::format("{}: the required key '{}' is missing", source_, key));
  auto number = value->as_unsigned();
  if (!number) {
    return invalid_argument(fmt::format("{}: '{}' must be a non-negative integer; it is a {}", source_, key,
                                        gguf_value_type_name(value->type())));
  }
  return *number;
}

Result<double> GgufFile::require_real(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return invalid_argument(fmt::format("{}: the required key '{}' is missing", source_, key));
  auto number = value->as_real();
  if (!number) {
    return invalid_argument(
        fmt::format("{}: '{}' must be a number; it is a {}", source_, key, gguf_value_type_name(value->type())));
  }
  return *number;
}

Result<std::string> GgufFile::require_string(std::string_view key) const {
  const GgufValue* value = find(key);
  if (value == nullptr) return invalid_argument(fmt::format("{}: the required key '{}' is missing", source_, key));
  if (value->as_string() == nullptr) {
    return invalid_argument(
        fmt::format("{}: '{}' must be a string; it is a {}", source_, key, gguf_value_type_name(value->type())));
  }
  return *value->as_string();
}

const GgufTensor* GgufFile::tensor(std::string_view name) const {
  for (const auto& tensor : tensors_) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

std::span<const std::byte> GgufFile::data(const GgufTensor& tensor) const {
  return bytes_.subspan(data_start_ + tensor.offset, tensor.bytes);
}

// ---------------------------------------------------------------------------------------------
// Writing.

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& [name, existing] : metadata_) {
    if (name == key) {
      existing = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

Status GgufWriter::add_tensor(std::string name, std::vector<std::uint64_t> dims, TensorType type,
                              std::vector<std::byte> data) {
  if (name.empty() || name.size() > kGgufMaxTensorNameBytes) {
    return invalid_argument(fmt::format("a tensor name must be 1 to {} bytes", kGgufMaxTensorNameBytes));
  }
  if (dims.empty() || dims.size() > kGgufMaxDims || std::find(dims.begin(), dims.end(), 0) != dims.end()) {
    return invalid_argument("tensor '" + name + "' needs 1 to 4 dimensions, none of them 0");
  }
  for (const auto& pending : tensors_) {
    if (pending.info.name == name) return invalid_argument("tensor '" + name + "' was added twice");
  }
  SLIPWAY_ASSIGN_OR_RETURN(std::uint64_t bytes, tensor_bytes(type, dims));
  if (bytes != data.size()) {
    return invalid_argument(
        fmt::format("tensor '{}' needs {} bytes for its type and dimensions; {} were given", name, bytes, data.size()));
  }
  Pending pending;
  pending.info.name = std::move(name);
  pending.info.dims = std::move(dims);
  pending.info.type = type;
  pending.info.bytes = bytes;
  pending.data = std::move(data);
  tensors_.push_back(std::move(pending));
  return {};
}

std::uint64_t GgufWriter::alignment() const {
  for (const auto& [name, value] : metadata_) {
    if (name == "general.alignment") {
      auto number = value.as_unsigned();
      if (number && *number > 0 && *number % 8 == 0) return *number;
    }
  }
  return kGgufDefaultAlignment;
}

namespace {

// What the reader would refuse, refused before writing: an array whose elements are not all of
// its declared type, or nested past the limit.
Status check_value(const std::string& key, const GgufValue& value, std::uint32_t depth) {
  if (value.type() != GgufValueType::kArray) return {};
  if (depth >= kGgufMaxArrayDepth) return invalid_argument("metadata '" + key + "': arrays nested too deep");
  for (const auto& element : *value.as_array()) {
    if (element.type() != value.element_type()) {
      return invalid_argument("metadata '" + key + "': an array of " + gguf_value_type_name(value.element_type()) +
                              " holds a " + gguf_value_type_name(element.type()));
    }
    SLIPWAY_RETURN_IF_ERROR(check_value(key, element, depth + 1));
  }
  return {};
}

}  // namespace

Result<std::string> GgufWriter::serialize() const {
  for (const auto& [key, value] : metadata_) {
    if (key.empty() || key.size() > kGgufMaxKeyBytes)
      return invalid_argument("a metadata key must be 1 to 65535 bytes");
    SLIPWAY_RETURN_IF_ERROR(check_value(key, value, 0));
    if (key == "general.alignment") {
      auto number = value.as_unsigned();
      if (value.type() != GgufValueType::kUint32 || !number || *number == 0 || (*number & (*number - 1)) != 0 ||
          *number < 8) {
        return invalid_argument("general.alignment must be a u32 power of two, at least 8");
      }
    }
  }
  const std::uint64_t align = alignment();
  std::string out;
  Encoder encoder(out);
  encoder.put(kMagic);
  encoder.put(kWrittenVersion);
  encoder.put<std::uint64_t>(tensors_.size());
  encoder.put<std::uint64_t>(metadata_.size());
  for (const auto& [key, value] : metadata_) {
    encoder.put_string(key);
    encoder.put(static_cast<std::uint32_t>(value.type()));
    encoder.put_value(value);
  }
  std::uint64_t offset = 0;
  for (const auto& pending : tensors_) {
    encoder.put_string(pending.info.name);
    encoder.put(static_cast<std::uint32_t>(pending.info.dims.size()));
    for (std::uint64_t dim : pending.info.dims) encoder.put(dim);
    encoder.put(static_cast<std::uint32_t>(pending.info.type));
    encoder.put(offset);
    offset = align_up(offset + pending.info.bytes, align);
  }
  out.resize(align_up(out.size(), align), '\0');
  for (const auto& pending : tensors_) {
    out.append(reinterpret_cast<const char*>(pending.data.data()), pending.data.size());
    out.resize(align_up(out.size(), align), '\0');
  }
  return out;
}

Status GgufWriter::write(const std::string& path) const {
  SLIPWAY_ASSIGN_OR_RETURN(std::string bytes, serialize());
  return write_file_atomic(path, std::string_view(bytes));
}

}  // namespace slipway::llm
