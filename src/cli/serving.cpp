// slipway serve, serving-config and token.
#include <malloc.h>
#include <sys/resource.h>

#include <iostream>

#include <fmt/format.h>

#include "cli/cli.h"
#include "slipway/control.h"
#include "slipway/registry.h"
#include "slipway/serve.h"

namespace slipway::cli {
namespace {

std::string describe(const std::map<std::string, std::string>& values) {
  std::string text;
  for (const auto& [key, value] : values) text.append(text.empty() ? "" : " ").append(key).append("=").append(value);
  return text;
}

// The address a server listens on.
struct ServingAddress : CommandResult {
  ServingAddress(std::string host, int port) : host(std::move(host)), port(port) {}
  std::string host;
  int port = 0;
  void write_json(JsonWriter& json) const override {
    json.begin_object().key("host").value(host).key("port").value(static_cast<std::int64_t>(port)).end_object();
  }
  void write_text(std::ostream& out) const override {
    out << "serving on http://" << host << ":" << port << " (KServe v2 under /v2, metrics at /metrics)\n";
  }
};

// A model's stored serving config and the config it takes effect as.
struct ServingConfigResult : CommandResult {
  std::string model;
  std::map<std::string, std::string> stored, effective;
  void write_json(JsonWriter& json) const override {
    json.begin_object().key("model").value(model);
    json.key("stored").begin_object();
    for (const auto& [key, value] : stored) json.key(key).value(value);
    json.end_object();
    json.key("effective").begin_object();
    for (const auto& [key, value] : effective) json.key(key).value(value);
    json.end_object().end_object();
  }
  void write_text(std::ostream& out) const override {
    out << "serving config of " << model
        << " (servers pick it up within a second; keys not stored take the server's defaults):\n";
    for (const auto& key : serve::serving_config_keys()) {
      bool is_stored = stored.count(key) > 0;
      out << fmt::format("  {:<22} {:<12} {}\n", key, is_stored ? stored.at(key) : effective.at(key),
                         is_stored ? "" : "(default)");
    }
  }
};

struct TokenCreated : CommandResult {
  TokenCreated(registry::NewToken token, std::string name, std::string role)
      : token(std::move(token)), name(std::move(name)), role(std::move(role)) {}
  registry::NewToken token;
  std::string name, role;
  void write_json(JsonWriter& json) const override {
    json.begin_object().key("id").value(token.id).key("name").value(name).key("role").value(role);
    json.key("token").value(token.secret).end_object();
  }
  // The secret alone on stdout, so that scripts can capture it; the note beside it on stderr.
  void write_text(std::ostream& out) const override {
    out << token.secret << "\n";
    std::cerr << "token " << token.id << " (" << role << ") created; it is shown only now, the workspace keeps "
              << "its hash. Send it as 'Authorization: Bearer TOKEN'.\n";
  }
};

struct TokenList : CommandResult {
  std::vector<registry::TokenRecord> tokens;
  void write_json(JsonWriter& json) const override {
    json.begin_array();
    for (const auto& token : tokens) {
      json.begin_object().key("id").value(token.id).key("name").value(token.name).key("role").value(token.role);
      json.key("created_ms").value(token.created_ms).key("revoked_ms").value(token.revoked_ms).end_object();
    }
    json.end_array();
  }
  void write_text(std::ostream& out) const override {
    out << fmt::format("{:<14} {:<24} {:<8} {}\n", "ID", "NAME", "ROLE", "STATE");
    for (const auto& token : tokens) {
      out << fmt::format("{:<14} {:<24} {:<8} {}\n", token.id, token.name, token.role,
                         token.revoked_ms == 0 ? "active" : "revoked");
    }
  }
};

struct TokenRevoked : CommandResult {
  explicit TokenRevoked(std::string id) : id(std::move(id)) {}
  std::string id;
  void write_json(JsonWriter& json) const override {
    json.begin_object().key("id").value(id).key("revoked").value(true).end_object();
  }
  void write_text(std::ostream& out) const override {
    out << "token " << id << " revoked (servers refuse it within a second)\n";
  }
};

// The serving config keys, as declared.
struct ServingConfigKeys : CommandResult {
  void write_json(JsonWriter& json) const override {
    json.begin_object().key("keys").begin_array();
    for (const auto& key : serve::serving_config_declarations()) {
      json.begin_object().key("name").value(key.name).key("type").value(std::string(config_type_name(key.type)));
      json.key("default").value(key.default_value).key("allowed").value(config_allowed_text(key));
      json.key("description").value(key.help).end_object();
    }
    json.end_array().end_object();
  }
  void write_text(std::ostream& out) const override {
    const auto& keys = serve::serving_config_declarations();
    std::vector<std::vector<std::string>> rows;
    rows.reserve(keys.size());
    for (const auto& key : keys) rows.push_back({key.name, key.default_value, config_allowed_text(key), key.help});
    print_table(out, {"key", "default", "allowed", "description"}, rows);
  }
};

}  // namespace

std::map<std::string, std::string> ServingConfigFlags::given() const {
  std::map<std::string, std::string> chosen;
  for (const auto& key : given_keys) {
    if (auto list = lists.find(key); list != lists.end()) {
      std::string joined;
      for (const auto& item : list->second) joined += (joined.empty() ? "" : ",") + item;
      chosen[key] = joined;
    } else {
      chosen[key] = values.at(key);
    }
  }
  return chosen;
}

namespace {

// The server-wide defaults and per-model overrides from the --config file, the flags (which win
// over the file's defaults) and --cache. Read at start and again on SIGHUP.
struct ComposedConfigs {
  serve::ModelServingConfig defaults;
  std::map<std::string, std::map<std::string, std::string>> overrides;
};

Result<ComposedConfigs> compose_serving_configs(const ServeOptions& flags, const ServingConfigFlags& defaults) {
  serve::ServingConfigFile file;
  if (!flags.config_path.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(file, serve::read_serving_config_file(flags.config_path));
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto file_defaults, serve::apply_serving_config({}, file.defaults));
  ComposedConfigs composed;
  SLIPWAY_ASSIGN_OR_RETURN(composed.defaults, serve::apply_serving_config(file_defaults, defaults.given()));
  composed.overrides = file.models;
  for (const auto& name : flags.cached_models) {
    SLIPWAY_RETURN_IF_ERROR(registry::validate_model_name(name));
    composed.overrides[name]["cache"] = "true";
  }
  return composed;
}

// A server holds a descriptor per connection: take the hard limit, as nginx's
// worker_rlimit_nofile does, so the connection cap is not the soft default of 1,024.
void raise_open_file_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= limit.rlim_max) return;
  limit.rlim_cur = limit.rlim_max;
  setrlimit(RLIMIT_NOFILE, &limit);
}

