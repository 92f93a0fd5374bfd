// The models a server holds: resolves names and versions through the registry, loads bundles
// with their serving configuration (and batchers), swaps versions and configurations without a
// gap, unloads idle models and keeps loaded models inside a memory budget. Private to serve.
//
// Swaps are availability-preserving: while the default version of a model is loaded, a new
// version (or a new configuration) loads in the background and takes requests once it is ready;
// the old one stays referenced by the requests still using it and is freed when they finish. A
// load that fails leaves the old one serving and is not retried until the version or the
// configuration changes again.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "serve/batcher.h"
#include "serve/server_metrics.h"
#include "slipway/model.h"
#include "slipway/registry.h"
#include "slipway/serve.h"

namespace slipway::serve {

// One loaded model version with the configuration it serves under. Immutable once loaded, apart
// from last_used.
struct LoadedModel {
  std::string name;
  std::int64_t version = 0;
  std::string version_text;
  std::string bundle_sha256;
  std::shared_ptr<const model::Bundle> bundle;
  ModelServingConfig config;
  std::shared_ptr<Batcher> batcher;  // null when the configuration does not batch
  std::size_t memory_bytes = 0;
  mutable std::atomic<std::int64_t> last_used_ns{0};
};

struct Servable {
  std::shared_ptr<const LoadedModel> model;
  std::shared_ptr<const std::vector<std::int64_t>> versions;  // every registered version of the model
};

// One row of the repository index (Triton's shape).
struct ModelState {
  std::string name;
  std::string version;  // empty when no version is loaded
  std::string state;    // READY or UNAVAILABLE
  std::string reason;
};

class ModelManager {
 public:
  struct Options {
    std::chrono::milliseconds refresh{1000};
    ModelServingConfig defaults;
    std::map<std::string, std::map<std::string, std::string>> overrides;
    std::size_t memory_budget_bytes = 0;
  };

  ModelManager(registry::Registry& registry, Options options, ServerMetrics& metrics);
  ~ModelManager();  // stops the lifecycle thread and every batcher
  ModelManager(const ModelManager&) = delete;
  ModelManager& operator=(const ModelManager&) = delete;

  // The model serving `name` at `version` (none: the version aliased `production`, else the
  // latest), loaded now if it is not. NotFound for an unknown model or version; Unavailable for a
  // model the operator unloaded or one that does not fit the memory budget; DataLoss for a
  // damaged bundle. Thread-safe.
  Result<Servable> acquire(const std::string& name, std::optional<std::int64_t> version);
  // True when `name` resolved to a registered model at least once (a name that never did cannot
  // be a metric label). Thread-safe.
  bool knows(std::string_view name) const;
  // Replaces the server-wide defaults and the per-model overrides (a reloaded --config file).
  // Models pick them up on their next request and swap as for any configuration change.
  void set_serving_configs(ModelServingConfig defaults,
                           std::map<std::string, std::map<std::string, std::string>> overrides);
  // The repository API: (re)loads the default version with the current configuration and makes
  // it serve; undoes an unload. A failure leaves what was serving.
  Status load(const std::string& name);
  // Unloads every version of `name`; requests get Unavailable until load(). NotFound for a name
  // the registry does not know.
  Status unload(const std::string& name);
  std::vector<ModelState> index(bool ready_only);
  // Loads the default version of every registered model; "name@version" for each one loaded.
  std::vector<std::string> load_all(const std::set<std::string>& skip = {});
  // Answers queued batched requests Unavailable and stops batching; later loads do not batch.
  void stop_batching();

 private:
  // What the registry said about a model at the last refresh, with the configuration it resolves
  // to; shared by the requests of the next refresh period, so a request copies nothing.
  struct Resolution {
    std::vector<registry::ModelVersion> versions;
    std::vector<std::int64_t> numbers;
    ModelServingConfig config;
    Status config_error;  // an invalid stored config: requests get it until it is fixed
  };
  struct Slot {
    std::shared_ptr<const Resolution> resolution;
    std::chrono::steady_clock::time_point fetched;
    std::map<std::int64_t, std::shared_ptr<LoadedModel>> loaded;
    std::optional<std::int64_t> default_version;  // the version the unversioned routes serve now
    bool unloaded = false;                        // by the operator
    bool background_load = false;                 // queued or running
    std::string failed_load;                      // the sha256 and configuration of the last failed load
    Status failure;                               // its error; ok when the last load succeeded
    std::chrono::steady_clock::time_point failed_at;
    std::shared_ptr<std::mutex> load_mutex = std::make_shared<std::mutex>();
  };
  struct Target {
    std::shared_ptr<const Resolution> resolution;
    const registry::ModelVersion* version = nullptr;  // inside resolution
    const ModelServingConfig& config() const { return resolution->config; }
    std::shared_ptr<const std::vector<std::int64_t>> versions() const { return {resolution, &resolution->numbers}; }
  };

  // Refreshes the slot's resolution when older than the refresh period.
  Status refresh(const std::string& name, bool force);
  Resolution resolve_config(const std::string& name, std::vector<registry::ModelVersion> versions,
                            const std::map<std::string, std::string>& registry_config) const;
  Result<Target> target_of(const std::string& name, std::optional<std::int64_t> version);
  Result<std::shared_ptr<LoadedModel>> load_version(const std::string& name, const registry::ModelVersion& version,
                                                    const ModelServingConfig& config);
  // Puts `fresh` in its slot (retiring what it replaces), makes it the default when asked and
  // keeps the budget. Unavailable when it cannot fit even alone. Lock held.
  Status install(const std::shared_ptr<LoadedModel>& fresh, bool as_default);
  void retire(Slot& slot, std::int64_t version, std::string_view reason);  // lock held
  // Remembers a failed load, so it is not retried until its version or configuration changes.
  static void record_failure(Slot& slot, std::string key, const Status& failure);  // lock held
  void run_lifecycle();
  void background_load(const std::string& name);
  void unload_idle();
  void release_retired();
  static std::string load_key(const registry::ModelVersion& version, const ModelServingConfig& config);

  registry::Registry& registry_;
  Options options_;
  ServerMetrics& metrics_;
  mutable std::mutex mutex_;
  std::map<std::string, Slot, std::less<>> slots_;
  // Guards options_.defaults and options_.overrides, which a reload replaces.
  mutable std::mutex config_mutex_;
  // Batchers of models no longer served, kept until their queues drain and no request holds them.
  std::vector<std::shared_ptr<Batcher>> retired_;
  std::deque<std::string> pending_loads_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool batching_stopped_ = false;
  std::thread lifecycle_;
};

}  // namespace slipway::serve
