// slipway alias REF ALIAS: point an alias at a model version.
#include <ostream>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

struct AliasResult : CommandResult {
  std::string model;
  std::string alias;
  std::int64_t version = 0;

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("model").value(model).key("alias").value(alias).key("version").value(version);
    json.end_object();
  }
  void write_text(std::ostream& out) const override {
    out << model << "@" << alias << " -> version " << version << "\n";
  }
};

Result<AliasResult> set_alias(const GlobalOptions& global, const std::string& reference, const std::string& alias) {
  SLIPWAY_ASSIGN_OR_RETURN(auto parsed, registry::parse_model_reference(reference));
  // A bare NAME is the production alias itself: `alias lending production` would point it where
  // it points. Which version is meant must be said.
  if (reference.find('@') == std::string::npos) {
    return invalid_argument("name the version to alias: " + reference + "@VERSION or " + reference +
                            "@latest (a bare " + reference + " is its production alias, where there is one)");
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kWrite));
  SLIPWAY_ASSIGN_OR_RETURN(auto version, store->models().resolve(parsed.first, parsed.second));
  SLIPWAY_RETURN_IF_ERROR(pipeline::set_alias(*store, version.model, alias, version.version, pipeline::Caller{}));
  AliasResult result;
  result.model = version.model;
  result.alias = alias;
  result.version = version.version;
  return result;
}

}  // namespace

int run_alias(const GlobalOptions& global, const std::string& reference, const std::string& alias) {
  return render(global, set_alias(global, reference, alias));
}

}  // namespace slipway::cli
