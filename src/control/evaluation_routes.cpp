// /api evaluations, comparisons, explanations and exports: what `slipway eval`, `compare`,
// `explain` and `export` give, for a registered version and a file of the workspace's data/ folder.
#include "control/api.h"

namespace slipway::control {
namespace {

using serve::error_response;
using serve::HttpResponse;

constexpr std::string_view kEvaluationSchema =
    R"({"type":"object","properties":{"model":{"type":"string"},"bundle_sha256":{"type":"string"},)"
    R"("cached":{"type":"boolean"},"metrics":{"type":"object","properties":{"rows":{"type":"integer"},)"
    R"("rows_missing_target":{"type":"integer"},"overall":{"type":"object"},"slice_column":{"type":"string"},)"
    R"("slices":{"type":"array"}}}}})";
constexpr std::string_view kComparisonSchema =
    R"({"type":"object","properties":{"a":{"type":"object"},"b":{"type":"object"},"data":{"type":"string"},)"
    R"("tolerance":{"type":"number"},"within_tolerance":{"type":"boolean"},"differences":{"type":"object"},)"
    R"("quality":{"type":"object"},"slice_column":{"type":"string"},"slices":{"type":"array"},)"
    R"("worst_slice":{"type":"string"},"worst_slice_drop":{"type":"number"},"worst_rows":{"type":"array"}}})";
const std::vector<ApiParameter> evaluation_query = {
    {"data", R"({"type":"string"})", "A labelled CSV file in the workspace's data/ folder (required)"},
    {"slice", R"({"type":"string"})", "Also evaluate per value of this column"},
};
constexpr std::string_view kImportanceSchema =
    R"({"type":"object","properties":{"model":{"type":"string"},"features":{"type":"array","items":)"
    R"({"type":"object","properties":{"name":{"type":"string"},"splits":{"type":"integer"},)"
    R"("total_gain":{"type":"number"},"total_cover":{"type":"number"}}}}}})";
constexpr std::string_view kContributionsSchema =
    R"({"type":"object","properties":{"model":{"type":"string"},"rows":{"type":"integer"},)"
    R"("rows_in_file":{"type":"integer"},"columns":{"type":"array","items":{"type":"string"}},)"
    R"("contributions":{"type":"array","items":{"type":"array","items":{"type":"number"}}}}})";
constexpr std::int64_t kMaxExplainedRows = 10'000;
constexpr std::size_t kMaxExplainedValues = 2'000'000;
const std::vector<ApiParameter> explanation_query = {
    {"data", R"({"type":"string"})", "A CSV file of rows in the workspace's data/ folder (required)"},
    {"rows", R"({"type":"integer","minimum":1,"maximum":10000})",
     "Explain the file's first rows, at most this many (100)"},
};
const std::vector<ApiParameter> export_query = {
    {"format", R"({"type":"string","enum":["onnx","xgboost-json"]})", "The file's format (required)"},
};
const std::vector<ApiParameter> comparison_query = {
    {"a", R"({"type":"string"})", "The baseline: NAME@VERSION or NAME@ALIAS (required)"},
    {"b", R"({"type":"string"})", "The candidate (required)"},
    {"data", R"({"type":"string"})", "A golden CSV file in the workspace's data/ folder (required)"},
    {"slice", R"({"type":"string"})", "Also compare per value of this column"},
    {"tolerance", R"({"type":"number","minimum":0})", "An output differs beyond it when |A - B| is larger (1e-6)"},
    {"worst_rows", R"({"type":"integer","minimum":0,"maximum":1000})", "The rows that differ most, listed (10)"},
};

// The data file a query names, which must exist.
Result<std::string> data_file(ApiCall& call, const std::map<std::string, std::string, std::less<>>& query) {
  auto data = query.find("data");
  if (data == query.end()) return invalid_argument("give ?data=FILE, a file in the workspace's data/ folder");
  return existing_data_file(call, data->second, "'data'", "golden.csv");
}

HttpResponse evaluate(ApiCall& call) {
  auto query = parse_query(call.http.query, evaluation_query);
  if (!query.ok()) return error_response(query.status());
  auto path = data_file(call, *query);
  if (!path.ok()) return error_response(path.status());
  auto model = registered_model(call, call.path_parameter("model") + "@" + call.path_parameter("version"));
  if (!model.ok()) return error_response(model.status());
  auto slice = query->find("slice");
  auto outcome = pipeline::evaluate_file(*model, *path, slice == query->end() ? "" : slice->second);
  if (!outcome.ok()) return error_response(outcome.status());
  JsonWriter json;
  pipeline::write_evaluation_outcome_json(json, *outcome);
  return json_answer(json);
}

HttpResponse compare(ApiCall& call) {
  auto query = parse_query(call.http.query, comparison_query);
  if (!query.ok()) return error_response(query.status());
  auto path = data_file(call, *query);
  if (!path.ok()) return error_response(path.status());
  auto a = query->find("a");
  auto b = query->find("b");
  if (a == query->end() || b == query->end()) return error_response(400, "give the two models: ?a=REF&b=REF");
  eval::ComparisonOptions options;
  if (auto given = query->find("slice"); given != query->end()) options.slice_column = given->second;
  if (auto given = query->find("tolerance"); given != query->end()) {
    auto tolerance = parse_finite_number(given->second);
    if (!tolerance || *tolerance < 0) return error_response(400, "'tolerance' must be a finite number, 0 or more");
    options.tolerance = *tolerance;
  }
  if (auto given = query->find("worst_rows"); given != query->end()) {
    auto rows = parse_integer(given->second, "worst_rows", 0, 1000);
    if (!rows.ok()) return error_response(rows.status());
    options.worst_rows = static_cast<std::size_t>(*rows);
  }
  auto model_a = registered_model(call, a->second);
  if (!model_a.ok()) return error_response(model_a.status());
  auto model_b = registered_model(call, b->second);
  if (!model_b.ok()) return error_response(model_b.status());
  auto compared = pipeline::compare_on_file(std::move(*model_a), std::move(*model_b), *path, options);
  if (!compared.ok()) return error_response(compared.status());
  JsonWriter json;
  pipeline::write_comparison_json(json, *compared, query->find("data")->second);
  return json_answer(json);
}

HttpResponse importance(ApiCall& call) {
  if (auto query = parse_query(call.http.query, {}); !query.ok()) return error_response(query.status());
  auto model = registered_model(call, call.path_parameter("model") + "@" + call.path_parameter("version"));
  if (!model.ok()) return error_response(model.status());
  auto measured = pipeline::feature_importance(*model);
  if (!measured.ok()) return error_response(measured.status());
  JsonWriter json;
  pipeline::write_feature_importance_json(json, *measured);
  return json_answer(json);
}

HttpResponse explain(ApiCall& call) {
  auto query = parse_query(call.http.query, explanation_query);
  if (!query.ok()) return error_response(query.status());
  std::int64_t rows = 100;
  if (auto given = query->find("rows"); given != query->end()) {
    auto parsed = parse_integer(given->second, "rows", 1, kMaxExplainedRows);
    if (!parsed.ok()) return error_response(parsed.status());
    rows = *parsed;
  }
  auto path = data_file(call, *query);
  if (!path.ok()) return error_response(path.status());
  auto model = registered_model(call, call.path_parameter("model") + "@" + call.path_parameter("version"));
  if (!model.ok()) return error_response(model.status());
  // An answer of at most kMaxExplainedValues numbers (a multiclass model has a block of columns
  // per class): checked before the rows are explained.
  const auto& bundle = *model->bundle;
  std::size_t classes = bundle.manifest().class_labels.size();
  std::size_t blocks = classes > 2 ? classes : 1;  // binary classification has one output
  std::size_t columns = (bundle.preprocessor().features().size() + 1) * blocks;
  if (static_cast<std::size_t>(rows) * columns > kMaxExplainedValues) {
    return error_response(400, "that many rows of " + std::to_string(columns) + " contributions each is over " +
                                   std::to_string(kMaxExplainedValues) + " numbers: ask for at most " +
                                   std::to_string(kMaxExplainedValues / columns) + " rows");
  }
  auto explained = pipeline::explain_rows(*model, *path, static_cast<std::size_t>(rows));
  if (!explained.ok()) return error_response(explained.status());
  JsonWriter json;
  pipeline::write_contributions_json(json, *explained);
  return json_answer(json);
}

// The file itself: a client saves the body as `slipway export --out` would write it.
HttpResponse export_version(ApiCall& call) {
  auto query = parse_query(call.http.query, export_query);
  if (!query.ok()) return error_response(query.status());
  auto format = query->find("format");
  if (format == query->end()) return error_response(400, "give ?format=onnx or ?format=xgboost-json");
  auto model = registered_model(call, call.path_parameter("model") + "@" + call.path_parameter("version"));
  if (!model.ok()) return error_response(model.status());
  auto exported = pipeline::export_model(*model->bundle, format->second);
  if (!exported.ok()) return error_response(exported.status());
  bool onnx = exported->format == "onnx";
  HttpResponse answer;
  answer.content_type = onnx ? "application/octet-stream" : "application/json";
  answer.body = std::move(exported->bytes);
  // They resolved, so they are names of letters, digits and "-_.": safe inside the quotes.
  answer.headers.emplace_back("Content-Disposition", "attachment; filename=\"" + call.path_parameter("model") + "-" +
                                                         call.path_parameter("version") +
                                                         (onnx ? ".onnx\"" : ".json\""));
  if (!exported->warning.empty()) {
    // Input names come from a CSV header or an upload: only printable ASCII goes in a header.
    std::string warning;
    for (char c : exported->warning) {
      if (c >= 0x20 && c < 0x7f && warning.size() < 1024) warning += c;
    }
    answer.headers.emplace_back("X-Slipway-Warning", warning);
  }
  return answer;
}

}  // namespace

void add_evaluation_routes(std::vector<ApiRoute>& routes) {
  using serve::Role;
  routes.push_back({"GET", "/api/models/{model}/versions/{version}/evaluation", Role::kRead, false,
                    "A version evaluated on a labelled file, overall and per slice (slipway eval)", evaluation_query,
                    "", kEvaluationSchema, evaluate});
  routes.push_back({"GET", "/api/comparisons", Role::kRead, false,
                    "Two models compared on a golden file, row by row and per slice (slipway compare)",
                    comparison_query, "", kComparisonSchema, compare});
  routes.push_back(
      {"GET",
       "/api/models/{model}/versions/{version}/importance",
       Role::kRead,
       false,
       "A tree model's feature importance: splits, gain and cover per input (slipway explain --importance)",
       {},
       "",
       kImportanceSchema,
       importance});
  routes.push_back({"GET", "/api/models/{model}/versions/{version}/explanation", Role::kRead, false,
                    "TreeSHAP contributions of each input to each row of a file (slipway explain --data)",
                    explanation_query, "", kContributionsSchema, explain});
  routes.push_back({"GET", "/api/models/{model}/versions/{version}/export", Role::kRead, false,
                    "The version as an ONNX or XGBoost JSON file, predicting what the bundle predicts (slipway export)",
                    export_query, "", "binary", export_version});
}

}  // namespace slipway::control
