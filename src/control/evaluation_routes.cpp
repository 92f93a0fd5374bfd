// /api evaluations and comparisons: what `slipway eval` and `slipway compare` print, for a labelled
// (or golden) file of the workspace's data/ folder.
#include <filesystem>

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
  std::string folder = call.registry->home() + "/data";
  SLIPWAY_ASSIGN_OR_RETURN(std::string path, client_named_file(folder, data->second, "'data'", "golden.csv"));
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return not_found("no file '" + data->second + "' in the workspace's data/ folder");
  }
  return path;
}

// A registered model a client names (never a file of the server's).
Result<pipeline::LoadedReference> registered_model(ApiCall& call, const std::string& reference) {
  if (pipeline::names_bundle_file(reference)) {
    return invalid_argument("'" + reference.substr(0, 64) +
                            "' must name a registered model (NAME@VERSION), not a file");
  }
  return pipeline::resolve_reference(call.registry, reference);
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

}  // namespace

void add_evaluation_routes(std::vector<ApiRoute>& routes) {
  using serve::Role;
  routes.push_back({"GET", "/api/models/{model}/versions/{version}/evaluation", Role::kRead, false,
                    "A version evaluated on a labelled file, overall and per slice (slipway eval)", evaluation_query,
                    "", kEvaluationSchema, evaluate});
  routes.push_back({"GET", "/api/comparisons", Role::kRead, false,
                    "Two models compared on a golden file, row by row and per slice (slipway compare)",
                    comparison_query, "", kComparisonSchema, compare});
}

}  // namespace slipway::control
