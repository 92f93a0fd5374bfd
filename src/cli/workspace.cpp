// How commands open the workspace and resolve model references.
#include "cli/cli.h"

namespace slipway::cli {

Result<std::unique_ptr<registry::Registry>> open_workspace(const GlobalOptions& global, WorkspaceAccess access) {
  return registry::Registry::open(
      global.home, {.create = access == WorkspaceAccess::kCreate, .read_only = access == WorkspaceAccess::kReadOnly});
}

Result<pipeline::LoadedReference> load_reference(const GlobalOptions& global, const std::string& reference) {
  if (pipeline::names_bundle_file(reference)) return pipeline::resolve_reference(nullptr, reference);
  // A malformed reference is refused before the workspace is opened.
  SLIPWAY_RETURN_IF_ERROR(registry::parse_model_reference(reference).status());
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  return pipeline::resolve_reference(store.get(), reference);
}

}  // namespace slipway::cli
