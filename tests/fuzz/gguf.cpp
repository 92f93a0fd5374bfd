// libFuzzer target: any bytes as a GGUF file. Parsing must fail with a message or give tensors
// whose data lies inside the bytes.
#include <cstddef>
#include <cstdint>
#include <span>

#include "slipway/llm.h"

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point, a fixed name
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  auto input = std::as_bytes(std::span(bytes, size));
  auto file = slipway::llm::GgufFile::parse(input, "fuzz.gguf");
  if (file.ok()) {
    std::size_t checksum = 0;
    for (const auto& tensor : file->tensors()) {
      auto data = file->data(tensor);
      if (!data.empty()) checksum += static_cast<std::size_t>(data.back());
    }
    (void)checksum;
  }
  return 0;
}
