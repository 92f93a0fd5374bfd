// Resolves model names and versions through the registry and keeps loaded bundles. Private to serve.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "slipway/model.h"
#include "slipway/registry.h"

namespace slipway::serve {

struct ServableModel {
  std::string name;
  std::int64_t version = 0;
  std::vector<std::int64_t> versions;  // every registered version of the model
  std::shared_ptr<const model::Bundle> bundle;
};

class ModelRepository {
 public:
  ModelRepository(registry::Registry& registry, std::chrono::milliseconds refresh);

  // `version` empty: the version aliased `production`, else the latest. NotFound for an unknown
  // model or version; DataLoss when the stored bundle fails its hash check. Thread-safe.
  Result<ServableModel> resolve(const std::string& name, std::optional<std::int64_t> version);
  std::vector<std::string> model_names();

 private:
  struct CachedModel {
    std::chrono::steady_clock::time_point fetched;
    std::vector<registry::ModelVersion> versions;
  };

  Result<std::vector<registry::ModelVersion>> versions_of(const std::string& name, bool force_refresh);
  Result<std::shared_ptr<const model::Bundle>> bundle_for(const std::string& sha256);

  registry::Registry& registry_;
  std::chrono::milliseconds refresh_;
  std::mutex mutex_;
  std::map<std::string, CachedModel> models_;
  std::map<std::string, std::shared_ptr<const model::Bundle>> bundles_;
};

}  // namespace slipway::serve
