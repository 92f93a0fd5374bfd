// libFuzzer target: any bytes as the body of a v2 infer request to a served model.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "slipway/serve.h"
#include "slipway/train.h"

namespace {

slipway::serve::Service& service() {
  static auto* registry = [] {
    auto home = std::filesystem::temp_directory_path() / ("slipway-fuzz-" + slipway::random_hex(6));
    auto store = std::move(slipway::registry::Registry::open(home.string(), true)).value();
    auto table = slipway::data::parse_csv("x,color,y\n1,red,a\n2,blue,b\n3,red,b\nNA,green,a\n", "seed.csv");
    auto summary = slipway::train::fit(*table, slipway::train::TrainRequest{.target = "y"});
    auto sha = store->artifacts().put(summary->bundle->serialize());
    (void)store->models().register_version("m", *sha, "");
    return store.release();
  }();
  static slipway::serve::Service instance(*registry, {});
  return instance;
}

}  // namespace

// An input starting with 'B' is a binary-tensor request: the next two bytes give the JSON
// header's length (Inference-Header-Content-Length), the rest is the body.
// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point, a fixed name
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  std::string_view body(reinterpret_cast<const char*>(bytes), size);
  slipway::serve::RequestHeaders headers;
  std::string header_length;
  if (size >= 3 && bytes[0] == 'B') {
    header_length = std::to_string(bytes[1] | (bytes[2] << 8));
    headers.inference_header_length = header_length;
    body.remove_prefix(3);
  }
  auto response = service().handle("POST", "/v2/models/m/infer", body, headers);
  if (response.status >= 500) __builtin_trap();  // bad input must be a 4xx, never a server error
  return 0;
}
