#include "serve/model_repository.h"

#include <algorithm>

namespace slipway::serve {

ModelRepository::ModelRepository(registry::Registry& registry, std::chrono::milliseconds refresh)
    : registry_(registry), refresh_(refresh) {}

Result<std::vector<registry::ModelVersion>> ModelRepository::versions_of(const std::string& name, bool force_refresh) {
  auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex_);
    auto found = models_.find(name);
    if (!force_refresh && found != models_.end() && now - found->second.fetched < refresh_)
      return found->second.versions;
  }
  // The registry query runs outside our lock; two threads may both refresh, which is harmless.
  auto versions = registry_.list_versions(name);
  std::lock_guard lock(mutex_);
  if (!versions.ok()) {
    models_.erase(name);
    return versions.status();
  }
  models_[name] = CachedModel{now, *versions};
  return versions;
}

Result<std::shared_ptr<const model::Bundle>> ModelRepository::bundle_for(const std::string& sha256) {
  {
    std::lock_guard lock(mutex_);
    auto found = bundles_.find(sha256);
    if (found != bundles_.end()) return found->second;
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto bundle, model::Bundle::load(registry_.artifacts().path_for(sha256), sha256));
  std::lock_guard lock(mutex_);
  return bundles_.try_emplace(sha256, std::move(bundle)).first->second;
}

Result<ServableModel> ModelRepository::resolve(const std::string& name, std::optional<std::int64_t> version) {
  SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(name));
  auto pick = [&](const std::vector<registry::ModelVersion>& versions) -> const registry::ModelVersion* {
    if (version) {
      auto found =
          std::find_if(versions.begin(), versions.end(), [&](const auto& entry) { return entry.version == *version; });
      return found == versions.end() ? nullptr : &*found;
    }
    for (const auto& entry : versions) {
      if (std::find(entry.aliases.begin(), entry.aliases.end(), "production") != entry.aliases.end()) return &entry;
    }
    return versions.empty() ? nullptr : &versions.back();
  };
  SLIPWAY_ASSIGN_OR_RETURN(auto versions, versions_of(name, false));
  const registry::ModelVersion* chosen = pick(versions);
  if (chosen == nullptr) {  // maybe registered since the last refresh
    SLIPWAY_ASSIGN_OR_RETURN(versions, versions_of(name, true));
    chosen = pick(versions);
  }
  if (chosen == nullptr) {
    return not_found(version ? "model '" + name + "' has no version " + std::to_string(*version)
                             : "model '" + name + "' has no versions");
  }
  ServableModel servable;
  servable.name = name;
  servable.version = chosen->version;
  for (const auto& entry : versions) servable.versions.push_back(entry.version);
  SLIPWAY_ASSIGN_OR_RETURN(servable.bundle, bundle_for(chosen->bundle_sha256));
  return servable;
}

std::vector<std::string> ModelRepository::model_names() {
  std::vector<std::string> names;
  auto models = registry_.list_models();
  if (models.ok()) {
    for (const auto& summary : *models) names.push_back(summary.name);
  }
  return names;
}

}  // namespace slipway::serve
