// /api/tokens, labels, annotations and retrain policies: what `slipway token`, `labels ingest`,
// `annotate` and `retrain policy` do, through the same operations.
#include "control/api.h"

namespace slipway::control {
namespace {

using serve::error_response;
using serve::HttpResponse;

constexpr std::string_view kTokenListSchema =
    R"({"type":"array","items":{"type":"object","properties":{"id":{"type":"string"},"name":{"type":"string"},)"
    R"("role":{"type":"string"},"created_ms":{"type":"integer"},"revoked_ms":{"type":"integer"}}}})";
constexpr std::string_view kTokenRequestSchema =
    R"({"type":"object","required":["name"],"additionalProperties":false,"properties":{)"
    R"("name":{"type":"string","minLength":1,"maxLength":128},)"
    R"("role":{"type":"string","enum":["predict","read","deploy","admin"]}}})";
constexpr std::string_view kNewTokenSchema =
    R"({"type":"object","properties":{"id":{"type":"string"},"name":{"type":"string"},"role":{"type":"string"},)"
    R"("token":{"type":"string","description":"the secret, shown this once"}}})";
constexpr std::string_view kLabelsSchema =
    R"({"type":"object","required":["labels"],"additionalProperties":false,"properties":{"labels":{)"
    R"("type":"array","maxItems":100000,"items":{"type":"object","required":["id","label"],)"
    R"("additionalProperties":false,"properties":{"id":{"type":"string"},"label":{"type":"string"}}}}}})";
constexpr std::string_view kLabelsAnswerSchema =
    R"({"type":"object","properties":{"model":{"type":"string"},"recorded":{"type":"integer"},)"
    R"("added":{"type":"integer"}}})";
constexpr std::string_view kAnnotationsSchema =
    R"({"type":"object","additionalProperties":false,"properties":{"description":{"type":"string"},)"
    R"("owner":{"type":"string"},"tags":{"type":"object","additionalProperties":{"type":"string"}},)"
    R"("remove_tags":{"type":"array","items":{"type":"string"}}}})";
constexpr std::string_view kPolicySchema =
    R"({"type":"object","additionalProperties":{"type":"string"},"description":"the policy's keys )"
    R"((slipway retrain policy --help), each as text"})";

HttpResponse list_tokens(ApiCall& call) {
  auto tokens = call.registry->tokens().list();
  if (!tokens.ok()) return error_response(tokens.status());
  JsonWriter json;
  json.begin_array();
  for (const auto& token : *tokens) {
    json.begin_object().key("id").value(token.id).key("name").value(token.name).key("role").value(token.role);
    json.key("created_ms").value(token.created_ms).key("revoked_ms").value(token.revoked_ms).end_object();
  }
  json.end_array();
  return json_answer(json);
}

HttpResponse create_token(ApiCall& call) {
  JsonBody body;
  if (auto parsed = body.parse(call.http.body, R"({"name": "ci", "role": "deploy"})", {"name", "role"}); !parsed.ok()) {
    return error_response(parsed);
  }
  auto name = body.text("name", "the token's name");
  if (!name.ok()) return error_response(name.status());
  std::string role = "predict";
  if (body.has("role")) {
    auto given = body.text("role", "predict, read, deploy or admin");
    if (!given.ok()) return error_response(given.status());
    role = std::move(*given);
  }
  auto token = pipeline::create_token(*call.registry, *name, role, call.caller);
  if (!token.ok()) return error_response(token.status());
  JsonWriter json;
  json.begin_object().key("id").value(token->id).key("name").value(*name).key("role").value(role);
  json.key("token").value(token->secret).end_object();
  HttpResponse answer = json_answer(json);
  answer.status = 201;
  return answer;
}

HttpResponse revoke_token(ApiCall& call) {
  if (auto revoked = pipeline::revoke_token(*call.registry, call.path_parameter("id"), call.caller); !revoked.ok()) {
    return error_response(revoked);
  }
  JsonWriter json;
  json.begin_object().key("id").value(call.path_parameter("id")).key("revoked").value(true).end_object();
  return json_answer(json);
}

