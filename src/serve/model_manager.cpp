#include "serve/model_manager.h"

#include <algorithm>

namespace slipway::serve {
namespace {

using Clock = std::chrono::steady_clock;

void touch(const LoadedModel& model) { model.last_used_ns.store(monotonic_ns(), std::memory_order_relaxed); }

}  // namespace

ModelManager::ModelManager(registry::Registry& registry, Options options, ServerMetrics& metrics)
    : registry_(registry), options_(std::move(options)), metrics_(metrics) {
  lifecycle_ = std::thread([this] { run_lifecycle(); });
}

ModelManager::~ModelManager() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  lifecycle_.join();
  stop_batching();
}

std::string ModelManager::load_key(const registry::ModelVersion& version, const ModelServingConfig& config) {
  std::string key = version.bundle_sha256;
  for (const auto& [name, value] : serving_config_values(config))
    key.append(";").append(name).append("=").append(value);
  return key;
}

Status ModelManager::refresh(const std::string& name, bool force) {
  auto now = Clock::now();
  {
    std::lock_guard lock(mutex_);
    auto found = slots_.find(name);
    if (!force && found != slots_.end() && found->second.resolution != nullptr &&
        now - found->second.fetched < options_.refresh) {
      return found->second.resolution->versions.empty() ? not_found("model '" + name + "' has no versions") : Status{};
    }
  }
  // The registry is asked outside our lock; two threads may both refresh, which is harmless.
  auto versions = registry_.models().list_versions(name);
  if (!versions.ok()) {
    std::lock_guard lock(mutex_);
    auto found = slots_.find(name);
    if (found != slots_.end()) found->second.resolution.reset();
    return versions.status();
  }
  auto stored = registry_.serving_configs().get(name);
  auto resolution = std::make_shared<const Resolution>(
      resolve_config(name, std::move(versions).value(), stored.ok() ? *stored : std::map<std::string, std::string>{}));
  std::lock_guard lock(mutex_);
  Slot& slot = slots_[name];
  slot.resolution = std::move(resolution);
  slot.fetched = now;
  return {};
}

ModelManager::Resolution ModelManager::resolve_config(const std::string& name,
                                                      std::vector<registry::ModelVersion> versions,
                                                      const std::map<std::string, std::string>& registry_config) const {
  Resolution resolution;
  resolution.versions = std::move(versions);
  for (const auto& entry : resolution.versions) resolution.numbers.push_back(entry.version);
  ModelServingConfig defaults;
  std::optional<std::map<std::string, std::string>> model_overrides;
  {
    std::lock_guard lock(config_mutex_);
    defaults = options_.defaults;
    auto found = options_.overrides.find(name);
    if (found != options_.overrides.end()) model_overrides = found->second;
  }
  auto config = apply_serving_config(defaults, registry_config);
  if (!config.ok()) {
    resolution.config_error = failed_precondition("the serving config of model '" + name +
                                                  "' in the registry is invalid: " + config.status().message());
    return resolution;
  }
  if (model_overrides) {
    config = apply_serving_config(*config, *model_overrides);
    if (!config.ok()) {
      resolution.config_error =
          failed_precondition("the --config file's entry for '" + name + "': " + config.status().message());
      return resolution;
    }
  }
  resolution.config = std::move(config).value();
  return resolution;
}

bool ModelManager::knows(std::string_view name) const {
  std::lock_guard lock(mutex_);
  return slots_.find(name) != slots_.end();
}

void ModelManager::set_serving_configs(ModelServingConfig defaults,
                                       std::map<std::string, std::map<std::string, std::string>> overrides) {
  {
    std::lock_guard lock(config_mutex_);
    options_.defaults = std::move(defaults);
    options_.overrides = std::move(overrides);
  }
  std::lock_guard lock(mutex_);
  for (auto& [name, slot] : slots_) slot.fetched = {};  // resolved again on the next request
}

