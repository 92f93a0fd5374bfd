// slipway params: the training parameters, from their declarations (src/train/parameters.cpp).
#include <iostream>

#include "cli/cli.h"
#include "slipway/train.h"

namespace slipway::cli {
namespace {

struct ParamsResult : CommandResult {
  void write_json(JsonWriter& json) const override { pipeline::write_parameters_json(json); }
  void write_text(std::ostream& out) const override {
    std::vector<std::vector<std::string>> rows;
    for (const auto& declaration : train::parameter_declarations()) {
      std::string families;
      for (const auto& family : declaration.families) families += (families.empty() ? "" : ",") + family;
      rows.push_back({declaration.name, families, std::string(train::parameter_type_name(declaration.type)),
                      declaration.default_value, train::parameter_allowed_values(declaration),
                      declaration.description});
    }
    print_table(out, {"parameter", "models", "type", "default", "allowed", "description"}, rows);
  }
};

}  // namespace

int run_params(const GlobalOptions& global, bool markdown) {
  // docs/parameters.md itself, whatever --json says: a file, not a result.
  if (markdown) {
    std::cout << train::parameters_markdown();
    return 0;
  }
  return render(global, ParamsResult{});
}

}  // namespace slipway::cli
