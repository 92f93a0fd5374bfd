// The Registry facade: opens the workspace (backend, schema, artifact store) and hands out the
// stores. Also the names every store validates.
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>

#include "registry/migrations.h"
#include "registry/store_context.h"

namespace slipway::registry {
namespace {

std::string current_actor() {
  if (const char* user = std::getenv("USER"); user != nullptr && *user != '\0') return user;
  passwd entry{};
  passwd* found = nullptr;
  std::array<char, 4096> buffer{};
  if (getpwuid_r(getuid(), &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr)
    return found->pw_name;
  return "uid:" + std::to_string(getuid());
}

bool valid_name_characters(const std::string& name) {
  if (name.empty() || name.size() > 128 || !std::isalnum(static_cast<unsigned char>(name.front()))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

bool all_digits(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

Status validate_model_name(const std::string& name) {
  if (!valid_name_characters(name)) {
    return invalid_argument("invalid model name '" + name +
                            "': use 1 to 128 letters, digits, '_', '-' or '.', starting with a letter or digit");
  }
  return {};
}

Status validate_alias_name(const std::string& alias) {
  if (!valid_name_characters(alias) || all_digits(alias) || alias == "latest") {
    return invalid_argument("invalid alias '" + alias +
                            "': use letters, digits, '_', '-' or '.', not only digits, and not 'latest'");
  }
  return {};
}

Status validate_experiment_name(const std::string& experiment) {
  auto refuse = [&](const std::string& why) {
    std::string shown = experiment.size() > 40 ? experiment.substr(0, 40) + "..." : experiment;
    for (char& c : shown) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    }
    return invalid_argument("invalid experiment name '" + shown + "': " + why);
  };
  if (experiment.empty() || experiment.size() > 128) return refuse("use 1 to 128 characters");
  for (char c : experiment) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) return refuse("control characters such as newlines are not allowed");
  }
  if (!is_valid_utf8(experiment)) return refuse("it is not UTF-8 text");
  return {};
}

Result<std::pair<std::string, VersionSelector>> parse_model_reference(const std::string& reference) {
  auto at = reference.find('@');
  std::string name = reference.substr(0, at);
  SLIPWAY_RETURN_IF_ERROR(validate_model_name(name));
  VersionSelector selector;
  if (at != std::string::npos) {
    std::string which = reference.substr(at + 1);
    if (all_digits(which) && which.size() < 18) {
      selector.version = std::stoll(which);
    } else if (which == "latest") {
      selector.latest = true;
    } else {
      SLIPWAY_RETURN_IF_ERROR(validate_alias_name(which));
      selector.alias = which;
    }
  }
  return std::make_pair(name, selector);
}

const ModelVersion* select_version(const std::vector<ModelVersion>& versions, const VersionSelector& selector) {
  auto carries = [](const ModelVersion& version, std::string_view alias) {
    return std::find(version.aliases.begin(), version.aliases.end(), alias) != version.aliases.end();
  };
  if (selector.version) {
    auto found = std::find_if(versions.begin(), versions.end(),
                              [&](const ModelVersion& version) { return version.version == *selector.version; });
    return found == versions.end() ? nullptr : &*found;
  }
  std::string_view alias = !selector.alias.empty() ? std::string_view(selector.alias)
                           : selector.latest       ? std::string_view()
                                                   : kProductionAlias;
  if (!alias.empty()) {
    for (const auto& version : versions) {
      if (carries(version, alias)) return &version;
    }
    if (!selector.alias.empty()) return nullptr;
  }
  // The newest version still in service.
  for (auto version = versions.rbegin(); version != versions.rend(); ++version) {
    if (version->retired_ms == 0) return &*version;
  }
  return nullptr;
}

Registry::Registry(std::string home, std::unique_ptr<StoreContext> context, std::int64_t schema_version)
    : home_(std::move(home)),
      context_(std::move(context)),
      schema_version_(schema_version),
      runs_(*context_),
      models_(*context_),
      serving_configs_(*context_),
      tokens_(*context_),
      endpoints_(*context_),
      retraining_(*context_),
      studies_(*context_),
      audit_(*context_) {}

Registry::~Registry() = default;

bool Registry::read_only() const { return context_->backend->read_only(); }

void Registry::set_actor(std::string actor) { context_->actor = std::move(actor); }

ArtifactStore& Registry::artifacts() { return context_->artifacts; }

std::int64_t Registry::latest_schema_version() { return sqlite_migrations().back().version; }

Result<std::unique_ptr<Registry>> Registry::open(const std::string& home, bool create) {
  return open(home, OpenOptions{.create = create});
}

Result<std::unique_ptr<Registry>> Registry::open(const std::string& home, const OpenOptions& options) {
  if (options.create && options.read_only) {
    return invalid_argument("a workspace cannot be created by a read-only open");
  }
  std::string database_path = home + "/slipway.db";
  std::error_code error;
  if (!options.create && !std::filesystem::exists(database_path, error)) {
    return not_found("no Slipway workspace at '" + home + "'; run `slipway init` there, or pass --home");
  }
  if (options.create) SLIPWAY_RETURN_IF_ERROR(make_directories(home + "/artifacts/sha256"));
  SLIPWAY_ASSIGN_OR_RETURN(
      auto backend, open_sqlite_backend(database_path, {.create = options.create, .read_only = options.read_only}));
  std::int64_t version = 0;
  if (options.read_only) {
    SLIPWAY_ASSIGN_OR_RETURN(version, applied_schema_version(*backend, home));
    if (version == 0) {
      // No schema at all: the command that created the workspace was stopped before its first
      // migration committed (killed, or out of disk), not a workspace of an old slipway.
      bool has_tables = false;
      SLIPWAY_RETURN_IF_ERROR(backend->read([&](SqlTransaction& sql) -> Status {
        SLIPWAY_ASSIGN_OR_RETURN(auto row, sql.query_row("SELECT 1 FROM sqlite_master WHERE type = 'table' LIMIT 1"));
        has_tables = row.has_value();
        return {};
      }));
      if (!has_tables) {
        return failed_precondition("the workspace at '" + home +
                                   "' was never fully created (the command creating it was stopped, or the disk was "
                                   "full); `slipway init` there creates it");
      }
    }
    if (version < latest_schema_version()) {
      std::string made_before = version == 0 ? " (it predates schema versions)" : "";
      return failed_precondition("the workspace at '" + home + "' has schema version " + std::to_string(version) +
                                 made_before + " and this slipway needs version " +
                                 std::to_string(latest_schema_version()) +
                                 "; a read-only command does not upgrade it: run `slipway verify --repair` (or any "
                                 "command that writes) once");
    }
  } else {
    SLIPWAY_ASSIGN_OR_RETURN(version, apply_migrations(*backend, home));
  }
  auto context = std::make_unique<StoreContext>(
      StoreContext{std::move(backend), ArtifactStore(home + "/artifacts", options.read_only), current_actor()});
  return std::unique_ptr<Registry>(new Registry(home, std::move(context), version));
}

}  // namespace slipway::registry
