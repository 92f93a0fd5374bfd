// slipway models: the registered models.
#include <ostream>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

struct ModelsResult : CommandResult {
  std::vector<registry::ModelSummary> models;

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("models").begin_array();
    for (const auto& model : models) registry::write_model_summary_json(json, model);
    json.end_array().end_object();
  }

  void write_text(std::ostream& out) const override {
    std::vector<std::vector<std::string>> rows;
    for (const auto& model : models) {
      std::string aliases;
      for (const auto& [alias, version] : model.aliases)
        aliases += (aliases.empty() ? "" : " ") + alias + "=" + std::to_string(version);
      std::string tags;
      for (const auto& [key, value] : model.tags) tags += (tags.empty() ? "" : ",") + key + "=" + value;
      // The first line of the description: a table cell is one line.
      std::string description = model.description.substr(0, model.description.find('\n'));
      if (description.size() > 60) description = description.substr(0, 57) + "...";
      rows.push_back({model.name, std::to_string(model.latest_version), std::to_string(model.version_count), aliases,
                      format_time_ms(model.created_ms), model.owner.empty() ? "-" : model.owner,
                      tags.empty() ? "-" : tags, description.empty() ? "-" : description});
    }
    print_table(out, {"model", "latest", "versions", "aliases", "created (UTC)", "owner", "tags", "description"}, rows);
  }
};

Result<ModelsResult> list_models(const GlobalOptions& global) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  ModelsResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.models, store->models().list());
  return result;
}

}  // namespace

int run_models(const GlobalOptions& global) { return render(global, list_models(global)); }

}  // namespace slipway::cli
