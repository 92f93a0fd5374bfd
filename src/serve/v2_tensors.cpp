#include "serve/v2_tensors.h"

#include <algorithm>

#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>

#include "slipway/serve.h"

namespace slipway::serve {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

static_assert(std::endian::native == std::endian::little, "binary tensors are little-endian, as is the host");

constexpr int kMaxNesting = 8;

struct DatatypeInfo {
  Datatype datatype;
  std::string_view name;
  std::size_t size;
};

constexpr DatatypeInfo kDatatypes[] = {
    {Datatype::kBool, "BOOL", 1},     {Datatype::kUint8, "UINT8", 1},   {Datatype::kUint16, "UINT16", 2},
    {Datatype::kUint32, "UINT32", 4}, {Datatype::kUint64, "UINT64", 8}, {Datatype::kInt8, "INT8", 1},
    {Datatype::kInt16, "INT16", 2},   {Datatype::kInt32, "INT32", 4},   {Datatype::kInt64, "INT64", 8},
    {Datatype::kFp16, "FP16", 2},     {Datatype::kBf16, "BF16", 2},     {Datatype::kFp32, "FP32", 4},
    {Datatype::kFp64, "FP64", 8},     {Datatype::kBytes, "BYTES", 0},
};

const DatatypeInfo& info(Datatype datatype) {
  for (const auto& entry : kDatatypes) {
    if (entry.datatype == datatype) return entry;
  }
  return kDatatypes[0];
}

bool is_integer(Datatype datatype) {
  switch (datatype) {
    case Datatype::kUint8:
    case Datatype::kUint16:
    case Datatype::kUint32:
    case Datatype::kUint64:
    case Datatype::kInt8:
    case Datatype::kInt16:
    case Datatype::kInt32:
    case Datatype::kInt64:
      return true;
    default:
      return false;
  }
}

// The integer range of an integer datatype, as doubles (exact for the bounds that matter).
std::pair<double, double> integer_range(Datatype datatype) {
  switch (datatype) {
    case Datatype::kUint8:
      return {0, 255};
    case Datatype::kUint16:
      return {0, 65535};
    case Datatype::kUint32:
      return {0, 4294967295.0};
    case Datatype::kUint64:
      return {0, 18446744073709551615.0};
    case Datatype::kInt8:
      return {-128, 127};
    case Datatype::kInt16:
      return {-32768, 32767};
    case Datatype::kInt32:
      return {-2147483648.0, 2147483647.0};
    default:
      return {-9223372036854775808.0, 9223372036854775807.0};
  }
}

float half_to_float(std::uint16_t bits) {
  float sign = (bits & 0x8000) != 0 ? -1.0f : 1.0f;
  int exponent = (bits >> 10) & 0x1f;
  int mantissa = bits & 0x3ff;
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  if (exponent == 31) return mantissa != 0 ? std::numeric_limits<float>::quiet_NaN() : sign * INFINITY;
  return sign * std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
}

// The shape as text: "[2,3]".
std::string shape_text(const std::vector<std::uint64_t>& shape) {
  std::string text;
  for (auto size : shape) text += (text.empty() ? "" : ",") + std::to_string(size);
  return "[" + text + "]";
}

// Collects the leaves of `data` in row-major order. Data is either flat (one array of values) or
// nested exactly as the shape says: every array at depth d has shape[d] items, and values sit
// only at the innermost depth. Anything else (ragged rows, values beside arrays) is refused.
Status flatten(element data, const TensorInput& tensor, std::vector<element>& out) {
  array top;
  if (data.get(top) != simdjson::SUCCESS)
    return invalid_argument("input '" + tensor.name + "': 'data' must be an array");
  bool nested = false;
  for (element item : top) {
    nested = item.is_array();
    break;
  }
  if (!nested) {
    for (element item : top) {
      if (item.is_array()) {
        return invalid_argument("input '" + tensor.name +
                                "' mixes values and arrays in 'data'; send it flat or nested as its shape " +
                                shape_text(tensor.shape));
      }
      out.push_back(item);
    }
    return {};
  }
  if (tensor.shape.size() > static_cast<std::size_t>(kMaxNesting)) {
    return invalid_argument("input '" + tensor.name + "': tensor data is nested too deeply");
  }
  auto walk = [&](auto& self, element value, std::size_t depth) -> Status {
    bool innermost = depth == tensor.shape.size();
    if (innermost) {
      if (value.is_array()) {
        return invalid_argument("input '" + tensor.name + "' has data nested deeper than its shape " +
                                shape_text(tensor.shape));
      }
      out.push_back(value);
      return {};
    }
    array items;
    if (value.get(items) != simdjson::SUCCESS) {
      return invalid_argument("input '" + tensor.name + "' has ragged data: a value where its shape " +
                              shape_text(tensor.shape) + " needs an array at depth " + std::to_string(depth + 1));
    }
    if (items.size() != tensor.shape[depth]) {
      return invalid_argument("input '" + tensor.name + "' has ragged data: an array of " +
                              std::to_string(items.size()) + " items at depth " + std::to_string(depth + 1) +
                              " where its shape " + shape_text(tensor.shape) + " needs " +
                              std::to_string(tensor.shape[depth]));
    }
    for (element item : items) SLIPWAY_RETURN_IF_ERROR(self(self, item, depth + 1));
    return {};
  };
  return walk(walk, data, 0);
}

std::string number_text(double value) {
  char buffer[32];
  auto written = std::to_chars(buffer, buffer + sizeof buffer, value);
  return {buffer, written.ptr};
}

constexpr std::string_view kFiniteOnly = "; models take finite numbers (null, or NaN in binary data, for missing)";

// One JSON element of a numeric tensor as float32; null (a Slipway extension) is missing.
Result<float> json_number(element value, const TensorInput& input) {
  auto refuse = [&](const std::string& what) {
    return invalid_argument("input '" + input.name + "' is " + std::string(datatype_name(input.datatype)) +
                            " but holds " + what);
  };
  Datatype datatype = input.datatype;
  switch (value.type()) {
    case element_type::NULL_VALUE:
      return std::numeric_limits<float>::quiet_NaN();
    case element_type::BOOL: {
      if (datatype != Datatype::kBool) return refuse("a boolean; send numbers, or declare the input BOOL");
      return value.get_bool().value_unsafe() ? 1.0f : 0.0f;
    }
    case element_type::INT64:
    case element_type::UINT64:
    case element_type::DOUBLE: {
      double number = 0;
      if (value.type() == element_type::INT64) {
        number = static_cast<double>(value.get_int64().value_unsafe());
      } else if (value.type() == element_type::UINT64) {
        number = static_cast<double>(value.get_uint64().value_unsafe());
      } else {
        number = value.get_double().value_unsafe();
      }
      if (datatype == Datatype::kBool) {
        if (number == 0 || number == 1) return static_cast<float>(number);
        return refuse(number_text(number) + "; BOOL values are true, false, 0 or 1");
      }
      if (is_integer(datatype)) {
        if (number != std::trunc(number)) return refuse(number_text(number) + ", which is not an integer");
        auto [low, high] = integer_range(datatype);
        if (number < low || number > high) return refuse(number_text(number) + ", outside the type's range");
      }
      if (datatype == Datatype::kFp16 || datatype == Datatype::kBf16) {
        return refuse("a JSON number; FP16 and BF16 travel only as binary tensor data (or send FP32)");
      }
      auto single = static_cast<float>(number);
      if (std::isinf(single)) {
        return refuse(number_text(number) + ", which is infinite as a 32-bit float" + std::string(kFiniteOnly));
      }
      return single;
    }
    default:
      return refuse("a non-numeric value; send numbers (or null for missing)");
  }
}

template <typename T>
T read_le(const char* bytes) {
  T value;
  std::memcpy(&value, bytes, sizeof(T));
  return value;
}

float binary_number(Datatype datatype, const char* bytes) {
  switch (datatype) {
    case Datatype::kBool:
      return *bytes != 0 ? 1.0f : 0.0f;
    case Datatype::kUint8:
      return static_cast<float>(read_le<std::uint8_t>(bytes));
    case Datatype::kUint16:
      return static_cast<float>(read_le<std::uint16_t>(bytes));
    case Datatype::kUint32:
      return static_cast<float>(read_le<std::uint32_t>(bytes));
    case Datatype::kUint64:
      return static_cast<float>(read_le<std::uint64_t>(bytes));
    case Datatype::kInt8:
      return static_cast<float>(read_le<std::int8_t>(bytes));
    case Datatype::kInt16:
      return static_cast<float>(read_le<std::int16_t>(bytes));
    case Datatype::kInt32:
      return static_cast<float>(read_le<std::int32_t>(bytes));
    case Datatype::kInt64:
      return static_cast<float>(read_le<std::int64_t>(bytes));
    case Datatype::kFp16:
      return half_to_float(read_le<std::uint16_t>(bytes));
    case Datatype::kBf16:
      return std::bit_cast<float>(std::uint32_t{read_le<std::uint16_t>(bytes)} << 16);
    case Datatype::kFp32:
      return read_le<float>(bytes);
    case Datatype::kFp64:
      return static_cast<float>(read_le<double>(bytes));
    case Datatype::kBytes:
      break;
  }
  return std::numeric_limits<float>::quiet_NaN();
}

}  // namespace

