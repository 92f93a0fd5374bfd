// libFuzzer target: any bytes as a bundle file. Parsing must fail cleanly or give a usable bundle.
#include <cstddef>
#include <cstdint>
#include <span>

#include "slipway/model.h"

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point, a fixed name
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  auto bundle = slipway::model::Bundle::parse(std::as_bytes(std::span(bytes, size)));
  if (bundle.ok()) (void)(*bundle)->serialize();
  return 0;
}