HttpResponse record_labels(ApiCall& call) {
  JsonBody body;
  if (auto parsed = body.parse(call.http.body, R"({"labels": [{"id": "loan-7", "label": "1"}]})", {"labels"});
      !parsed.ok()) {
    return error_response(parsed);
  }
  auto items = body.array("labels", "an array of {\"id\", \"label\"} objects");
  if (!items.ok()) return error_response(items.status());
  std::vector<std::pair<std::string, std::string>> labels;
  for (auto item : *items) {
    simdjson::dom::object object;
    if (item.get(object) != simdjson::SUCCESS)
      return error_response(400, "each label is {\"id\": ..., \"label\": ...}");
    if (auto fields = check_fields(object, "a label", {"id", "label"}); !fields.ok()) return error_response(fields);
    auto id = JsonBody::text_of(object, "id", "text: the id the requests carry");
    if (!id.ok()) return error_response(id.status());
    auto label = JsonBody::text_of(object, "label", "text: the true label");
    if (!label.ok()) return error_response(label.status());
    labels.emplace_back(std::move(*id), std::move(*label));
  }
  const std::string& model = call.path_parameter("model");
  auto recorded = pipeline::record_labels(*call.registry, model, labels, call.caller);
  if (!recorded.ok()) return error_response(recorded.status());
  JsonWriter json;
  json.begin_object().key("model").value(model).key("recorded").value(static_cast<std::uint64_t>(recorded->recorded));
  json.key("added").value(static_cast<std::uint64_t>(recorded->added)).end_object();
  return json_answer(json);
}

HttpResponse annotate(ApiCall& call, std::optional<std::int64_t> version) {
  JsonBody body;
  if (auto parsed = body.parse(call.http.body, R"({"description": "...", "tags": {"team": "risk"}})",
                               {"description", "owner", "tags", "remove_tags"});
      !parsed.ok()) {
    return error_response(parsed);
  }
  registry::Annotations annotations;
  for (auto [key, target] :
       {std::pair{"description", &annotations.description}, std::pair{"owner", &annotations.owner}}) {
    if (!body.has(key)) continue;
    auto text = body.text(key, "text");
    if (!text.ok()) return error_response(text.status());
    *target = std::move(*text);
  }
  if (body.has("tags")) {
    auto tags = body.text_map("tags", 100);
    if (!tags.ok()) return error_response(tags.status());
    annotations.set_tags = std::move(*tags);
  }
  if (body.has("remove_tags")) {
    auto names = body.array("remove_tags", "an array of tag names");
    if (!names.ok()) return error_response(names.status());
    for (auto name : *names) {
      std::string_view text;
      if (name.get(text) != simdjson::SUCCESS) return error_response(400, "'remove_tags' holds tag names (text)");
      annotations.remove_tags.emplace_back(text);
    }
  }
  const std::string& model = call.path_parameter("model");
  if (auto done = pipeline::annotate(*call.registry, model, version, annotations, call.caller); !done.ok()) {
    return error_response(done);
  }
  if (version) {
    auto record = call.registry->models().resolve(model, {*version, ""});
    if (!record.ok()) return error_response(record.status());
    JsonWriter json;
    json.begin_object().key("model").value(model);
    registry::write_model_version_fields(json, *record);
    json.end_object();
    return json_answer(json);
  }
  auto models = call.registry->models().list();
  if (!models.ok()) return error_response(models.status());
  for (const auto& summary : *models) {
    if (summary.name != model) continue;
    JsonWriter json;
    registry::write_model_summary_json(json, summary);
    return json_answer(json);
  }
  return error_response(404, "no model named '" + model + "'");
}

HttpResponse annotate_model(ApiCall& call) { return annotate(call, std::nullopt); }

HttpResponse annotate_version(ApiCall& call) {
  auto version = parse_integer(call.path_parameter("version"), "version", 1, INT64_MAX);
  if (!version.ok()) return error_response(version.status());
  return annotate(call, *version);
}

HttpResponse policy_answer(registry::Registry& registry, const std::string& model) {
  auto stored = registry.retraining().policy(model);
  if (!stored.ok()) return error_response(stored.status());
  if (stored->empty()) return error_response(404, "model '" + model + "' has no retrain policy");
  JsonWriter json;
  json.begin_object();
  for (const auto& [key, value] : *stored) json.key(key).value(value);
  json.end_object();
  return json_answer(json);
}

HttpResponse get_policy(ApiCall& call) { return policy_answer(*call.registry, call.path_parameter("model")); }

// PUT replaces the whole policy: the keys given, the rest at their defaults.
// The files a policy sent over HTTP reads are files of the workspace's data/ folder, named
// relative to it (stored absolute, as the CLI stores them): a token that may deploy cannot have
// the server train on, and so reveal, any other file. So are its spec's, whose warm start is a
// registered model.
Status confine_policy_files(ApiCall& call, std::map<std::string, std::string>& values) {
  const std::string folder = call.registry->home() + "/data";
  for (const char* key : {"data", "gate_data"}) {
    auto found = values.find(key);
    if (found == values.end() || found->second.empty() || (found->first == "data" && found->second == "traffic")) {
      continue;
    }
    SLIPWAY_ASSIGN_OR_RETURN(found->second,
                             client_named_file(folder, found->second, "'" + std::string(key) + "'", "new.csv"));
  }
  auto spec_text = values.find("spec");
  if (spec_text == values.end() || spec_text->second.empty()) return {};
  pipeline::TrainSpec spec;
  SLIPWAY_RETURN_IF_ERROR(pipeline::load_spec_text(spec_text->second, "the policy's spec", spec));
  SLIPWAY_RETURN_IF_ERROR(confine_spec_files(folder, spec, false));
  spec_text->second = pipeline::spec_yaml(spec);
  return {};
}

