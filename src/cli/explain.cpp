// slipway explain REF: TreeSHAP contributions per row (CSV), or the model's feature importance.
#include <algorithm>
#include <ostream>

#include <fmt/format.h>

#include "cli/cli.h"
#include "slipway/model.h"

namespace slipway::cli {
namespace {

struct ImportanceResult : CommandResult {
  std::string model;
  std::vector<std::string> names;  // features, most important first
  std::vector<std::uint64_t> splits;
  std::vector<double> total_gain;   // empty when the model records no gain
  std::vector<double> total_cover;  // likewise

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("model").value(model).key("features").begin_array();
    for (std::size_t index = 0; index < names.size(); ++index) {
      json.begin_object().key("name").value(names[index]).key("splits").value(splits[index]);
      if (!total_gain.empty()) {
        json.key("total_gain").value(total_gain[index]).key("total_cover").value(total_cover[index]);
      }
      json.end_object();
    }
    json.end_array().end_object();
  }
  void write_text(std::ostream& out) const override {
    std::vector<std::vector<std::string>> rows;
    for (std::size_t index = 0; index < names.size(); ++index) {
      std::vector<std::string> row = {names[index], std::to_string(splits[index])};
      if (!total_gain.empty()) {
        row.push_back(format_metric(total_gain[index]));
        row.push_back(format_metric(total_cover[index]));
      }
      rows.push_back(std::move(row));
    }
    if (total_gain.empty()) {
      print_table(out, {"feature", "splits"}, rows);
    } else {
      print_table(out, {"feature", "splits", "total_gain", "total_cover"}, rows);
    }
  }
};

struct ContributionsResult : CommandResult {
  std::string model;
  std::vector<std::string> columns;  // per output: one per feature, then the bias
  std::size_t rows = 0;
  std::vector<float> contributions;  // rows x columns
  std::string out;                   // where the CSV went; empty: the contributions are the output

  std::string to_csv() const {
    std::string csv;
    for (std::size_t column = 0; column < columns.size(); ++column) {
      csv += columns[column];
      csv += column + 1 == columns.size() ? '\n' : ',';
    }
    for (std::size_t row = 0; row < rows; ++row) {
      for (std::size_t column = 0; column < columns.size(); ++column) {
        csv += fmt::format("{}", contributions[row * columns.size() + column]);
        csv += column + 1 == columns.size() ? '\n' : ',';
      }
    }
    return csv;
  }

  void write_json(JsonWriter& json) const override {
    if (!out.empty()) {
      json.begin_object().key("model").value(model).key("rows");
      json.value(static_cast<std::uint64_t>(rows)).key("out").value(out).end_object();
      return;
    }
    json.begin_object().key("model").value(model).key("columns").begin_array();
    for (const auto& column : columns) json.value(column);
    json.end_array().key("contributions").begin_array();
    for (std::size_t row = 0; row < rows; ++row) {
      json.begin_array();
      for (std::size_t column = 0; column < columns.size(); ++column) {
        json.value(contributions[row * columns.size() + column]);
      }
      json.end_array();
    }
    json.end_array().end_object();
  }
  void write_text(std::ostream& stream) const override {
    if (out.empty()) {
      stream << to_csv();
      return;
    }
    stream << "explained " << rows << " rows with " << model << " into " << out << "\n";
  }
};

Result<ImportanceResult> importance(const pipeline::LoadedReference& loaded, const model::TreeEnsembleModel& trees) {
  const auto& inputs = loaded.bundle->preprocessor().features();
  auto measured = trees.importance();
  std::vector<std::size_t> order(inputs.size());
  for (std::size_t index = 0; index < order.size(); ++index) order[index] = index;
  bool with_gain = !measured.total_gain.empty();
  std::sort(order.begin(), order.end(), [&](auto a, auto b) {
    return with_gain ? measured.total_gain[a] > measured.total_gain[b] : measured.splits[a] > measured.splits[b];
  });
  ImportanceResult result;
  result.model = loaded.description;
  for (auto index : order) {
    result.names.push_back(inputs[index].name);
    result.splits.push_back(measured.splits[index]);
    if (with_gain) {
      result.total_gain.push_back(measured.total_gain[index]);
      result.total_cover.push_back(measured.total_cover[index]);
    }
  }
  return result;
}

Result<ContributionsResult> contributions(const pipeline::LoadedReference& loaded,
                                          const model::TreeEnsembleModel& trees, const std::string& data_path,
                                          const std::string& out) {
  if (data_path.empty()) return invalid_argument("explain needs --data FILE (or --importance)");
  SLIPWAY_ASSIGN_OR_RETURN(auto table, pipeline::read_table(data_path));
  std::vector<float> features;
  SLIPWAY_RETURN_IF_ERROR(loaded.bundle->preprocessor().transform(table, features));
  std::size_t width = trees.input_width();
  ContributionsResult result;
  result.model = loaded.description;
  // One block of feature contributions plus bias per output; multiclass blocks are named by class.
  const auto& class_labels = loaded.bundle->manifest().class_labels;
  for (std::size_t group = 0; group < trees.output_count(); ++group) {
    std::string prefix = trees.output_count() > 1 ? class_labels[group] + ":" : "";
    for (const auto& input : loaded.bundle->preprocessor().features()) result.columns.push_back(prefix + input.name);
    result.columns.push_back(prefix + "bias");
  }
  result.rows = table.row_count();
  result.contributions.resize(result.rows * result.columns.size());
  for (std::size_t row = 0; row < result.rows; ++row) {
    std::span<float> row_contributions(result.contributions.data() + row * result.columns.size(),
                                       result.columns.size());
    SLIPWAY_RETURN_IF_ERROR(
        trees.explain(std::span<const float>(features).subspan(row * width, width), row_contributions));
  }
  if (!out.empty()) SLIPWAY_RETURN_IF_ERROR(write_file_atomic(out, result.to_csv()));
  result.out = out;
  return result;
}

}  // namespace

int run_explain(const GlobalOptions& global, const std::string& reference, const std::string& data_path,
                const std::string& out, bool with_importance) {
  auto loaded = load_reference(global, reference);
  if (!loaded.ok()) return fail(loaded.status());
  const auto* trees = dynamic_cast<const model::TreeEnsembleModel*>(&loaded->bundle->model());
  if (trees == nullptr) {
    return fail(invalid_argument("explain works on tree models; " + loaded->description + " is a " +
                                 std::string(loaded->bundle->model().family()) + " model"));
  }
  if (with_importance) return render(global, importance(*loaded, *trees));
  return render(global, contributions(*loaded, *trees, data_path, out));
}

}  // namespace slipway::cli
