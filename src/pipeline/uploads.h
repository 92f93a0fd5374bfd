// What the operations that take a client's bytes share (private to pipeline).
#pragma once

#include <string>
#include <string_view>

#include "slipway/core.h"

namespace slipway::pipeline {

// InvalidArgument, naming both hashes, unless `bytes` hash to `expected_sha256`: an upload that
// was truncated or changed on the way is refused before anything is stored.
inline Status check_upload_sha256(std::string_view bytes, const std::string& expected_sha256) {
  std::string actual = sha256_hex(bytes);
  if (expected_sha256 == actual) return {};
  return invalid_argument("the file's bytes hash to sha256 " + actual + ", not the " +
                          (expected_sha256.empty() ? std::string("(missing)") : expected_sha256.substr(0, 64)) +
                          " sent with them: it was truncated or changed on the way, and nothing was stored");
}

}  // namespace slipway::pipeline
