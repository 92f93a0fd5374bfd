// slipway export REF --format onnx|xgboost-json --out FILE: a model out of Slipway, for another
// runtime, predicting what the bundle predicts.
#include <ostream>

#include "cli/cli.h"
#include "slipway/model.h"

namespace slipway::cli {
namespace {

struct ExportResult : CommandResult {
  std::string description;
  std::string format;
  std::string out;
  std::size_t bytes = 0;
  std::string warning;
  // Categorical inputs and their levels: code i stands for levels[i].
  std::vector<std::pair<std::string, std::vector<std::string>>> categories;

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("model").value(description).key("format").value(format).key("out").value(out);
    json.key("bytes").value(static_cast<std::uint64_t>(bytes)).key("warning").value(warning);
    json.key("category_codes").begin_object();
    for (const auto& [name, levels] : categories) {
      json.key(name).begin_array();
      for (const auto& level : levels) json.value(level);
      json.end_array();
    }
    json.end_object().end_object();
  }
  void write_text(std::ostream& stream) const override {
    stream << "exported   " << description << " as " << format << " to " << out << " (" << bytes << " bytes)\n";
    if (!warning.empty()) stream << "note       " << warning << "\n";
  }
};

Result<ExportResult> export_model(const GlobalOptions& global, const ExportOptions& options) {
  if (options.format != "onnx" && options.format != "xgboost-json") {
    return invalid_argument("unknown export format '" + options.format + "'; supported: onnx, xgboost-json");
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto loaded, load_reference(global, options.reference));
  ExportResult result;
  result.description = loaded.description;
  result.format = options.format;
  result.out = options.out;
  for (const auto& feature : loaded.bundle->preprocessor().features()) {
    if (feature.type == data::ColumnType::kCategorical) result.categories.emplace_back(feature.name, feature.levels);
  }
  if (options.format == "xgboost-json") {
    SLIPWAY_ASSIGN_OR_RETURN(std::string json, model::export_xgboost_json(*loaded.bundle));
    for (const auto& feature : loaded.bundle->preprocessor().features()) {
      if (feature.type == data::ColumnType::kCategorical) {
        result.warning =
            "categorical inputs are XGBoost categories holding the bundle's codes (level i is code "
            "i; `--json` lists them as category_codes; any other value is code " +
            std::to_string(feature.levels.size()) + " or more): encode them so before predicting";
      }
    }
    result.bytes = json.size();
    SLIPWAY_RETURN_IF_ERROR(write_file_atomic(options.out, std::as_bytes(std::span(json))));
  } else {
    SLIPWAY_ASSIGN_OR_RETURN(model::OnnxExport onnx, model::export_onnx(*loaded.bundle));
    result.bytes = onnx.bytes.size();
    result.warning = onnx.warning;
    SLIPWAY_RETURN_IF_ERROR(write_file_atomic(options.out, onnx.bytes));
  }
  return result;
}

}  // namespace

int run_export(const GlobalOptions& global, const ExportOptions& options) {
  return render(global, export_model(global, options));
}

}  // namespace slipway::cli
