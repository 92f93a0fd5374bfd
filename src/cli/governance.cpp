// slipway annotate, approve and audit: what people record about models, and what the registry
// recorded about everyone.
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <ostream>

#include <fmt/format.h>

#include "cli/cli.h"

namespace slipway::cli {
namespace {

struct MessageResult : CommandResult {
  std::string message;
  std::string target;
  void write_json(JsonWriter& json) const override {
    json.begin_object().key("target").value(target).key("result").value(message).end_object();
  }
  void write_text(std::ostream& out) const override { out << message << "\n"; }
};

// NAME (the model) or NAME@VERSION / NAME@ALIAS (one version, resolved now).
Result<std::pair<std::string, std::optional<std::int64_t>>> target_of(registry::Registry& store,
                                                                      const std::string& reference,
                                                                      bool version_required) {
  SLIPWAY_ASSIGN_OR_RETURN(auto parsed, registry::parse_model_reference(reference));
  if (reference.find('@') == std::string::npos && !version_required) {
    return std::make_pair(parsed.first, std::optional<std::int64_t>());
  }
  // Approving a bare NAME would approve its production version, rarely the one just registered.
  if (reference.find('@') == std::string::npos) {
    return invalid_argument("name the version: " + reference + "@VERSION or " + reference + "@latest (a bare " +
                            reference + " is its production alias, where there is one)");
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto version, store.models().resolve(parsed.first, parsed.second));
  return std::make_pair(version.model, std::optional<std::int64_t>(version.version));
}

Result<MessageResult> annotate(const GlobalOptions& global, const AnnotateFlags& flags) {
  registry::Annotations annotations;
  annotations.description = flags.description;
  annotations.owner = flags.owner;
  for (const auto& tag : flags.tags) {
    auto equals = tag.find('=');
    if (equals == std::string::npos) return invalid_argument("--tag '" + tag + "' must look like KEY=VALUE");
    annotations.set_tags[tag.substr(0, equals)] = tag.substr(equals + 1);
  }
  annotations.remove_tags = flags.untags;
  if (!annotations.description && !annotations.owner && annotations.set_tags.empty() &&
      annotations.remove_tags.empty()) {
    return invalid_argument("nothing to change: give --description, --owner, --tag KEY=VALUE or --untag KEY");
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kWrite));
  SLIPWAY_ASSIGN_OR_RETURN(auto target, target_of(*store, flags.reference, false));
  SLIPWAY_RETURN_IF_ERROR(pipeline::annotate(*store, target.first, target.second, annotations, pipeline::Caller{}));
  MessageResult result;
  result.target = target.second ? target.first + "@" + std::to_string(*target.second) : target.first;
  result.message = "annotated " + result.target;
  return result;
}

Result<MessageResult> approve(const GlobalOptions& global, const std::string& reference, const std::string& note,
                              bool revoke) {
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kWrite));
  SLIPWAY_ASSIGN_OR_RETURN(auto target, target_of(*store, reference, true));
  MessageResult result;
  result.target = target.first + "@" + std::to_string(*target.second);
  if (!revoke && note.empty()) {
    return invalid_argument("an approval needs a --note saying why (it goes in the audit log)");
  }
  SLIPWAY_RETURN_IF_ERROR(
      pipeline::set_approval(*store, {target.first, *target.second, note, revoke}, pipeline::Caller{}).status());
  result.message = revoke ? "approval of " + result.target + " revoked" : result.target + " approved";
  return result;
}

// "2026-12-01", "2026-12-01T10:00:00" (UTC), or a duration back from now ("24h", "30m", "7d").
Result<std::int64_t> since_ms(const std::string& text) {
  if (text.empty()) return 0;
  std::tm time{};
  for (const char* format : {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d"}) {
    time = std::tm{};
    const char* end = strptime(text.c_str(), format, &time);
    if (end != nullptr && *end == '\0') return static_cast<std::int64_t>(timegm(&time)) * 1000;
  }
  // A number and a unit back from now: s, m, h or d.
  char* end = nullptr;
  double amount = std::strtod(text.c_str(), &end);
  std::string unit = end == nullptr ? "" : std::string(end);
  double seconds_per = unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400 : 0;
  if (end == text.c_str() || seconds_per == 0 || !(amount >= 0) || !std::isfinite(amount)) {
    return invalid_argument(
        "--since takes a date (2026-12-01, 2026-12-01T10:00:00, UTC) or a duration back from "
        "now (30m, 24h, 7d); got '" +
        text + "'");
  }
  return unix_time_ms() - static_cast<std::int64_t>(amount * seconds_per * 1000.0);
}

struct AuditResult : CommandResult {
  std::vector<registry::AuditEntry> entries;
  void write_json(JsonWriter& json) const override {
    json.begin_array();
    for (const auto& entry : entries) {
      json.begin_object().key("time_ms").value(entry.time_ms).key("actor").value(entry.actor);
      json.key("action").value(entry.action).key("detail").value(entry.detail).end_object();
    }
    json.end_array();
  }
  void write_text(std::ostream& out) const override {
    std::vector<std::vector<std::string>> rows;
    for (const auto& entry : entries) {
      rows.push_back({format_time_ms(entry.time_ms), entry.actor, entry.action, entry.detail});
    }
    print_table(out, {"time (UTC)", "who", "action", "what"}, rows);
  }
};

Result<AuditResult> audit(const GlobalOptions& global, const AuditFlags& flags) {
  registry::AuditFilter filter;
  filter.model = flags.model;
  SLIPWAY_ASSIGN_OR_RETURN(filter.since_ms, since_ms(flags.since));
  if (flags.limit < 0) return invalid_argument("--limit must be 0 (all) or more");
  filter.limit = static_cast<std::size_t>(flags.limit);
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kReadOnly));
  AuditResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.entries, store->audit().query(filter));
  return result;
}