Result<ModelManager::Target> ModelManager::target_of(const std::string& name, std::optional<std::int64_t> version) {
  auto pick = [&](const std::vector<registry::ModelVersion>& versions) {
    return registry::select_version(versions, {.version = version});
  };
  Target target;
  // `fresh_only`: take the resolution only if it is younger than the refresh period.
  auto snapshot = [&](bool fresh_only) {
    std::lock_guard lock(mutex_);
    // find, not []: a name that resolves to nothing must leave no slot behind (every junk name
    // in a request path would otherwise grow the map).
    auto existing = slots_.find(name);
    if (existing == slots_.end()) return false;
    const Slot& slot = existing->second;
    if (fresh_only && (slot.resolution == nullptr || Clock::now() - slot.fetched >= options_.refresh)) return false;
    target.resolution = slot.resolution;
    target.version = target.resolution == nullptr ? nullptr : pick(target.resolution->versions);
    return target.version != nullptr;
  };
  // The common case takes one lock: a fresh resolution that has the version.
  bool found = snapshot(true);
  if (!found) found = refresh(name, false).ok() && snapshot(false);
  if (!found) {  // maybe registered since the last refresh
    SLIPWAY_RETURN_IF_ERROR(refresh(name, true));
    found = snapshot(false);
  }
  if (!found) {
    return not_found(version ? "model '" + name + "' has no version " + std::to_string(*version)
                             : "model '" + name + "' has no versions");
  }
  if (target.version->retired_ms > 0) {
    return failed_precondition("model '" + name + "' version " + std::to_string(target.version->version) +
                               " is retired");
  }
  if (!target.resolution->config_error.ok()) return target.resolution->config_error;
  return target;
}

Result<std::shared_ptr<LoadedModel>> ModelManager::load_version(const std::string& name,
                                                                const registry::ModelVersion& version,
                                                                const ModelServingConfig& config) {
  std::int64_t started = monotonic_ns();
  std::shared_ptr<const model::Bundle> bundle;
  bool batching_stopped = false;
  {
    // A configuration change reloads no bytes: the bundle already in memory is shared.
    std::lock_guard lock(mutex_);
    batching_stopped = batching_stopped_;
    for (const auto& [slot_name, slot] : slots_) {
      for (const auto& [number, loaded] : slot.loaded) {
        if (loaded->bundle_sha256 == version.bundle_sha256) bundle = loaded->bundle;
      }
    }
  }
  std::string what = "model '" + name + "' version " + std::to_string(version.version);
  if (bundle == nullptr) {
    if (is_gguf_artifact(registry_.artifacts().path_for(version.bundle_sha256))) {
      return failed_precondition(what + " is an LLM (GGUF): it is served with the OpenAI API under /v1, not v2");
    }
    auto read = model::Bundle::load(registry_.artifacts().path_for(version.bundle_sha256), version.bundle_sha256);
    if (!read.ok()) {
      metrics_.record_load(name, false);
      // The registry vouched for these bytes, so any failure to read them is damage, not a bad request.
      return data_loss("cannot load " + what + ": " + read.status().message());
    }
    bundle = std::move(read).value();
  }
  auto fresh = std::make_shared<LoadedModel>();
  fresh->name = name;
  fresh->version = version.version;
  fresh->version_text = std::to_string(version.version);
  fresh->bundle_sha256 = version.bundle_sha256;
  fresh->bundle = bundle;
  fresh->config = config;
  fresh->memory_bytes = bundle->memory_bytes();
  // Warm-up: the first predictions touch the model's pages and the kernels' code, so the first
  // client request does not pay for that.
  std::vector<float> row(bundle->preprocessor().output_width(), 0.0f);
  for (int request = 0; request < config.warmup_requests; ++request) (void)bundle->predict_preprocessed(row, 1);
  if (config.batching.max_batch_size > 1 && !batching_stopped) {
    fresh->batcher = std::make_shared<Batcher>(
        bundle, config.batching,
        [metrics = &metrics_, name, version_text = fresh->version_text](std::size_t rows,
                                                                        std::chrono::nanoseconds compute) {
          metrics->record_execution(name, version_text, rows, true, std::chrono::duration<double>(compute).count());
        });
  }
  touch(*fresh);
  metrics_.record_load(name, true);
  log_info(what + " loaded (" + std::to_string(fresh->memory_bytes / 1024) + " KiB, " +
           std::to_string((monotonic_ns() - started) / 1'000'000) + " ms)");
  return fresh;
}