Result<Datatype> parse_datatype(std::string_view name) {
  for (const auto& entry : kDatatypes) {
    if (entry.name == name) return entry.datatype;
  }
  std::string names;
  for (const auto& entry : kDatatypes) names += (names.empty() ? "" : ", ") + std::string(entry.name);
  return invalid_argument("unknown datatype '" + std::string(name) + "'; use one of " + names);
}

std::string_view datatype_name(Datatype datatype) { return info(datatype).name; }

std::size_t datatype_size(Datatype datatype) { return info(datatype).size; }

Result<TensorInput> read_input(element item, std::size_t position) {
  object input;
  if (item.get(input) != simdjson::SUCCESS) {
    return invalid_argument("inputs[" + std::to_string(position) + "] must be an object");
  }
  TensorInput tensor;
  std::string_view text;
  if (input["name"].get(text) != simdjson::SUCCESS) {
    return invalid_argument("inputs[" + std::to_string(position) + "] needs a string 'name'");
  }
  tensor.name = std::string(text);
  // Error messages are built only on the error paths: this runs for every input of every request.
  auto where = [&] { return "input '" + tensor.name + "'"; };
  if (input["datatype"].get(text) != simdjson::SUCCESS) return invalid_argument(where() + " needs a string 'datatype'");
  auto datatype = parse_datatype(text);
  if (!datatype.ok()) return invalid_argument(where() + ": " + datatype.status().message());
  tensor.datatype = *datatype;
  array shape;
  if (input["shape"].get(shape) != simdjson::SUCCESS) return invalid_argument(where() + " needs a 'shape' array");
  std::uint64_t expected = 1;
  for (element dimension : shape) {
    std::uint64_t size = 0;
    if (dimension.get(size) != simdjson::SUCCESS) {
      return invalid_argument(where() + " has a shape entry that is not a non-negative integer");
    }
    if (size != 0 && expected > std::numeric_limits<std::uint32_t>::max() / size) {
      return invalid_argument(where() + " has an impossibly large shape");
    }
    expected *= size;
    tensor.shape.push_back(size);
  }
  if (tensor.shape.empty()) return invalid_argument(where() + " needs a shape with at least one dimension");
  tensor.element_count = static_cast<std::size_t>(expected);

  object parameters;
  if (input["parameters"].get(parameters) == simdjson::SUCCESS) {
    element size_value;
    if (parameters["binary_data_size"].get(size_value) == simdjson::SUCCESS) {
      std::uint64_t size = 0;
      if (size_value.get(size) != simdjson::SUCCESS) {
        return invalid_argument(where() + ": parameters.binary_data_size must be a non-negative integer");
      }
      tensor.binary_size = static_cast<std::size_t>(size);
    }
  }
  element data;
  bool has_data = input["data"].get(data) == simdjson::SUCCESS;
  if (tensor.binary_size) {
    if (has_data) return invalid_argument(where() + " has both 'data' and parameters.binary_data_size; send one");
    return tensor;
  }
  if (!has_data) return invalid_argument(where() + " needs 'data' (or parameters.binary_data_size)");
  thread_local std::vector<element> values;
  values.clear();
  SLIPWAY_RETURN_IF_ERROR(flatten(data, tensor, values));
  if (values.size() != tensor.element_count) {
    return invalid_argument(where() + " has " + std::to_string(values.size()) + " values but its shape " +
                            shape_text(tensor.shape) + " needs " + std::to_string(tensor.element_count));
  }
  if (tensor.datatype == Datatype::kBytes) {
    tensor.texts.reserve(values.size());
    for (element value : values) {
      if (value.is_null()) {
        tensor.texts.emplace_back(std::nullopt);
        continue;
      }
      if (value.get(text) != simdjson::SUCCESS) {
        return invalid_argument(where() + " is BYTES; its values must be strings (or null for missing)");
      }
      tensor.texts.emplace_back(text);
    }
  } else {
    tensor.numbers.reserve(values.size());
    for (element value : values) {
      SLIPWAY_ASSIGN_OR_RETURN(float number, json_number(value, tensor));
      tensor.numbers.push_back(number);
    }
  }
  return tensor;
}