Result<MessageResult> retire(const GlobalOptions& global, const std::string& reference) {
  if (reference.find('@') == std::string::npos) {
    return invalid_argument("name the version to retire: NAME@VERSION (or NAME@ALIAS)");
  }
  SLIPWAY_ASSIGN_OR_RETURN(auto store, open_workspace(global, WorkspaceAccess::kWrite));
  SLIPWAY_ASSIGN_OR_RETURN(auto target, target_of(*store, reference, true));
  SLIPWAY_ASSIGN_OR_RETURN(auto retired, pipeline::retire(*store, target.first, *target.second, pipeline::Caller{}));
  MessageResult result;
  result.target = retired.reference;
  result.message = result.target + " retired: servers stop serving it within a second; it stays for lineage, and " +
                   "`slipway gc` keeps its bundle";
  for (const auto& endpoint : retired.rollback_targets_dropped) {
    result.message += "\nendpoint " + endpoint + " rolled back to it: it has no rollback target now";
  }
  return result;
}

struct GcResult : CommandResult {
  registry::GcReport report;
  void write_json(JsonWriter& json) const override { pipeline::write_gc_report_json(json, report); }
  void write_text(std::ostream& out) const override {
    std::uint64_t total = 0;
    std::vector<std::vector<std::string>> rows;
    for (const auto& artifact : report.unreferenced) {
      total += artifact.bytes;
      rows.push_back({artifact.sha256.substr(0, 16), format_bytes(artifact.bytes),
                      std::to_string(artifact.age_ms / 3'600'000) + " h"});
    }
    if (!rows.empty()) print_table(out, {"artifact (sha256)", "size", "age"}, rows);
    out << report.unreferenced.size() << " unreferenced artifact(s), " << format_bytes(total)
        << (report.applied ? " deleted" : ": a dry run; `slipway gc --apply` deletes them") << "\n";
    if (report.too_young > 0) {
      out << report.too_young << " more younger than --min-age are kept (a run may be about to register them)\n";
    }
  }
};

Result<GcResult> gc(const GlobalOptions& global, bool apply, const std::string& min_age) {
  SLIPWAY_ASSIGN_OR_RETURN(auto age, since_ms(min_age));
  SLIPWAY_ASSIGN_OR_RETURN(auto store,
                           open_workspace(global, apply ? WorkspaceAccess::kWrite : WorkspaceAccess::kReadOnly));
  GcResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.report,
                           pipeline::collect_garbage(*store, apply, unix_time_ms() - age, pipeline::Caller{}));
  return result;
}

struct ReproduceResult : CommandResult {
  pipeline::Reproduction reproduction;
  void write_json(JsonWriter& json) const override { pipeline::write_reproduction_json(json, reproduction); }
  void write_text(std::ostream& out) const override {
    out << "run         " << reproduction.run_id << "\nrecorded    sha256:" << reproduction.recorded_sha256
        << "\nreproduced  sha256:" << reproduction.reproduced_sha256 << "\n"
        << (reproduction.identical() ? "identical: the same spec, data, code and seed gave the same bundle"
                                     : "DIFFERENT: the same spec, data, code and seed gave another bundle")
        << " (" << fmt::format("{:.1f}", reproduction.seconds) << " s)\n";
  }
};

}  // namespace

int run_annotate(const GlobalOptions& global, const AnnotateFlags& flags) {
  return render(global, annotate(global, flags));
}

int run_approve(const GlobalOptions& global, const std::string& reference, const std::string& note, bool revoke) {
  return render(global, approve(global, reference, note, revoke));
}

int run_audit(const GlobalOptions& global, const AuditFlags& flags) { return render(global, audit(global, flags)); }

int run_retire(const GlobalOptions& global, const std::string& reference) {
  return render(global, retire(global, reference));
}

int run_reproduce(const GlobalOptions& global, const std::string& run_id) {
  // 0 identical, 1 different, 2 refused (code version, data, not a finished training run).
  auto store = open_workspace(global, WorkspaceAccess::kReadOnly);
  if (!store.ok()) {
    fail(store.status());
    return 2;
  }
  auto reproduction = pipeline::reproduce_run(**store, run_id);
  if (!reproduction.ok()) {
    fail(reproduction.status());
    return 2;
  }
  ReproduceResult result;
  result.reproduction = *reproduction;
  render(global, result);
  return reproduction->identical() ? 0 : 1;
}

int run_gc(const GlobalOptions& global, bool apply, const std::string& min_age) {
  return render(global, gc(global, apply, min_age));
}

}  // namespace slipway::cli
