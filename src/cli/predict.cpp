// slipway predict: score the rows of a file (pipeline::score_file); the CSV goes to --out or stdout.
#include <ostream>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

struct PredictResult : CommandResult {
  pipeline::ScoredRows scored;
  std::string out;  // the CSV's path; empty: the predictions themselves are the output

  void write_json(JsonWriter& json) const override {
    const auto& predictions = scored.predictions;
    json.begin_object().key("model").value(scored.model);
    json.key("rows").value(static_cast<std::uint64_t>(predictions.rows));
    if (!out.empty()) {
      json.key("out").value(out).end_object();
      return;
    }
    bool classification = scored.task != model::Task::kRegression;
    bool multiclass = scored.task == model::Task::kMulticlassClassification;
    const std::size_t columns = predictions.columns;
    json.key("predictions").begin_array();
    for (std::size_t row = 0; row < predictions.rows; ++row) {
      json.begin_object();
      if (!scored.id_name.empty()) json.key(scored.id_name).value(scored.ids[row]);
      if (multiclass) {
        json.key("probabilities").begin_object();
        for (std::size_t label = 0; label < columns; ++label) {
          json.key(scored.class_labels[label]).value(predictions.scores[row * columns + label]);
        }
        json.end_object();
      } else {
        json.key(classification ? "probability" : "prediction").value(predictions.scores[row]);
      }
      if (classification) json.key("label").value(scored.labels[row]);
      json.end_object();
    }
    json.end_array().end_object();
  }

  void write_text(std::ostream& stream) const override {
    if (out.empty()) {
      stream << scored.to_csv();
      return;
    }
    stream << "scored " << scored.predictions.rows << " rows with " << scored.model << " into " << out << "\n";
  }
};

Result<PredictResult> predict(const GlobalOptions& global, const std::string& reference, const std::string& data_path,
                              const std::string& out, const std::string& id_column) {
  SLIPWAY_ASSIGN_OR_RETURN(auto loaded, load_reference(global, reference));
  PredictResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.scored,
                           pipeline::score_file(loaded, data_path, {.id_column = id_column, .out = out}));
  result.out = out;
  return result;
}

}  // namespace

int run_predict(const GlobalOptions& global, const std::string& reference, const std::string& data_path,
                const std::string& out, const std::string& id_column) {
  return render(global, predict(global, reference, data_path, out, id_column));
}

}  // namespace slipway::cli