Status read_binary_inputs(std::vector<TensorInput>& inputs, std::string_view binary) {
  std::size_t offset = 0;
  for (auto& input : inputs) {
    if (!input.binary_size) continue;
    std::size_t size = *input.binary_size;
    std::string where = "input '" + input.name + "'";
    if (size > binary.size() - offset) {
      return invalid_argument("the binary data of " + where + " needs " + std::to_string(size) + " bytes but only " +
                              std::to_string(binary.size() - offset) + " follow (is the body truncated?)");
    }
    std::string_view bytes = binary.substr(offset, size);
    offset += size;
    if (input.datatype == Datatype::kBytes) {
      // Each element: a 4-byte little-endian length, then that many bytes.
      std::size_t at = 0;
      while (at < bytes.size()) {
        if (bytes.size() - at < 4) return invalid_argument(where + ": a BYTES element's 4-byte length is cut off");
        auto length = read_le<std::uint32_t>(bytes.data() + at);
        at += 4;
        if (length > bytes.size() - at) {
          return invalid_argument(where + ": a BYTES element of " + std::to_string(length) +
                                  " bytes runs past the tensor's binary_data_size");
        }
        input.texts.emplace_back(bytes.substr(at, length));
        at += length;
      }
      if (input.texts.size() != input.element_count) {
        return invalid_argument(where + " holds " + std::to_string(input.texts.size()) +
                                " BYTES elements but its shape needs " + std::to_string(input.element_count));
      }
      continue;
    }
    std::size_t element_size = datatype_size(input.datatype);
    if (size != input.element_count * element_size) {
      return invalid_argument(where + " has binary_data_size " + std::to_string(size) + " but its shape and " +
                              std::string(datatype_name(input.datatype)) + " need " +
                              std::to_string(input.element_count * element_size) + " bytes");
    }
    input.numbers.resize(input.element_count);
    for (std::size_t index = 0; index < input.element_count; ++index) {
      float number = binary_number(input.datatype, bytes.data() + index * element_size);
      if (std::isinf(number)) {
        return invalid_argument(where + " holds an infinite value at element " + std::to_string(index) + " (as a " +
                                "32-bit float)" + std::string(kFiniteOnly));
      }
      input.numbers[index] = number;
    }
  }
  if (offset != binary.size()) {
    return invalid_argument(
        std::to_string(binary.size() - offset) +
        " bytes follow the binary inputs' data; their binary_data_size must cover the body exactly");
  }
  return {};
}

