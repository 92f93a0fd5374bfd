// slipway explain REF: TreeSHAP contributions per row (CSV), or the model's feature importance.
#include <ostream>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

struct ImportanceResult : CommandResult {
  pipeline::FeatureImportance importance;

  void write_json(JsonWriter& json) const override { pipeline::write_feature_importance_json(json, importance); }
  void write_text(std::ostream& out) const override {
    std::vector<std::vector<std::string>> rows;
    bool with_gain = !importance.total_gain.empty();
    for (std::size_t index = 0; index < importance.names.size(); ++index) {
      std::vector<std::string> row = {importance.names[index], std::to_string(importance.splits[index])};
      if (with_gain) {
        row.push_back(format_metric(importance.total_gain[index]));
        row.push_back(format_metric(importance.total_cover[index]));
      }
      rows.push_back(std::move(row));
    }
    if (with_gain) {
      print_table(out, {"feature", "splits", "total_gain", "total_cover"}, rows);
    } else {
      print_table(out, {"feature", "splits"}, rows);
    }
  }
};

struct ContributionsResult : CommandResult {
  pipeline::RowContributions explained;
  std::string out;  // where the CSV went; empty: the contributions are the output

  void write_json(JsonWriter& json) const override {
    if (out.empty()) return pipeline::write_contributions_json(json, explained);
    json.begin_object().key("model").value(explained.model).key("rows");
    json.value(static_cast<std::uint64_t>(explained.rows)).key("out").value(out).end_object();
  }
  void write_text(std::ostream& stream) const override {
    if (out.empty()) {
      stream << pipeline::contributions_csv(explained);
      return;
    }
    stream << "explained " << explained.rows << " rows with " << explained.model << " into " << out << "\n";
  }
};

Result<ContributionsResult> contributions(const pipeline::LoadedReference& loaded, const std::string& data_path,
                                          const std::string& out) {
  if (data_path.empty()) return invalid_argument("explain needs --data FILE (or --importance)");
  ContributionsResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.explained, pipeline::explain_rows(loaded, data_path));
  if (!out.empty()) SLIPWAY_RETURN_IF_ERROR(write_file_atomic(out, pipeline::contributions_csv(result.explained)));
  result.out = out;
  return result;
}

Result<ImportanceResult> importance(const pipeline::LoadedReference& loaded) {
  ImportanceResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.importance, pipeline::feature_importance(loaded));
  return result;
}

}  // namespace

int run_explain(const GlobalOptions& global, const std::string& reference, const std::string& data_path,
                const std::string& out, bool with_importance) {
  auto loaded = load_reference(global, reference);
  if (!loaded.ok()) return fail(loaded.status());
  if (with_importance) return render(global, importance(*loaded));
  return render(global, contributions(*loaded, data_path, out));
}

}  // namespace slipway::cli
