// What the operations every front door calls share (private to pipeline): who they act as, the
// plain-text rule for what a person types, and the hash check of a client's bytes.
#pragma once

#include <string>
#include <string_view>

#include "slipway/pipeline.h"

namespace slipway::pipeline {

// The audit log names the caller for what follows (the registry's own actor when it has none).
inline void act_as(registry::Registry& registry, const Caller& caller) {
  if (!caller.actor.empty()) registry.set_actor(caller.actor);
}

// NUL, ESC, newlines and DEL: what must not reach a terminal or a log from text a person typed.
inline bool has_control_characters(std::string_view text) {
  for (char byte : text) {
    auto code = static_cast<unsigned char>(byte);
    if (code < 0x20 || code == 0x7f) return true;
  }
  return false;
}

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
