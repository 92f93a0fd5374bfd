// Tensors of the Open Inference Protocol v2 over REST: decoding inputs from JSON or from Triton's
// binary tensor extension, with every numeric datatype coerced to float32 or refused with a
// clear error. Private to serve.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "slipway/core.h"

namespace slipway::serve {

enum class Datatype {
  kBool,
  kUint8,
  kUint16,
  kUint32,
  kUint64,
  kInt8,
  kInt16,
  kInt32,
  kInt64,
  kFp16,
  kBf16,
  kFp32,
  kFp64,
  kBytes
};

// InvalidArgument listing the datatypes for a name that is none of them.
Result<Datatype> parse_datatype(std::string_view name);
std::string_view datatype_name(Datatype datatype);
// Bytes per element; 0 for BYTES (variable).
std::size_t datatype_size(Datatype datatype);

struct TensorInput {
  std::string name;
  Datatype datatype = Datatype::kFp32;
  std::vector<std::uint64_t> shape;
  std::size_t element_count = 0;
  // Numeric datatypes: the values as float32, NaN where missing (JSON null, or NaN itself).
  std::vector<float> numbers;
  // BYTES: the values, nullopt where missing. They view the request body, which outlives them.
  std::vector<std::optional<std::string_view>> texts;
  // parameters.binary_data_size: the tensor's bytes follow the JSON (filled by decode_binary).
  std::optional<std::size_t> binary_size;
};

// Reads inputs[position] of a request; a tensor with binary_data_size gets its values later,
// from read_binary_inputs.
Result<TensorInput> read_input(simdjson::dom::element item, std::size_t position);
// Fills the binary inputs, in input order, from the bytes after the JSON. The sizes must match
// the shapes and add up to exactly `binary`'s length.
Status read_binary_inputs(std::vector<TensorInput>& inputs, std::string_view binary);

}  // namespace slipway::serve