HttpResponse put_policy(ApiCall& call) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(call.http.body);
  simdjson::dom::object object;
  if (parser.parse(padded).get(object) != simdjson::SUCCESS) {
    return error_response(400,
                          "the body is the policy as an object of text values, such as {\"on\": \"drift\", "
                          "\"data\": \"new.csv\"} (files of the workspace's data/ folder)");
  }
  std::map<std::string, std::string> values;
  for (auto field : object) {
    std::string_view value;
    if (field.value.get(value) != simdjson::SUCCESS || values.size() >= 64) {
      return error_response(400, "each policy key takes text, such as \"6h\" or \"0.01\"");
    }
    if (!values.emplace(std::string(field.key), std::string(value)).second) {
      return error_response(400, "policy key '" + std::string(field.key.substr(0, 64)) + "' is given twice");
    }
  }
  if (auto confined = confine_policy_files(call, values); !confined.ok()) return error_response(confined);
  const std::string& model = call.path_parameter("model");
  if (auto saved = pipeline::save_retrain_policy(*call.registry, model, values, call.caller); !saved.ok()) {
    return error_response(saved);
  }
  return policy_answer(*call.registry, model);
}

HttpResponse delete_policy(ApiCall& call) {
  const std::string& model = call.path_parameter("model");
  if (auto removed = pipeline::remove_retrain_policy(*call.registry, model, call.caller); !removed.ok()) {
    return error_response(removed);
  }
  JsonWriter json;
  json.begin_object().key("model").value(model).key("removed").value(true).end_object();
  return json_answer(json);
}

}  // namespace

void add_governance_routes(std::vector<ApiRoute>& routes) {
  using serve::Role;
  routes.push_back({"GET",
                    "/api/tokens",
                    Role::kAdmin,
                    false,
                    "API tokens, never their secrets (slipway token list)",
                    {},
                    "",
                    kTokenListSchema,
                    list_tokens});
  routes.push_back({"POST",
                    "/api/tokens",
                    Role::kAdmin,
                    true,
                    "Create a token (slipway token create); its secret is in this answer only",
                    {},
                    kTokenRequestSchema,
                    kNewTokenSchema,
                    create_token});
  routes.back().creates = true;
  routes.push_back({"DELETE",
                    "/api/tokens/{id}",
                    Role::kAdmin,
                    true,
                    "Revoke a token (slipway token revoke)",
                    {},
                    "",
                    R"({"type":"object"})",
                    revoke_token});
  routes.push_back({"POST",
                    "/api/models/{model}/labels",
                    Role::kDeploy,
                    true,
                    "Ground truth by request id, for performance monitoring (slipway labels ingest)",
                    {},
                    kLabelsSchema,
                    kLabelsAnswerSchema,
                    record_labels});
  routes.push_back({"POST",
                    "/api/models/{model}/annotations",
                    Role::kDeploy,
                    true,
                    "A model's description, owner and tags (slipway annotate)",
                    {},
                    kAnnotationsSchema,
                    R"({"type":"object"})",
                    annotate_model});
  routes.push_back({"POST",
                    "/api/models/{model}/versions/{version}/annotations",
                    Role::kDeploy,
                    true,
                    "A version's description and tags (slipway annotate NAME@VERSION)",
                    {},
                    kAnnotationsSchema,
                    R"({"type":"object"})",
                    annotate_version});
  routes.push_back({"GET",
                    "/api/models/{model}/retrain-policy",
                    Role::kRead,
                    false,
                    "The model's retrain policy as stored (slipway retrain policy NAME)",
                    {},
                    "",
                    kPolicySchema,
                    get_policy});
  routes.push_back({"PUT",
                    "/api/models/{model}/retrain-policy",
                    Role::kDeploy,
                    true,
                    "Replace the model's retrain policy, checked first (slipway retrain policy NAME --reset ...)",
                    {},
                    kPolicySchema,
                    kPolicySchema,
                    put_policy});
  routes.push_back({"DELETE",
                    "/api/models/{model}/retrain-policy",
                    Role::kDeploy,
                    true,
                    "Remove the model's retrain policy (slipway retrain policy NAME --remove)",
                    {},
                    "",
                    R"({"type":"object"})",
                    delete_policy});
}

}  // namespace slipway::control
