// /api/models and /api/lineage: registered models and versions, registering an uploaded bundle,
// aliases, retiring, and lineage both ways; as `slipway models`, `versions`, `alias`, `retire` and
// `lineage` do, through the same operations.
#include <algorithm>
#include <filesystem>

#include "control/api.h"

namespace slipway::control {
namespace {

using serve::error_response;
using serve::HttpResponse;

constexpr std::string_view kVersionSchema =
    R"({"type":"object","required":["model","version","bundle_sha256"],"properties":{"model":{"type":"string"},)"
    R"("version":{"type":"integer"},"bundle_sha256":{"type":"string"},"run_id":{"type":"string"},)"
    R"("creator":{"type":"string"},"created_ms":{"type":"integer"},"aliases":{"type":"array",)"
    R"("items":{"type":"string"}},"retired_ms":{"type":"integer"},"description":{"type":"string"},)"
    R"("tags":{"type":"object"},"approval":{"type":"object"},"created":{"type":"boolean"}}})";
constexpr std::string_view kModelPageSchema =
    R"({"type":"object","properties":{"models":{"type":"array","items":{"type":"object","properties":{)"
    R"("name":{"type":"string"},"latest_version":{"type":"integer"},"versions":{"type":"integer"}}}},)"
    R"("next_page_token":{"type":"string"}}})";
constexpr std::string_view kVersionListSchema =
    R"({"type":"object","properties":{"model":{"type":"string"},"versions":{"type":"array",)"
    R"("items":{"type":"object"}}}})";
constexpr std::string_view kAliasSchema = R"({"type":"object","required":["version"],"additionalProperties":false,)"
                                          R"("properties":{"version":{"type":"integer","minimum":1}}})";
constexpr std::string_view kAliasAnswerSchema =
    R"({"type":"object","properties":{"model":{"type":"string"},"alias":{"type":"string"},)"
    R"("version":{"type":"integer"}}})";
constexpr std::string_view kRetireAnswerSchema =
    R"({"type":"object","properties":{"reference":{"type":"string"},)"
    R"("rollback_targets_dropped":{"type":"array","items":{"type":"string"}}}})";
constexpr std::string_view kServingConfigSchema =
    R"({"type":"object","properties":{"model":{"type":"string"},"stored":{"type":"object",)"
    R"("additionalProperties":{"type":"string"}},"effective":{"type":"object","additionalProperties":{"type":"string"}}}})";
constexpr std::string_view kServingConfigRequestSchema =
    R"({"type":"object","additionalProperties":false,"properties":{"values":{"type":"object","maxProperties":64,)"
    R"("additionalProperties":{"type":"string"},"description":"keys as slipway serving-config --keys lists them"},)"
    R"("reset":{"type":"boolean","description":"drop the stored keys not given"}}})";
constexpr std::string_view kLineageSchema =
    R"({"type":"object","properties":{"start":{"type":"string"},"direction":{"type":"string"},)"
    R"("nodes":{"type":"array","items":{"type":"object"}},"edges":{"type":"array","items":{"type":"object"}}}})";

const std::vector<ApiParameter> page_query = {
    {"page_size", R"({"type":"integer","minimum":1,"maximum":1000})", "Items in a page (default 100)"},
    {"page_token", R"({"type":"string"})", "next_page_token of the page before"},
};
const std::vector<ApiParameter> upload_query = {
    {"sha256", R"({"type":"string","pattern":"^[0-9a-f]{64}$"})",
     "The sha256 of the body: bytes that hash otherwise (truncated, changed) are refused"},
};
const std::vector<ApiParameter> import_query = {
    {"format", R"({"type":"string","enum":["xgboost","onnx","gguf"]})", "What the body is"},
    {"sha256", R"({"type":"string","pattern":"^[0-9a-f]{64}$"})",
     "The sha256 of the body: bytes that hash otherwise (truncated, changed) are refused"},
    {"inputs", R"({"type":"string"})", "xgboost, onnx: the input names, comma-separated (default f0, f1, ...)"},
    {"target", R"({"type":"string"})", "xgboost, onnx: the target's name (default label)"},
    {"class_labels", R"({"type":"string"})", "onnx classifiers: the class labels, comma-separated"},
};
const std::vector<ApiParameter> lineage_query = {
    {"reference", R"({"type":"string"})", "A version (NAME@VERSION, NAME@ALIAS, NAME), a run id or a data fingerprint"},
    {"direction", R"({"type":"string","enum":["upstream","downstream"]})",
     "upstream (default): what it was built from; downstream: what was built from it"},
};

HttpResponse version_answer(const registry::ModelVersion& version, std::optional<bool> created = std::nullopt) {
  JsonWriter json;
  json.begin_object().key("model").value(version.model);
  registry::write_model_version_fields(json, version);
  if (created) json.key("created").value(*created);
  json.end_object();
  return json_answer(json);
}

Result<std::int64_t> version_number(ApiCall& call) {
  return parse_integer(call.path_parameter("version"), "version", 1, INT64_MAX);
}

// GET /api/models: by name, a page at a time; the token is the last name of the page before, so
// models registered meanwhile never shift a page.
HttpResponse list_models(ApiCall& call) {
  auto query = parse_query(call.http.query, page_query);
  if (!query.ok()) return error_response(query.status());
  std::int64_t page_size = 100;
  if (auto size = query->find("page_size"); size != query->end()) {
    auto parsed = parse_integer(size->second, "page_size", 1, 1000);
    if (!parsed.ok()) return error_response(parsed.status());
    page_size = *parsed;
  }
  std::string after;
  if (auto token = query->find("page_token"); token != query->end()) {
    if (!registry::validate_model_name(token->second).ok()) {
      return error_response(400, "the page token is not one this server gave; start again without it");
    }
    after = token->second;
  }
  auto models = call.registry->models().list();
  if (!models.ok()) return error_response(models.status());
  auto first =
      std::upper_bound(models->begin(), models->end(), after,
                       [](const std::string& name, const registry::ModelSummary& model) { return name < model.name; });
  if (after.empty()) first = models->begin();
  JsonWriter json;
  json.begin_object().key("models").begin_array();
  std::int64_t written = 0;
  auto it = first;
  for (; it != models->end() && written < page_size; ++it, ++written) registry::write_model_summary_json(json, *it);
  json.end_array();
  if (it != models->end()) json.key("next_page_token").value(std::prev(it)->name);
  json.end_object();
  return json_answer(json);
}

HttpResponse list_versions(ApiCall& call) {
  const std::string& model = call.path_parameter("model");
  auto versions = call.registry->models().list_versions(model);
  if (!versions.ok()) return error_response(versions.status());
  JsonWriter json;
  json.begin_object().key("model").value(model).key("versions").begin_array();
  for (const auto& version : *versions) {
    json.begin_object();
    registry::write_model_version_fields(json, version);
    json.end_object();
  }
  json.end_array().end_object();
  return json_answer(json);
}

HttpResponse get_version(ApiCall& call) {
  auto number = version_number(call);
  if (!number.ok()) return error_response(number.status());
  auto version = call.registry->models().resolve(call.path_parameter("model"), {*number, ""});
  return version.ok() ? version_answer(*version) : error_response(version.status());
}

// POST /api/models/{model}/versions?sha256=HEX, the bundle file as the body.
HttpResponse register_upload(ApiCall& call) {
  auto query = parse_query(call.http.query, upload_query);
  if (!query.ok()) return error_response(query.status());
  auto sha256 = query->find("sha256");
  if (sha256 == query->end()) {
    return error_response(400, "give the body's sha256 as ?sha256=HEX, so a truncated or changed upload is refused");
  }
  auto registered = pipeline::register_bundle_bytes(*call.registry, call.path_parameter("model"), call.http.body,
                                                    sha256->second, call.caller);
  if (!registered.ok()) return error_response(registered.status());
  HttpResponse answer = version_answer(registered->version, registered->created);
  if (registered->created) answer.status = 201;
  return answer;
}

// "a,b,c" into its items; each 1 to 256 bytes of text without control characters or quotes.
Result<std::vector<std::string>> comma_separated(std::string_view text, std::string_view what) {
  std::vector<std::string> items;
  while (true) {
    std::string_view item = text.substr(0, text.find(','));
    bool valid = !item.empty() && item.size() <= 256 && items.size() < 100'000;
    for (char c : item) valid = valid && static_cast<unsigned char>(c) >= 0x20 && c != 0x7f && c != '"';
    if (!valid)
      return invalid_argument(std::string(what) + " are comma-separated names (no quotes or control characters)");
    items.emplace_back(item);
    if (item.size() == text.size()) return items;
    text.remove_prefix(item.size() + 1);
  }
}

// POST /api/models/{model}/imports?format=F&sha256=HEX[&inputs=...]: an XGBoost JSON model, an
// ONNX model or a GGUF file as the body, hash-checked, converted (or checked) and registered as
// `slipway import` does (pipeline::import_uploaded_model).
HttpResponse import_upload(ApiCall& call) {
  auto query = parse_query(call.http.query, import_query);
  if (!query.ok()) return error_response(query.status());
  auto format = query->find("format");
  auto sha256 = query->find("sha256");
  if (format == query->end() || sha256 == query->end()) {
    return error_response(400, "give ?format=xgboost|onnx|gguf and the body's ?sha256=HEX");
  }
  pipeline::UploadedImport upload;
  upload.format = format->second;
  upload.bytes = call.http.body;
  upload.expected_sha256 = sha256->second;
  upload.register_as = call.path_parameter("model");
  if (auto target = query->find("target"); target != query->end()) upload.target = target->second;
  for (auto [key, list] : {std::pair{"class_labels", &upload.class_labels}, std::pair{"inputs", &upload.input_names}}) {
    if (auto given = query->find(key); given != query->end()) {
      auto parsed = comma_separated(given->second, key);
      if (!parsed.ok()) return error_response(parsed.status());
      *list = std::move(*parsed);
    }
  }
  auto imported = pipeline::import_uploaded_model(*call.registry, upload, call.caller);
  if (!imported.ok()) return error_response(imported.status());
  HttpResponse answer = version_answer(*imported->registered, true);
  answer.status = 201;
  return answer;
}

// PUT /api/models/{model}/aliases/{alias} {"version": N}
HttpResponse put_alias(ApiCall& call) {
  JsonBody body;
  if (auto parsed = body.parse(call.http.body, R"({"version": 3})", {"version"}); !parsed.ok()) {
    return error_response(parsed);
  }
  auto version = body.integer("version", 1, 9.007199254740992e15, "a version number (1 or more)");
  if (!version.ok()) return error_response(version.status());
  const std::string& model = call.path_parameter("model");
  const std::string& alias = call.path_parameter("alias");
  if (auto set = pipeline::set_alias(*call.registry, model, alias, *version, call.caller); !set.ok()) {
    return error_response(set);
  }
  JsonWriter json;
  json.begin_object().key("model").value(model).key("alias").value(alias).key("version").value(*version);
  json.end_object();
  return json_answer(json);
}

HttpResponse retire(ApiCall& call) {
  if (auto empty = check_no_body(call.http.body); !empty.ok()) return error_response(empty);
  auto number = version_number(call);
  if (!number.ok()) return error_response(number.status());
  auto retired = pipeline::retire(*call.registry, call.path_parameter("model"), *number, call.caller);
  if (!retired.ok()) return error_response(retired.status());
  JsonWriter json;
  json.begin_object().key("reference").value(retired->reference).key("rollback_targets_dropped").begin_array();
  for (const auto& endpoint : retired->rollback_targets_dropped) json.value(endpoint);
  json.end_array().end_object();
  return json_answer(json);
}

HttpResponse lineage(ApiCall& call) {
  auto query = parse_query(call.http.query, lineage_query);
  if (!query.ok()) return error_response(query.status());
  auto reference = query->find("reference");
  if (reference == query->end() || reference->second.empty()) {
    return error_response(400, "give ?reference=NAME@VERSION (or a run id, or a data fingerprint)");
  }
  bool downstream = false;
  if (auto direction = query->find("direction"); direction != query->end()) {
    if (direction->second != "upstream" && direction->second != "downstream") {
      return error_response(400, "direction is upstream or downstream, not '" + direction->second.substr(0, 32) + "'");
    }
    downstream = direction->second == "downstream";
  }
  auto graph = pipeline::lineage(*call.registry, reference->second, downstream);
  if (!graph.ok()) return error_response(graph.status());
  JsonWriter json;
  pipeline::write_lineage_json(json, *graph, downstream);
  return json_answer(json);
}

HttpResponse serving_config_answer(const std::string& model, const pipeline::ServingConfigView& view) {
  JsonWriter json;
  json.begin_object().key("model").value(model);
  for (auto [key, values] : {std::pair{"stored", &view.stored}, std::pair{"effective", &view.effective}}) {
    json.key(key).begin_object();
    for (const auto& [name, value] : *values) json.key(name).value(value);
    json.end_object();
  }
  json.end_object();
  return json_answer(json);
}

HttpResponse get_serving_config(ApiCall& call) {
  const std::string& model = call.path_parameter("model");
  auto view = pipeline::serving_config(*call.registry, model);
  return view.ok() ? serving_config_answer(model, *view) : error_response(view.status());
}

// PATCH sets the keys given over the stored ones ({"values": {...}}); "reset": true drops the
// others first.
HttpResponse set_serving_config(ApiCall& call) {
  JsonBody body;
  if (auto parsed =
          body.parse(call.http.body, R"({"values": {"max_batch_size": "32"}, "reset": false})", {"values", "reset"});
      !parsed.ok()) {
    return error_response(parsed);
  }
  std::map<std::string, std::string> values;
  if (body.has("values")) {
    auto given = body.text_map("values", 64);
    if (!given.ok()) return error_response(given.status());
    values = std::move(*given);
  }
  bool reset = false;
  if (body.has("reset")) {
    auto given = body.boolean("reset");
    if (!given.ok()) return error_response(given.status());
    reset = *given;
  }
  if (values.empty() && !reset) return error_response(400, "give 'values' to set, or \"reset\": true");
  const std::string& model = call.path_parameter("model");
  auto view = pipeline::set_serving_config(*call.registry, model, values, reset, call.caller);
  return view.ok() ? serving_config_answer(model, *view) : error_response(view.status());
}

// The versions `slipway optimize` made, with how (its record in each bundle).
}  // namespace

void add_model_routes(std::vector<ApiRoute>& routes) {
  using serve::Role;
  routes.push_back({"GET",
                    "/api/models/{model}/serving-config",
                    Role::kRead,
                    false,
                    "The model's serving config as stored and as it applies (slipway serving-config NAME)",
                    {},
                    "",
                    kServingConfigSchema,
                    get_serving_config});
  routes.push_back({"PATCH",
                    "/api/models/{model}/serving-config",
                    Role::kDeploy,
                    true,
                    "Set serving config keys, checked whole (slipway serving-config NAME --KEY VALUE [--reset])",
                    {},
                    kServingConfigRequestSchema,
                    kServingConfigSchema,
                    set_serving_config});
  routes.push_back({"GET", "/api/models", Role::kRead, false, "Registered models, by name (slipway models)", page_query,
                    "", kModelPageSchema, list_models});
  routes.push_back({"GET",
                    "/api/models/{model}/versions",
                    Role::kRead,
                    false,
                    "A model's versions (slipway versions)",
                    {},
                    "",
                    kVersionListSchema,
                    list_versions});
  routes.push_back({"POST", "/api/models/{model}/versions", Role::kDeploy, true,
                    "Register a bundle file (the body) as the model's next version; the same bytes again answer "
                    "the version they made",
                    upload_query, "binary", kVersionSchema, register_upload});
  routes.back().creates = true;
  routes.push_back({"POST", "/api/models/{model}/imports", Role::kDeploy, true,
                    "Import an XGBoost JSON model, an ONNX model or a GGUF file (the body, at most the server's "
                    "body limit) as the model's next version (slipway import --register)",
                    import_query, "binary", kVersionSchema, import_upload});
  routes.back().creates = true;
  routes.push_back({"GET",
                    "/api/models/{model}/versions/{version}",
                    Role::kRead,
                    false,
                    "One version",
                    {},
                    "",
                    kVersionSchema,
                    get_version});
  routes.push_back({"POST",
                    "/api/models/{model}/versions/{version}/retire",
                    Role::kDeploy,
                    true,
                    "Take a version out of service, keeping it for lineage (slipway retire)",
                    {},
                    R"({"type":"object","additionalProperties":false})",
                    kRetireAnswerSchema,
                    retire});
  routes.push_back({"PUT",
                    "/api/models/{model}/aliases/{alias}",
                    Role::kDeploy,
                    true,
                    "Point an alias at a version (slipway alias)",
                    {},
                    kAliasSchema,
                    kAliasAnswerSchema,
                    put_alias});
  routes.push_back({"GET", "/api/lineage", Role::kRead, false,
                    "What a version, run or data set was built from, or what was built from it (slipway lineage)",
                    lineage_query, "", kLineageSchema, lineage});
}

}  // namespace slipway::control
