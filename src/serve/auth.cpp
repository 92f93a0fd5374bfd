// Bearer-token authorization for `slipway serve --auth`: roles nest predict < read < deploy < admin;
// tokens come from the registry (only their sha256 is stored) and are re-read every
// registry_refresh, so a revocation takes effect within it. A process may be given tokens too
// (`slipway llm serve --api-key`), checked beside them.
#include <cctype>

#include "serve/service_state.h"

namespace slipway::serve {
namespace {

Role role_named(std::string_view name) {
  if (name == "admin") return Role::kAdmin;
  if (name == "deploy") return Role::kDeploy;
  if (name == "read") return Role::kRead;
  return Role::kPredict;
}

}  // namespace

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kAdmin:
      return "admin";
    case Role::kDeploy:
      return "deploy";
    case Role::kRead:
      return "read";
    case Role::kPredict:
      return "predict";
    case Role::kOpen:
      return "open";
  }
  return "predict";
}

const std::vector<ProtocolRoute>& protocol_routes() {
  static const std::vector<ProtocolRoute> kRoutes = {
      {"GET", "/v2", Role::kPredict, "Server metadata: name, version, extensions"},
      {"GET", "/health", Role::kOpen, "Liveness, where OpenAI-compatible servers (llama.cpp, vLLM) answer it"},
      {"GET", "/v2/health/live", Role::kOpen, "Liveness: the server answers"},
      {"GET", "/v2/health/ready", Role::kOpen, "Readiness: the server takes requests"},
      {"GET", "/v2/models/stats", Role::kAdmin, "Statistics of every model (Triton's statistics extension)"},
      {"GET", "/v2/models/{model}", Role::kPredict, "Model metadata: inputs and outputs (an endpoint's main version)"},
      {"GET", "/v2/models/{model}/ready", Role::kPredict, "Whether the model is loaded and takes requests"},
      {"POST", "/v2/models/{model}/infer", Role::kPredict, "Inference (JSON, or Triton's binary tensors)"},
      {"GET", "/v2/models/{model}/config", Role::kPredict, "The model's serving configuration"},
      {"GET", "/v2/models/{model}/stats", Role::kAdmin, "The model's statistics"},
      {"GET", "/v2/models/{model}/versions/{version}", Role::kPredict, "One version's metadata"},
      {"GET", "/v2/models/{model}/versions/{version}/ready", Role::kPredict, "Whether the version takes requests"},
      {"POST", "/v2/models/{model}/versions/{version}/infer", Role::kPredict, "Inference by one version"},
      {"GET", "/v2/models/{model}/versions/{version}/config", Role::kPredict, "One version's serving configuration"},
      {"GET", "/v2/models/{model}/versions/{version}/stats", Role::kAdmin, "One version's statistics"},
      {"POST", "/v2/repository/index", Role::kDeploy, "The model repository: every model and its state"},
      {"POST", "/v2/repository/models/{model}/load", Role::kDeploy, "Load a model"},
      {"POST", "/v2/repository/models/{model}/unload", Role::kDeploy, "Unload a model"},
      {"GET", "/metrics", Role::kAdmin, "Prometheus metrics"},
  };
  return kRoutes;
}

Role role_required(const std::vector<std::string_view>& segments) {
  // The management API's routes need read at least; each then checks its own (control).
  if (!segments.empty() && segments[0] == "api") return Role::kRead;
  if (segments.size() == 1 && segments[0] == "openapi.json") return Role::kOpen;
  // The declared route with this path (any method: a wrong method is answered 405 after the
  // token is checked); {name} matches one segment. An undeclared path needs predict.
  for (const auto& route : protocol_routes()) {
    std::string_view pattern = route.path.substr(1);
    std::size_t index = 0;
    bool matches = true;
    while (matches && !pattern.empty()) {
      auto slash = pattern.find('/');
      std::string_view part = pattern.substr(0, slash);
      matches = index < segments.size() && (part.front() == '{' || part == segments[index]);
      ++index;
      pattern.remove_prefix(slash == std::string_view::npos ? pattern.size() : slash + 1);
    }
    if (matches && index == segments.size()) return route.role;
  }
  return Role::kPredict;
}

std::optional<HttpResponse> Service::State::authorize(Role required, std::string_view authorization,
                                                      std::string* token_name, Role* granted_role) {
  if (granted_role != nullptr) *granted_role = Role::kAdmin;
  if (!options.require_auth || required == Role::kOpen) return std::nullopt;
  auto unauthenticated = [](const std::string& message) {
    HttpResponse response = error_response(401, message);
    response.headers.emplace_back("WWW-Authenticate", "Bearer realm=\"slipway\"");
    return response;
  };
  constexpr std::string_view kScheme = "bearer ";
  bool bearer = authorization.size() > kScheme.size();
  for (std::size_t index = 0; bearer && index < kScheme.size(); ++index) {
    bearer = std::tolower(static_cast<unsigned char>(authorization[index])) == kScheme[index];
  }
  if (!bearer) {
    // A server given its API key (`slipway llm serve --api-key`) has no workspace to make tokens in.
    return unauthenticated(options.configured_tokens.empty()
                               ? "this server requires a token: send 'Authorization: Bearer TOKEN' (create one "
                                 "with `slipway token create`)"
                               : "this server requires an API key: send 'Authorization: Bearer KEY'");
  }
  std::string digest = sha256_hex(authorization.substr(kScheme.size()));
  std::optional<Role> granted;
  {
    std::lock_guard lock(tokens_mutex);
    auto now = std::chrono::steady_clock::now();
    if (!tokens_loaded || now - tokens_fetched >= options.registry_refresh) {
      auto listed = registry.tokens().list();
      if (listed.ok()) {
        tokens = std::move(listed).value();
        tokens_fetched = now;
        tokens_loaded = true;
      } else if (!tokens_loaded) {
        return error_response(503, "cannot read the API tokens: " + listed.status().message());
      }
    }
    // Every active token is compared, matching or not, so the time taken says nothing about them.
    for (const auto& token : tokens) {
      bool match = constant_time_equal(digest, token.token_sha256);
      if (match && token.revoked_ms == 0) {
        granted = role_named(token.role);
        if (token_name != nullptr) *token_name = token.name;
      }
    }
  }
  for (const auto& token : options.configured_tokens) {
    if (constant_time_equal(digest, token.secret_sha256)) {
      granted = token.role;
      if (token_name != nullptr) *token_name = token.name;
    }
  }
  if (!granted) {
    return unauthenticated(options.configured_tokens.empty() ? "the bearer token is not valid (unknown or revoked)"
                                                             : "the bearer token is not a valid API key or token");
  }
  if (granted_role != nullptr) *granted_role = *granted;
  if (static_cast<int>(*granted) < static_cast<int>(required)) {
    return error_response(403, "the token's role '" + std::string(role_name(*granted)) +
                                   "' may not do this; it needs the role '" + std::string(role_name(required)) + "'");
  }
  return std::nullopt;
}

}  // namespace slipway::serve