std::vector<std::string> v2_requests_from_table(const data::Table& table, std::size_t rows_per_request,
                                                const std::vector<std::string>& skip_columns,
                                                std::size_t max_requests) {
  std::vector<std::string> bodies;
  std::size_t per_request = std::max<std::size_t>(1, rows_per_request);
  for (std::size_t first = 0; first + per_request <= table.row_count() && bodies.size() < max_requests;
       first += per_request) {
    JsonWriter json;
    json.begin_object().key("inputs").begin_array();
    for (const auto& column : table.columns()) {
      if (std::find(skip_columns.begin(), skip_columns.end(), column.name) != skip_columns.end()) continue;
      bool numeric = column.type == data::ColumnType::kNumeric;
      json.begin_object().key("name").value(column.name).key("datatype").value(numeric ? "FP32" : "BYTES");
      json.key("shape").begin_array().value(static_cast<std::uint64_t>(per_request)).end_array();
      json.key("data").begin_array();
      for (std::size_t row = first; row < first + per_request; ++row) {
        if (column.is_missing(row)) {
          json.null();
        } else if (numeric) {
          json.value(column.numbers[row]);
        } else {
          json.value(column.text_at(row));
        }
      }
      json.end_array().end_object();
    }
    json.end_array().end_object();
    bodies.push_back(json.take());
  }
  return bodies;
}

}  // namespace slipway::serve
