// What optimize's measurements share: a scratch workspace and the real server on loopback,
// serving it from a thread of this process. Private to optimize.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "slipway/registry.h"
#include "slipway/serve.h"

namespace slipway::optimize {

// A workspace in the temporary folder, removed with everything in it when this goes.
class ScratchWorkspace {
 public:
  static Result<std::unique_ptr<ScratchWorkspace>> create();
  ~ScratchWorkspace();
  ScratchWorkspace(const ScratchWorkspace&) = delete;
  ScratchWorkspace& operator=(const ScratchWorkspace&) = delete;

  registry::Registry& registry() { return *registry_; }
  // Stores the bundle and registers it as a new version of `name`.
  Status add(const std::string& name, const model::Bundle& bundle);

 private:
  explicit ScratchWorkspace(std::string path) : path_(std::move(path)) {}
  std::string path_;
  std::unique_ptr<registry::Registry> registry_;
};

// The real server on 127.0.0.1 (a free port), serving a registry from a thread of this process
// with `threads` workers; it drains and stops when this goes.
class LoopbackServer {
 public:
  static Result<std::unique_ptr<LoopbackServer>> start(registry::Registry& registry, int threads);
  ~LoopbackServer();
  LoopbackServer(const LoopbackServer&) = delete;
  LoopbackServer& operator=(const LoopbackServer&) = delete;

  std::string url(std::string_view path) const;

 private:
  LoopbackServer() = default;
  std::unique_ptr<serve::Server> server_;
  std::jthread runner_;
};

}  // namespace slipway::optimize
