#include "optimize/loopback.h"

#include <fmt/format.h>
#include <stdlib.h>

#include <filesystem>

namespace slipway::optimize {

Result<std::unique_ptr<ScratchWorkspace>> ScratchWorkspace::create() {
  std::string pattern = (std::filesystem::temp_directory_path() / "slipway-optimize-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return io_error("cannot create a scratch workspace under " + std::filesystem::temp_directory_path().string());
  }
  auto scratch = std::unique_ptr<ScratchWorkspace>(new ScratchWorkspace(pattern));
  SLIPWAY_ASSIGN_OR_RETURN(scratch->registry_, registry::Registry::open(pattern, true));
  return scratch;
}

ScratchWorkspace::~ScratchWorkspace() {
  registry_.reset();
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

Status ScratchWorkspace::add(const std::string& name, const model::Bundle& bundle) {
  SLIPWAY_ASSIGN_OR_RETURN(std::string sha256, registry_->artifacts().put(bundle.serialize()));
  return registry_->models().register_version(name, sha256, "").status();
}

Result<std::unique_ptr<LoopbackServer>> LoopbackServer::start(registry::Registry& registry, int threads) {
  serve::ServerOptions options;
  options.http.port = 0;
  options.http.worker_threads = threads;
  options.http.handle_signals = false;  // Ctrl-C is the command's, not the measuring server's
  auto server = std::unique_ptr<LoopbackServer>(new LoopbackServer());
  SLIPWAY_ASSIGN_OR_RETURN(server->server_, serve::Server::start(registry, options));
  server->server_->service().warm_up();
  server->runner_ = std::jthread([raw = server->server_.get()] { raw->run(); });
  return server;
}

LoopbackServer::~LoopbackServer() {
  if (server_ != nullptr) server_->stop();
  if (runner_.joinable()) runner_.join();
}

std::string LoopbackServer::url(std::string_view path) const {
  return fmt::format("http://127.0.0.1:{}{}", server_->port(), path);
}

}  // namespace slipway::optimize