// glibc raises its mmap threshold each time a large block is freed, after which the buffers of
// large requests come from the heap and stay with the process. A fixed threshold keeps them
// mapped, so they go back to the system when the request ends.
void return_large_buffers_to_the_system() { mallopt(M_MMAP_THRESHOLD, 1 << 20); }

}  // namespace

int run_serve(const GlobalOptions& global, const ServeOptions& flags, const ServingConfigFlags& defaults) {
  serve::ServerOptions options;
  options.http.host = flags.host;
  options.http.port = static_cast<std::uint16_t>(flags.port);
  options.http.worker_threads = flags.threads;
  options.http.io_threads = flags.io_threads;
  if (flags.max_pending < 0) return fail(invalid_argument("--max-pending must be >= 0"));
  options.http.max_pending_requests = flags.max_pending;
  raise_open_file_limit();
  return_large_buffers_to_the_system();
  options.http.max_connections = flags.max_connections;
  options.http.max_inflight_body_bytes = flags.max_request_memory_mb << 20;
  auto composed = compose_serving_configs(flags, defaults);
  if (!composed.ok()) return fail(composed.status());
  const serve::ModelServingConfig* server_defaults = &composed->defaults;
  options.service.defaults = composed->defaults;
  options.service.model_overrides = composed->overrides;
  if (!flags.config_path.empty()) {
    // SIGHUP re-reads the --config file; a file that no longer parses keeps what is served.
    options.on_hangup = [flags, defaults](serve::Service& service) {
      auto reloaded = compose_serving_configs(flags, defaults);
      if (!reloaded.ok()) {
        log_error("SIGHUP: " + flags.config_path + " not reloaded: " + reloaded.status().message());
        return;
      }
      service.set_serving_configs(std::move(reloaded->defaults), std::move(reloaded->overrides));
      log_info("SIGHUP: serving configs reloaded from " + flags.config_path);
    };
  }
  options.service.response_cache_bytes = flags.cache_bytes;
  options.service.fallback_cache_bytes = flags.fallback_cache_bytes;
  options.service.memory_budget_bytes = flags.memory_budget_mb << 20;
  options.service.require_auth = flags.auth;
  options.llm = flags.llm;
  auto store = open_workspace(global, WorkspaceAccess::kReadOnly);
  if (!store.ok()) return fail(store.status());
  options.service.request_log_directory =
      flags.request_log_dir.empty() ? (*store)->home() + "/request_log" : flags.request_log_dir;
  options.service.management = control::management_api({(*store)->home(), options.service.request_log_directory});
  options.service.request_log_retention = std::chrono::hours(flags.request_log_retention_hours);
  options.service.request_log_max_bytes = flags.request_log_max_mb << 20;
  if (flags.auth) {
    auto tokens = (*store)->tokens().list();
    if (!tokens.ok()) return fail(tokens.status());
    bool any = std::any_of(tokens->begin(), tokens->end(), [](const auto& token) { return token.revoked_ms == 0; });
    if (!any) log_warn("--auth is on but the workspace has no active token; create one with `slipway token create`");
  }
  const serve::BatchingConfig& batching = server_defaults->batching;
  if (batching.max_batch_size > 1) {
    log_info(fmt::format("dynamic batching by default: up to {} rows, {} us queue delay, {} instance(s){}",
                         batching.max_batch_size, batching.max_queue_delay.count(), batching.instances,
                         batching.max_queue_size > 0 ? fmt::format(", queue of {}", batching.max_queue_size) : ""));
  }
  for (const auto& [name, values] : options.service.model_overrides) {
    log_info(fmt::format("serving config for {} from the command line or --config: {}", name, describe(values)));
  }
  auto server = serve::Server::start(**store, options);
  if (!server.ok()) return fail(server.status());
  if (flags.lazy) {
    log_info("models load on their first request (--lazy)");
  } else {
    std::string loaded;
    for (const auto& name : (*server)->service().warm_up()) loaded += (loaded.empty() ? "" : ", ") + name;
    log_info("models loaded: " +
             (loaded.empty() ? std::string("none yet (models registered later are served too)") : loaded));
  }
  // The first stdout line names the address, so scripts starting `serve --port 0` can find it.
  render(global, ServingAddress{flags.host, (*server)->port()});
  std::cout.flush();
  (*server)->run();
  log_info("server stopped");
  return 0;
}

