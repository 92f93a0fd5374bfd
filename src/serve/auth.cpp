// Bearer-token authorization for `slipway serve --auth`: roles nest predict < deploy < admin;
// tokens come from the registry (only their sha256 is stored) and are re-read every
// registry_refresh, so a revocation takes effect within it.
#include <cctype>

#include "serve/service_state.h"

namespace slipway::serve {
namespace {

Role role_named(std::string_view name) {
  if (name == "admin") return Role::kAdmin;
  if (name == "deploy") return Role::kDeploy;
  return Role::kPredict;
}

std::string_view role_name(Role role) {
  switch (role) {
    case Role::kAdmin:
      return "admin";
    case Role::kDeploy:
      return "deploy";
    default:
      return "predict";
  }
}

}  // namespace

Role role_required(const std::vector<std::string_view>& segments) {
  if (segments.size() == 1 && segments[0] == "metrics") return Role::kAdmin;
  // The management API's routes need deploy at least; approving (an admin act: a token that may
  // only deploy cannot approve what it deploys) is refused by the operation itself.
  if (!segments.empty() && segments[0] == "api") return Role::kDeploy;
  if (segments.size() >= 2 && segments[0] == "v2" && segments[1] == "health") return Role::kOpen;
  if (segments.size() >= 2 && segments[0] == "v2" && segments[1] == "repository") return Role::kDeploy;
  if (!segments.empty() && segments.back() == "stats") return Role::kAdmin;
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
    return unauthenticated(
        "this server requires a token: send 'Authorization: Bearer TOKEN' (create one with "
        "`slipway token create`)");
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
  if (!granted) return unauthenticated("the bearer token is not valid (unknown or revoked)");
  if (granted_role != nullptr) *granted_role = *granted;
  if (static_cast<int>(*granted) < static_cast<int>(required)) {
    return error_response(403, "the token's role '" + std::string(role_name(*granted)) +
                                   "' may not do this; it needs the role '" + std::string(role_name(required)) + "'");
  }
  return std::nullopt;
}

}  // namespace slipway::serve