void ModelManager::record_failure(Slot& slot, std::string key, const Status& failure) {
  slot.failed_load = std::move(key);
  slot.failure = failure;
  slot.failed_at = Clock::now();
}

void ModelManager::retire(Slot& slot, std::int64_t version, std::string_view reason) {
  auto found = slot.loaded.find(version);
  if (found == slot.loaded.end()) return;
  if (found->second->batcher != nullptr) retired_.push_back(found->second->batcher);
  metrics_.set_unloaded(found->second->name, found->second->version_text, reason);
  slot.loaded.erase(found);
}

Status ModelManager::install(const std::shared_ptr<LoadedModel>& fresh, bool as_default) {
  Slot& slot = slots_[fresh->name];
  // The default version this one replaces; 0 for none (versions start at 1).
  std::int64_t replaced_default = 0;
  if (as_default && slot.default_version && *slot.default_version != fresh->version) {
    replaced_default = *slot.default_version;
  }
  if (options_.memory_budget_bytes > 0) {
    std::size_t budget = options_.memory_budget_bytes;
    if (fresh->memory_bytes > budget) {
      return unavailable("model '" + fresh->name + "' version " + fresh->version_text + " needs " +
                         std::to_string(fresh->memory_bytes) + " bytes, more than the memory budget of " +
                         std::to_string(budget));
    }
    // What stays loaded besides the fresh model, least recently used first.
    std::vector<std::pair<std::int64_t, std::pair<std::string, std::int64_t>>> others;
    std::size_t total = 0;
    for (const auto& [name, other_slot] : slots_) {
      for (const auto& [number, loaded] : other_slot.loaded) {
        bool leaving = name == fresh->name && (number == fresh->version || number == replaced_default);
        if (leaving) continue;
        total += loaded->memory_bytes;
        others.push_back({loaded->last_used_ns.load(std::memory_order_relaxed), {name, number}});
      }
    }
    std::sort(others.begin(), others.end());
    for (const auto& [used, key] : others) {
      if (total + fresh->memory_bytes <= budget) break;
      Slot& owner = slots_[key.first];
      total -= owner.loaded[key.second]->memory_bytes;
      retire(owner, key.second, "memory_budget");
    }
  }
  retire(slot, fresh->version, "swap");
  slot.loaded[fresh->version] = fresh;
  metrics_.set_loaded(fresh->name, fresh->version_text, fresh->memory_bytes);
  if (as_default) {
    if (replaced_default != 0) retire(slot, replaced_default, "swap");
    slot.default_version = fresh->version;
  }
  slot.failed_load.clear();
  slot.failure = {};
  return {};
}