int run_serving_config(const GlobalOptions& global, const std::string& model, const ServingConfigFlags& flags,
                       bool reset) {
  if (auto valid = registry::validate_model_name(model); !valid.ok()) return fail(valid);
  auto given = flags.given();
  bool changing = !given.empty() || reset;
  // Showing the config only reads.
  auto store = open_workspace(global, changing ? WorkspaceAccess::kWrite : WorkspaceAccess::kReadOnly);
  if (!store.ok()) return fail(store.status());
  auto view = changing ? pipeline::set_serving_config(**store, model, given, reset, pipeline::Caller{})
                       : pipeline::serving_config(**store, model);
  if (!view.ok()) return fail(view.status());
  ServingConfigResult result;
  result.model = model;
  result.stored = std::move(view->stored);
  result.effective = std::move(view->effective);
  return render(global, result);
}

int run_token_create(const GlobalOptions& global, const std::string& name, const std::string& role) {
  auto store = open_workspace(global, WorkspaceAccess::kWrite);
  if (!store.ok()) return fail(store.status());
  auto token = pipeline::create_token(**store, name, role, pipeline::Caller{});
  if (!token.ok()) return fail(token.status());
  return render(global, TokenCreated{*token, name, role});
}

int run_token_list(const GlobalOptions& global) {
  auto store = open_workspace(global, WorkspaceAccess::kReadOnly);
  if (!store.ok()) return fail(store.status());
  auto tokens = (*store)->tokens().list();
  if (!tokens.ok()) return fail(tokens.status());
  TokenList result;
  result.tokens = std::move(*tokens);
  return render(global, result);
}

int run_token_revoke(const GlobalOptions& global, const std::string& id) {
  auto store = open_workspace(global, WorkspaceAccess::kWrite);
  if (!store.ok()) return fail(store.status());
  if (auto status = pipeline::revoke_token(**store, id, pipeline::Caller{}); !status.ok()) return fail(status);
  return render(global, TokenRevoked{id});
}

}  // namespace slipway::cli

namespace slipway::cli {

int run_serving_config_keys(const GlobalOptions& global, bool markdown) {
  if (markdown) {
    std::cout << serve::serving_config_markdown();
    return 0;
  }
  return render(global, ServingConfigKeys{});
}

}  // namespace slipway::cli
