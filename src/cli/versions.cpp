// slipway versions NAME: the versions of one model.
#include <ostream>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

// "prune (rounds=48) from lending@1": how `slipway optimize` made a version; empty otherwise.
std::string optimization_summary(const std::map<std::string, std::string>& record) {
  auto technique = record.find("technique");
  if (technique == record.end()) return "";
  std::string settings;
  for (const auto& [key, value] : record) {
    if (!key.starts_with("setting.") || key == "setting.dropped" || key == "setting.chosen") continue;
    settings += (settings.empty() ? "" : ", ") + key.substr(8) + "=" + value;
  }
  auto baseline = record.find("baseline");
  return technique->second + (settings.empty() ? "" : " (" + settings + ")") +
         (baseline == record.end() ? "" : " from " + baseline->second);
}

struct VersionsResult : CommandResult {
  std::string model;
  std::vector<registry::ModelVersion> versions;
  std::vector<std::map<std::string, std::string>> optimizations;  // per version; empty when not optimized

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("model").value(model).key("versions").begin_array();
    for (const auto& version : versions) {
      json.begin_object();
      registry::write_model_version_fields(json, version);
      const auto& record = optimizations[static_cast<std::size_t>(&version - versions.data())];
      if (!record.empty()) {
        json.key("optimization").begin_object();
        for (const auto& [key, value] : record) json.key(key).value(value);
        json.end_object();
      }
      json.end_object();
    }
    json.end_array().end_object();
  }

  void write_text(std::ostream& out) const override {
    std::vector<std::vector<std::string>> rows;
    for (const auto& version : versions) {
      std::string aliases;
      for (const auto& alias : version.aliases) aliases += (aliases.empty() ? "" : ",") + alias;
      std::string optimized = optimization_summary(optimizations[static_cast<std::size_t>(&version - versions.data())]);
      std::string tags;
      for (const auto& [key, value] : version.tags) tags += (tags.empty() ? "" : ",") + key + "=" + value;
      rows.push_back({std::to_string(version.version), aliases, version.bundle_sha256.substr(0, 12), version.run_id,
                      version.creator, format_time_ms(version.created_ms),
                      version.retired_ms > 0 ? "retired"
                      : version.approval     ? "by " + version.approval->approver
                                             : "-",
                      tags.empty() ? "-" : tags, optimized.empty() ? "-" : optimized});
    }
    print_table(out,
                {"version", "aliases", "sha256", "run", "creator", "created (UTC)", "approved", "tags", "optimization"},
                rows);
  }
};

Result<VersionsResult> list_versions(const GlobalOptions& global, const std::string& model) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  VersionsResult result;
  result.model = model;
  SLIPWAY_ASSIGN_OR_RETURN(result.versions, store->models().list_versions(model));
  result.optimizations = pipeline::optimization_records(*store, model, result.versions);
  return result;
}

}  // namespace

int run_versions(const GlobalOptions& global, const std::string& model) {
  return render(global, list_versions(global, model));
}

}  // namespace slipway::cli
