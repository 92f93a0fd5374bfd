// slipway init: create a workspace.
#include <filesystem>
#include <ostream>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

struct InitResult : CommandResult {
  std::string home;  // absolute

  void write_json(JsonWriter& json) const override { json.begin_object().key("home").value(home).end_object(); }
  void write_text(std::ostream& out) const override { out << "Initialized a Slipway workspace in " << home << "\n"; }
};

Result<InitResult> init(const GlobalOptions& global) {
  SLIPWAY_RETURN_IF_ERROR(open_workspace(global, WorkspaceAccess::kCreate).status());
  InitResult result;
  result.home = std::filesystem::absolute(global.home).string();
  return result;
}

}  // namespace

int run_init(const GlobalOptions& global) { return render(global, init(global)); }

}  // namespace slipway::cli
