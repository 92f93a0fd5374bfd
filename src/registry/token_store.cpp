// API tokens for `serve --auth`: only each token's sha256 is stored.
#include "registry/store_context.h"

namespace slipway::registry {

Status validate_token_role(const std::string& role) {
  if (role != "predict" && role != "read" && role != "deploy" && role != "admin") {
    return invalid_argument("unknown role '" + role + "'; roles are predict, read, deploy and admin");
  }
  return {};
}

Result<NewToken> TokenStore::create(const std::string& name, const std::string& role) {
  SLIPWAY_RETURN_IF_ERROR(validate_token_role(role));
  if (name.empty() || name.size() > 128) return invalid_argument("a token needs a name of 1 to 128 characters");
  NewToken token;
  token.id = random_hex(6);
  // 32 random bytes: guessing is hopeless, so an unsalted hash is a sound way to store it.
  token.secret = "slw_" + token.id + "_" + random_hex(32);
  SLIPWAY_RETURN_IF_ERROR(context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_RETURN_IF_ERROR(
        sql.execute("INSERT INTO api_tokens(id, name, role, token_sha256, created_ms) VALUES (?, ?, ?, ?, ?)",
                    {token.id, name, role, sha256_hex(token.secret), unix_time_ms()})
            .status());
    return append_audit(sql, *context_, "token.create", token.id + " name=" + name + " role=" + role);
  }));
  return token;
}

Status TokenStore::revoke(const std::string& id) {
  return context_->backend->write([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(
        std::int64_t changed,
        sql.execute("UPDATE api_tokens SET revoked_ms = ? WHERE id = ? AND revoked_ms IS NULL", {unix_time_ms(), id}));
    if (changed == 0) return not_found("no active token with id '" + id + "'");
    return append_audit(sql, *context_, "token.revoke", id);
  });
}

Result<std::vector<TokenRecord>> TokenStore::list() {
  std::vector<TokenRecord> tokens;
  SLIPWAY_RETURN_IF_ERROR(context_->backend->read([&](SqlTransaction& sql) -> Status {
    SLIPWAY_ASSIGN_OR_RETURN(auto rows, sql.query("SELECT id, name, role, token_sha256, created_ms, "
                                                  "COALESCE(revoked_ms, 0) FROM api_tokens ORDER BY created_ms, id"));
    for (const auto& row : rows) {
      tokens.push_back({row.text(0), row.text(1), row.text(2), row.text(3), row.integer(4), row.integer(5)});
    }
    return {};
  }));
  return tokens;
}

}  // namespace slipway::registry
