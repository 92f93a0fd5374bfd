// slipway export REF --format onnx|xgboost-json --out FILE: a model out of Slipway, for another
// runtime, predicting what the bundle predicts.
#include <ostream>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

struct ExportResult : CommandResult {
  std::string description;
  std::string out;
  pipeline::ModelExport exported;

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("model").value(description).key("format").value(exported.format).key("out").value(out);
    json.key("bytes").value(static_cast<std::uint64_t>(exported.bytes.size())).key("warning").value(exported.warning);
    json.key("category_codes").begin_object();
    for (const auto& [name, levels] : exported.categories) {
      json.key(name).begin_array();
      for (const auto& level : levels) json.value(level);
      json.end_array();
    }
    json.end_object().end_object();
  }
  void write_text(std::ostream& stream) const override {
    stream << "exported   " << description << " as " << exported.format << " to " << out << " ("
           << exported.bytes.size() << " bytes)\n";
    if (!exported.warning.empty()) stream << "note       " << exported.warning << "\n";
  }
};

Result<ExportResult> export_model(const GlobalOptions& global, const ExportOptions& options) {
  SLIPWAY_ASSIGN_OR_RETURN(auto loaded, load_reference(global, options.reference));
  ExportResult result;
  result.description = loaded.description;
  result.out = options.out;
  SLIPWAY_ASSIGN_OR_RETURN(result.exported, pipeline::export_model(*loaded.bundle, options.format));
  SLIPWAY_RETURN_IF_ERROR(write_file_atomic(options.out, result.exported.bytes));
  return result;
}

}  // namespace

int run_export(const GlobalOptions& global, const ExportOptions& options) {
  return render(global, export_model(global, options));
}

}  // namespace slipway::cli