Result<Servable> ModelManager::acquire(const std::string& name, std::optional<std::int64_t> version) {
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(name));
  auto unloaded_error = [&] {
    return unavailable("model '" + name + "' is unloaded; load it with POST /v2/repository/models/" + name + "/load");
  };
  SLIPWAY_ASSIGN_OR_RETURN(Target target, target_of(name, version));
  const registry::ModelVersion& wanted = *target.version;
  std::int64_t number = wanted.version;
  // The loaded model for the target, if it is current; switches the default route to it.
  auto current = [&](Slot& slot) -> std::shared_ptr<LoadedModel> {
    auto found = slot.loaded.find(number);
    if (found == slot.loaded.end() || found->second->bundle_sha256 != wanted.bundle_sha256 ||
        !(found->second->config == target.config())) {
      return nullptr;
    }
    if (!version && slot.default_version != number) {
      std::optional<std::int64_t> previous = slot.default_version;
      slot.default_version = number;
      if (previous) retire(slot, *previous, "swap");
    }
    return found->second;
  };
  std::shared_ptr<std::mutex> load_mutex;
  std::string key;
  {
    std::lock_guard lock(mutex_);
    Slot& slot = slots_[name];
    if (slot.unloaded) return unloaded_error();
    if (auto loaded = current(slot)) {
      touch(*loaded);
      return Servable{loaded, target.versions()};
    }
    key = load_key(wanted, target.config());
    // The default route keeps serving what it serves while the new version or configuration
    // loads beside it.
    if (!version && slot.default_version) {
      auto serving = slot.loaded.find(*slot.default_version);
      if (serving != slot.loaded.end()) {
        if (!slot.background_load && slot.failed_load != key) {
          slot.background_load = true;
          pending_loads_.push_back(name);
          wake_.notify_one();
        }
        touch(*serving->second);
        return Servable{serving->second, target.versions()};
      }
    }
    // A load that just failed answers with its error instead of reading the bundle again.
    if (slot.failed_load == key && Clock::now() - slot.failed_at < options_.refresh) return slot.failure;
    load_mutex = slot.load_mutex;
  }
  std::lock_guard load_lock(*load_mutex);  // concurrent first requests load once
  {
    std::lock_guard lock(mutex_);
    if (auto loaded = current(slots_[name])) {
      touch(*loaded);
      return Servable{loaded, target.versions()};
    }
  }
  auto fresh = load_version(name, wanted, target.config());
  std::lock_guard lock(mutex_);
  Slot& slot = slots_[name];
  Status installed = fresh.ok() ? install(*fresh, !version.has_value()) : fresh.status();
  if (!installed.ok()) {
    record_failure(slot, key, installed);
    return installed;
  }
  return Servable{*fresh, target.versions()};
}

void ModelManager::background_load(const std::string& name) {
  auto target = target_of(name, std::nullopt);
  std::shared_ptr<std::mutex> load_mutex;
  {
    std::lock_guard lock(mutex_);
    Slot& slot = slots_[name];
    if (!target.ok() || slot.unloaded) {
      slot.background_load = false;
      return;
    }
    load_mutex = slot.load_mutex;
  }
  std::string key = load_key(*target->version, target->config());
  std::lock_guard load_lock(*load_mutex);
  auto fresh = load_version(name, *target->version, target->config());
  std::lock_guard lock(mutex_);
  Slot& slot = slots_[name];
  slot.background_load = false;
  if (slot.unloaded) return;  // the operator unloaded the model meanwhile
  Status installed = fresh.ok() ? install(*fresh, true) : fresh.status();
  if (!installed.ok()) {
    record_failure(slot, key, installed);
    log_error(installed.message() + "; the loaded version keeps serving");
  }
}

Status ModelManager::load(const std::string& name) {
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(name));
  SLIPWAY_RETURN_IF_ERROR(refresh(name, true));
  SLIPWAY_ASSIGN_OR_RETURN(Target target, target_of(name, std::nullopt));
  std::shared_ptr<std::mutex> load_mutex;
  {
    std::lock_guard lock(mutex_);
    load_mutex = slots_[name].load_mutex;
  }
  std::lock_guard load_lock(*load_mutex);
  auto fresh = load_version(name, *target.version, target.config());
  std::lock_guard lock(mutex_);
  Slot& slot = slots_[name];
  Status installed = fresh.ok() ? install(*fresh, true) : fresh.status();
  if (!installed.ok()) {
    slot.failure = installed;
    return installed;
  }
  slot.unloaded = false;
  return {};
}

Status ModelManager::unload(const std::string& name) {
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(name));
  SLIPWAY_RETURN_IF_ERROR(refresh(name, true));
  std::lock_guard lock(mutex_);
  Slot& slot = slots_[name];
  slot.unloaded = true;
  std::vector<std::int64_t> versions;
  for (const auto& [number, loaded] : slot.loaded) versions.push_back(number);
  for (auto number : versions) retire(slot, number, "operator");
  slot.default_version.reset();
  return {};
}

