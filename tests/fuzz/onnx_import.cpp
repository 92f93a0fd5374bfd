// libFuzzer target: any bytes as an ONNX file for `slipway import onnx`. Import must fail with a
// message or give a bundle that predicts.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "slipway/model.h"

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point, a fixed name
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  auto bundle = slipway::model::import_onnx(std::as_bytes(std::span(bytes, size)), {});
  if (bundle.ok()) {
    std::vector<float> row((*bundle)->preprocessor().output_width(), 0.5f);
    (void)(*bundle)->predict_preprocessed(row, 1);
  }
  return 0;
}
