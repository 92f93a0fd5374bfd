// /api/workspace: `slipway verify` and `slipway gc` for an operator without a shell on the server.
// Admin only: a check reads every artifact (the time is the workspace's size), and the answers
// name the server's files.
#include "control/api.h"

namespace slipway::control {
namespace {

using serve::error_response;
using serve::HttpResponse;

constexpr std::string_view kVerifySchema =
    R"({"type":"object","properties":{"schema_version":{"type":"integer"},"repair":{"type":"boolean"},)"
    R"("artifacts_checked":{"type":"integer"},"references_checked":{"type":"integer"},)"
    R"("metadata_problems":{"type":"array"},"corrupt_artifacts":{"type":"array"},"missing_artifacts":{"type":"array"},)"
    R"("orphan_artifacts":{"type":"array"},"interrupted_runs":{"type":"array"},"unchecked_runs":{"type":"array"},)"
    R"("problems":{"type":"integer"}}})";
constexpr std::string_view kGarbageSchema =
    R"({"type":"object","properties":{"applied":{"type":"boolean"},"artifacts":{"type":"array","items":)"
    R"({"type":"object","properties":{"sha256":{"type":"string"},"bytes":{"type":"integer"},)"
    R"("age_ms":{"type":"integer"}}}},"too_young":{"type":"integer"},"bytes_freed":{"type":"integer"}}})";
const std::vector<ApiParameter> age_query = {
    {"min_age", R"({"type":"string"})",
     "Only artifacts at least this old, such as 30m or 2d (default 1h: a training run stores its bundle before it "
     "registers it)"},
};

HttpResponse verify_answer(ApiCall& call, bool repair) {
  if (auto empty = check_no_body(call.http.body); !empty.ok()) return error_response(empty);
  auto report = pipeline::verify_workspace(*call.registry, repair, call.caller);
  if (!report.ok()) return error_response(report.status());
  JsonWriter json;
  pipeline::write_verify_report_json(json, "", *report, repair);
  return json_answer(json);
}

HttpResponse verify(ApiCall& call) { return verify_answer(call, false); }
HttpResponse repair(ApiCall& call) { return verify_answer(call, true); }

HttpResponse garbage_answer(ApiCall& call, bool apply) {
  if (auto empty = check_no_body(call.http.body); !empty.ok()) return error_response(empty);
  auto query = parse_query(call.http.query, age_query);
  if (!query.ok()) return error_response(query.status());
  std::int64_t min_age_ms = 3'600'000;
  if (auto given = query->find("min_age"); given != query->end()) {
    auto age = parse_duration("min_age", given->second, 3650);
    if (!age.ok()) return error_response(age.status());
    min_age_ms = std::chrono::duration_cast<std::chrono::milliseconds>(*age).count();
  }
  auto report = pipeline::collect_garbage(*call.registry, apply, min_age_ms, call.caller);
  if (!report.ok()) return error_response(report.status());
  JsonWriter json;
  pipeline::write_gc_report_json(json, *report);
  return json_answer(json);
}

HttpResponse list_garbage(ApiCall& call) { return garbage_answer(call, false); }
HttpResponse collect_garbage(ApiCall& call) { return garbage_answer(call, true); }

}  // namespace

void add_workspace_routes(std::vector<ApiRoute>& routes) {
  using serve::Role;
  routes.push_back({"GET",
                    "/api/workspace/verify",
                    Role::kAdmin,
                    false,
                    "Check the workspace: artifact hashes, every row's artifact present, orphans, runs left RUNNING "
                    "(slipway verify)",
                    {},
                    "",
                    kVerifySchema,
                    verify});
  routes.push_back({"POST",
                    "/api/workspace/repair",
                    Role::kAdmin,
                    true,
                    "Check the workspace and fix what can be fixed: runs whose process is gone marked INTERRUPTED, "
                    "corrupt artifacts moved to quarantine (slipway verify --repair)",
                    {},
                    "",
                    kVerifySchema,
                    repair});
  routes.push_back({"GET", "/api/workspace/garbage", Role::kAdmin, false,
                    "Artifacts that no version, run, checkpoint or gate result names (slipway gc)", age_query, "",
                    kGarbageSchema, list_garbage});
  routes.push_back({"POST", "/api/workspace/garbage/collect", Role::kAdmin, true,
                    "Delete the artifacts nothing names (slipway gc --apply)", age_query, "", kGarbageSchema,
                    collect_garbage});
}

}  // namespace slipway::control