std::vector<ModelState> ModelManager::index(bool ready_only) {
  std::vector<std::string> names;
  if (auto models = registry_.models().list(); models.ok()) {
    for (const auto& summary : *models) names.push_back(summary.name);
  }
  std::vector<ModelState> states;
  std::lock_guard lock(mutex_);
  for (const auto& name : names) {
    auto found = slots_.find(name);
    if (found != slots_.end() && !found->second.loaded.empty()) {
      for (const auto& [number, loaded] : found->second.loaded)
        states.push_back({name, loaded->version_text, "READY", ""});
      continue;
    }
    if (ready_only) continue;
    std::string reason = "not loaded; it loads on its first request";
    if (found != slots_.end() && found->second.unloaded)
      reason = "unloaded";
    else if (found != slots_.end() && !found->second.failure.ok())
      reason = found->second.failure.message();
    states.push_back({name, "", "UNAVAILABLE", reason});
  }
  return states;
}

std::vector<std::string> ModelManager::load_all(const std::set<std::string>& skip) {
  std::vector<std::string> loaded;
  auto models = registry_.models().list();
  if (!models.ok()) return loaded;
  for (const auto& summary : *models) {
    if (skip.contains(summary.name)) continue;
    auto servable = acquire(summary.name, std::nullopt);
    if (servable.ok()) {
      loaded.push_back(summary.name + "@" + servable->model->version_text);
    } else if (servable.status().code() != StatusCode::kNotFound) {
      log_error("model '" + summary.name + "' cannot be served: " + servable.status().message());
    }
  }
  return loaded;
}

void ModelManager::stop_batching() {
  std::vector<std::shared_ptr<Batcher>> batchers;
  {
    std::lock_guard lock(mutex_);
    batching_stopped_ = true;
    for (const auto& [name, slot] : slots_) {
      for (const auto& [number, loaded] : slot.loaded) {
        if (loaded->batcher != nullptr) batchers.push_back(loaded->batcher);
      }
    }
    batchers.insert(batchers.end(), retired_.begin(), retired_.end());
    retired_.clear();
  }
  for (const auto& batcher : batchers) batcher->shutdown();
}

void ModelManager::unload_idle() {
  std::int64_t now = monotonic_ns();
  std::lock_guard lock(mutex_);
  for (auto& [name, slot] : slots_) {
    std::vector<std::int64_t> idle;
    for (const auto& [number, loaded] : slot.loaded) {
      auto limit = std::chrono::duration_cast<std::chrono::nanoseconds>(loaded->config.idle_unload).count();
      if (limit > 0 && now - loaded->last_used_ns.load(std::memory_order_relaxed) > limit) idle.push_back(number);
    }
    for (auto number : idle) {
      log_info("model '" + name + "' version " + std::to_string(number) + " unloaded after being idle");
      retire(slot, number, "idle");
    }
  }
}

void ModelManager::release_retired() {
  std::vector<std::shared_ptr<Batcher>> finished;
  {
    std::lock_guard lock(mutex_);
    auto still_used = [](const std::shared_ptr<Batcher>& batcher) {
      return batcher.use_count() > 1 || batcher->queued() > 0;
    };
    auto split = std::stable_partition(retired_.begin(), retired_.end(), still_used);
    finished.assign(std::make_move_iterator(split), std::make_move_iterator(retired_.end()));
    retired_.erase(split, retired_.end());
  }
  finished.clear();  // joins their executors, outside the lock
}

void ModelManager::run_lifecycle() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stopping_ || !pending_loads_.empty(); });
    if (stopping_) break;
    while (!pending_loads_.empty() && !stopping_) {
      std::string name = std::move(pending_loads_.front());
      pending_loads_.pop_front();
      lock.unlock();
      background_load(name);
      lock.lock();
    }
    lock.unlock();
    unload_idle();
    release_retired();
    lock.lock();
  }
}

}  // namespace slipway::serve
