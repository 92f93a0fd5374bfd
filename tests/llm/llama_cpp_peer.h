// llama.cpp as a peer for the LLM tests: node-llama-cpp (llama.cpp's prebuilt CPU library, driven
// from Node.js scripts in tests/llm/) in ~/.cache/slipway-peers-llama.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <string>

#include "support/test_support.h"

namespace slipway::testing {

// The node_modules folder holding node-llama-cpp, installed on first use with a three-minute
// bound; empty when Node.js, npm or the network is missing (tests then skip).
inline std::string llama_cpp_modules() {
  const char* home = std::getenv("HOME");
  if (home == nullptr || run_command({"/usr/bin/env", "node", "--version"}).exit_code != 0) return "";
  std::string prefix = std::string(home) + "/.cache/slipway-peers-llama";
  std::string modules = prefix + "/node_modules";
  if (std::filesystem::exists(modules + "/node-llama-cpp/dist/index.js")) return modules;
  std::filesystem::create_directories(prefix);
  auto installed = run_command({"/usr/bin/env", "timeout", "180", "npm", "install", "--prefix", prefix, "-E",
                                "--omit=optional", "--no-audit", "--no-fund", "--fetch-timeout=20000",
                                "node-llama-cpp@3.21.1", "@node-llama-cpp/linux-x64@3.21.1"});
  return installed.exit_code == 0 ? modules : "";
}

}  // namespace slipway::testing
