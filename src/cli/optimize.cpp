// slipway optimize: the candidate table against the SLO, each candidate registered as a version.
#include <fmt/format.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <ostream>
#include <sstream>

#include "cli/cli.h"
#include "slipway/optimize.h"
#include "slipway/serve.h"

namespace slipway::cli {
namespace {

std::string format_optional(double value, const char* format) {
  if (std::isnan(value)) return "-";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return without_negative_zero(fmt::format(fmt::runtime(format), value));
}

void write_markdown_table(std::ostream& out, const std::vector<std::string>& headers,
                          const std::vector<std::vector<std::string>>& rows) {
  out << "|";
  for (const auto& cell : headers) out << " " << cell << " |";
  out << "\n|";
  for (std::size_t index = 0; index < headers.size(); ++index) out << "---|";
  out << "\n";
  for (const auto& row : rows) {
    out << "|";
    for (const auto& cell : row) out << " " << cell << " |";
    out << "\n";
  }
}

// The interleaved rounds' closed-loop throughput: "9120 (8800-9400)", or "-" when not measured.
std::string throughput_cell(const optimize::CandidateResult& candidate) {
  if (candidate.throughput_rounds == 0) return "-";
  return fmt::format("{:.0f} ({:.0f}-{:.0f})", candidate.throughput_median, candidate.throughput_low,
                     candidate.throughput_high);
}

// A candidate's SLO column: "meets", or every clause it misses.
std::string slo_cell(bool meets, const std::vector<std::string>& failures) {
  if (meets) return "meets";
  std::string cell = "misses: " + failures.front();
  for (std::size_t failure = 1; failure < failures.size(); ++failure) cell += "; " + failures[failure];
  return cell;
}

struct OptimizeResult : CommandResult {
  optimize::OptimizeReport report;
  std::string data_path;
  std::string markdown_path;

  std::vector<std::string> headers() const {
    const std::string& metric = report.quality_metric;
    return {"",        "candidate", metric,    metric + " drop", "worst slice drop", "rows differ", "p50 ms",
            "p95 ms",  "p99 ms",    "max rps", "req/s (range)",  "cost/1k",          "bundle",      "memory",
            "request", "SLO",       "version"};
  }

  std::vector<std::vector<std::string>> rows() const {
    std::vector<std::vector<std::string>> rows;
    for (std::size_t index = 0; index < report.candidates.size(); ++index) {
      const auto& c = report.candidates[index];
      std::string mark = static_cast<int>(index) == report.recommended ? "*" : "";
      if (!c.error.empty()) {
        rows.push_back(
            {mark, c.name, "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "-", "error: " + c.error, "-"});
        continue;
      }
      const std::string slo = slo_cell(c.meets_slo, c.failures);
      rows.push_back(
          {mark, c.name, format_metric(c.quality), format_optional(c.quality_drop, "{:.4f}"),
           c.worst_slice.empty() ? "-" : format_optional(c.worst_slice_drop, "{:.4f}") + " (" + c.worst_slice + ")",
           std::to_string(c.rows_beyond_tolerance), fmt::format("{:.3f}", c.p50_ms), fmt::format("{:.3f}", c.p95_ms),
           fmt::format("{:.3f}", c.p99_ms), fmt::format("{:.0f}", c.max_rate), throughput_cell(c),
           format_optional(c.cost_per_1k, "{:.3g}"), format_bytes(c.bundle_bytes), format_bytes(c.loaded_bytes),
           format_bytes(c.request_bytes), slo, c.version.empty() ? "-" : c.version});
    }
    return rows;
  }

  std::string markdown() const {
    std::ostringstream out;
    out << "# slipway optimize " << report.baseline_name << "\n\nGolden rows: `" << data_path << "`. SLO: `"
        << (report.slo_text.empty() ? "(none)" : report.slo_text) << "`";
    if (report.price_per_hour > 0) out << ", price " << report.price_per_hour << " per hour";
    if (report.repeat_rate > 0) out << ", " << report.repeat_rate << " of requests repeated";
    out << ".\n\n";
    write_markdown_table(out, headers(), rows());
    out << "\n**Recommended:** " << report.reason << "\n";
    return out.str();
  }

  void write_json(JsonWriter& json) const override { optimize::write_optimize_report_json(json, report, data_path); }

  // The terminal's table: the columns a decision needs, narrow enough for a terminal; what each
  // candidate misses (or why it failed) under it. --markdown and --json have every column.
  void write_terminal_table(std::ostream& out) const {
    const std::string& metric = report.quality_metric;
    bool priced = report.price_per_hour > 0;
    std::vector<std::string> headers = {"",       "candidate", metric,   "drop",    "worst slice",
                                        "differ", "p95 ms",    "p99 ms", "max rps", "req/s (range)"};
    if (priced) headers.emplace_back("cost/1k");
    for (const char* header : {"memory", "SLO", "version"}) headers.emplace_back(header);
    std::vector<std::vector<std::string>> rows;
    std::vector<std::string> notes;
    for (std::size_t index = 0; index < report.candidates.size(); ++index) {
      const auto& c = report.candidates[index];
      std::vector<std::string> row = {static_cast<int>(index) == report.recommended ? "*" : "", c.name};
      if (!c.error.empty()) {
        row.resize(headers.size(), "-");
        row[headers.size() - 2] = "error";
        notes.push_back(c.name + ": " + c.error);
        rows.push_back(std::move(row));
        continue;
      }
      std::string worst = c.worst_slice.empty() ? "-" : format_optional(c.worst_slice_drop, "{:.4f}");
      for (std::string cell :
           {format_metric(c.quality), format_optional(c.quality_drop, "{:.4f}"), worst,
            std::to_string(c.rows_beyond_tolerance), fmt::format("{:.3f}", c.p95_ms), fmt::format("{:.3f}", c.p99_ms),
            fmt::format("{:.0f}", c.max_rate), throughput_cell(c)}) {
        row.push_back(std::move(cell));
      }
      if (priced) row.push_back(format_optional(c.cost_per_1k, "{:.3g}"));
      row.push_back(format_bytes(c.loaded_bytes));
      row.push_back(c.meets_slo ? "meets" : fmt::format("misses {}", c.failures.size()));
      row.push_back(c.version.empty() ? "-" : c.version);
      if (!c.meets_slo) notes.push_back(c.name + " misses: " + slo_cell(false, c.failures).substr(8));
      if (!c.worst_slice.empty() && c.worst_slice_drop > 0) {
        notes.push_back(c.name + "'s worst slice: " + c.worst_slice);
      }
      rows.push_back(std::move(row));
    }
    print_table(out, headers, rows);
    if (!notes.empty()) out << "\n";
    for (const auto& note : notes) out << "  " << note << "\n";
  }

  void write_text(std::ostream& out) const override {
    out << "optimize " << report.baseline_name << " on " << data_path << "; SLO "
        << (report.slo_text.empty() ? "(none: throughput only)" : report.slo_text);
    if (report.price_per_hour > 0) out << ", price " << report.price_per_hour << "/hour";
    if (report.repeat_rate > 0) out << ", " << report.repeat_rate << " of requests repeated";
    out << "\n\n";
    write_terminal_table(out);
    if (!report.prune_curve.empty()) {
      out << "\nprune curve (" << report.quality_metric << " on the golden rows by rounds kept):";
      for (const auto& [rounds, quality] : report.prune_curve) out << " " << rounds << ":" << format_metric(quality);
      out << "\n";
    }
    out << "\nrecommended: " << report.reason << "\n";
    if (!markdown_path.empty()) out << "table written to " << markdown_path << "\n";
  }
};

struct LlmOptimizeResult : CommandResult {
  optimize::LlmOptimizeReport report;
  std::string model_path, markdown_path;

  static std::vector<std::string> headers() {
    return {"",
            "candidate",
            "top-1 agree",
            "max Δlogit",
            "tokens/s",
            "TTFT p50/p95 ms",
            "ITL p50/p95 ms",
            "cost/1k tok",
            "weights",
            "KV cache",
            "SLO"};
  }

  std::vector<std::vector<std::string>> rows() const {
    std::vector<std::vector<std::string>> rows;
    for (std::size_t index = 0; index < report.candidates.size(); ++index) {
      const auto& c = report.candidates[index];
      std::string mark = static_cast<int>(index) == report.recommended ? "*" : "";
      if (!c.error.empty()) {
        rows.push_back({mark, c.name, "-", "-", "-", "-", "-", "-", "-", "-", "error: " + c.error});
        continue;
      }
      const std::string slo = slo_cell(c.meets_slo, c.failures);
      rows.push_back({mark, c.name, fmt::format("{:.3f}", c.top1_agreement),
                      fmt::format("{:.3g}", c.max_logit_difference), fmt::format("{:.1f}", c.output_tokens_per_second),
                      fmt::format("{:.0f} / {:.0f}", c.time_to_first_token.p50, c.time_to_first_token.p95),
                      fmt::format("{:.1f} / {:.1f}", c.inter_token_latency.p50, c.inter_token_latency.p95),
                      format_optional(c.cost_per_1k, "{:.3g}"), format_bytes(c.weight_bytes),
                      format_bytes(c.kv_cache_bytes), slo});
    }
    return rows;
  }

  std::string load_text() const {
    return fmt::format("{} requests from {} closed-loop clients, {} prompt and {} output tokens each", report.requests,
                       report.clients, report.prompt_tokens, report.output_tokens);
  }

  // How to serve the recommended candidate (quantizing it first when its file was not kept).
  std::string serve_command() const {
    if (report.recommended < 0) return {};
    const auto& chosen = report.candidates[static_cast<std::size_t>(report.recommended)];
    std::string command;
    std::string served = chosen.model_path;
    if (auto type = chosen.settings.find("quantize"); type != chosen.settings.end() && !report.files_kept) {
      served = std::filesystem::path(chosen.model_path).filename().string();
      command = fmt::format("slipway llm quantize {} {} --type {} && ", model_path, served, type->second);
    }
    command += "slipway llm serve " + served;
    return chosen.serve_flags.empty() ? command : command + " " + chosen.serve_flags;
  }

  std::string markdown() const {
    std::ostringstream out;
    out << "# slipway optimize " << report.baseline_name << "\n\nLoad: " << load_text() << ". SLO: `"
        << (report.slo_text.empty() ? "(none)" : report.slo_text) << "`";
    if (report.price_per_hour > 0) out << ", price " << report.price_per_hour << " per hour";
    out << ".\n\n";
    write_markdown_table(out, headers(), rows());
    out << "\n**Recommended:** " << report.reason << "\n";
    if (!serve_command().empty()) out << "\n`" << serve_command() << "`\n";
    return out.str();
  }

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("baseline").value(report.baseline_name).key("slo").value(report.slo_text);
    json.key("price_per_hour").value(report.price_per_hour);
    json.key("load").begin_object();
    json.key("clients").value(static_cast<std::uint64_t>(report.clients));
    json.key("requests").value(static_cast<std::uint64_t>(report.requests));
    json.key("prompt_tokens").value(static_cast<std::uint64_t>(report.prompt_tokens));
    json.key("output_tokens").value(static_cast<std::uint64_t>(report.output_tokens));
    json.end_object();
    auto latency = [&json](const char* key, const optimize::LlmLatency& value) {
      json.key(key).begin_object().key("p50").value(value.p50).key("p95").value(value.p95);
      json.key("p99").value(value.p99).key("mean").value(value.mean).end_object();
    };
    json.key("candidates").begin_array();
    for (const auto& c : report.candidates) {
      json.begin_object().key("name").value(c.name).key("technique").value(c.technique);
      json.key("settings").begin_object();
      for (const auto& [flag, value] : c.settings) json.key(flag).value(value);
      json.end_object();
      json.key("serve_flags").value(c.serve_flags);
      if (!c.error.empty()) {
        json.key("error").value(c.error).end_object();
        continue;
      }
      json.key("top1_agreement").value(c.top1_agreement);
      json.key("max_logit_difference").value(c.max_logit_difference);
      json.key("rms_logit_difference").value(c.rms_logit_difference);
      json.key("output_tokens_per_second").value(c.output_tokens_per_second);
      latency("ttft_ms", c.time_to_first_token);
      latency("itl_ms", c.inter_token_latency);
      json.key("completed").value(static_cast<std::uint64_t>(c.completed));
      json.key("cost_per_1k_tokens");
      if (std::isnan(c.cost_per_1k)) {
        json.null();
      } else {
        json.value(c.cost_per_1k);
      }
      json.key("weight_bytes").value(c.weight_bytes).key("kv_cache_bytes").value(c.kv_cache_bytes);
      json.key("meets_slo").value(c.meets_slo).key("failures").begin_array();
      for (const auto& failure : c.failures) json.value(failure);
      json.end_array().end_object();
    }
    json.end_array();
    json.key("recommended");
    if (report.recommended < 0) {
      json.null();
    } else {
      json.value(report.candidates[static_cast<std::size_t>(report.recommended)].name);
    }
    json.key("reason").value(report.reason).key("serve_command").value(serve_command()).end_object();
  }

  void write_text(std::ostream& out) const override {
    out << "optimize " << report.baseline_name << ": " << load_text() << "; SLO "
        << (report.slo_text.empty() ? "(none: throughput only)" : report.slo_text);
    if (report.price_per_hour > 0) out << ", price " << report.price_per_hour << "/hour";
    out << "\n\n";
    print_table(out, headers(), rows());
    out << "\nrecommended: " << report.reason << "\n";
    if (!serve_command().empty()) out << "serve it: " << serve_command() << "\n";
    if (!markdown_path.empty()) out << "table written to " << markdown_path << "\n";
  }
};

// Checked before minutes of measuring (and any registration), not after.
Status check_markdown_path(const OptimizeFlags& flags) {
  if (flags.markdown_path.empty()) return {};
  std::filesystem::path folder = std::filesystem::absolute(flags.markdown_path).parent_path();
  std::error_code error;
  if (!std::filesystem::is_directory(folder, error) || ::access(folder.c_str(), W_OK) != 0 ||
      std::filesystem::is_directory(flags.markdown_path, error)) {
    return invalid_argument("--markdown: cannot write in " + folder.string());
  }
  return {};
}

// Builds a table into `result.report` with a progress bar, then writes its Markdown when asked.
template <typename Options, typename TableResult, typename Build>
Status run_table(const OptimizeFlags& flags, Options& options, TableResult& result, const Build& build) {
  ProgressBar bar("optimize", 1, flags.progress);
  options.on_progress = [&bar](int step, int total, const std::string& what) {
    bar.set_total(total);
    bar.update(step, what);
  };
  SLIPWAY_ASSIGN_OR_RETURN(result.report, build(options));
  bar.finish();
  if (!flags.markdown_path.empty()) {
    SLIPWAY_RETURN_IF_ERROR(write_file_atomic(flags.markdown_path, result.markdown()));
    result.markdown_path = flags.markdown_path;
  }
  return {};
}

// What both tables read alike: the price, and the techniques asked for (left as they are, the
// kind's defaults, when --candidates is not given).
Status read_price_and_candidates(const OptimizeFlags& flags, std::string_view known, double& price_per_hour,
                                 std::vector<std::string>& techniques) {
  if (flags.price_per_hour < 0 || !std::isfinite(flags.price_per_hour)) {
    return invalid_argument("--price-per-hour must be a number >= 0");
  }
  price_per_hour = flags.price_per_hour;
  if (flags.candidates.empty()) return {};
  techniques.clear();
  for (auto& technique : config_detail::split_list(flags.candidates)) {
    if (!technique.empty()) techniques.push_back(std::move(technique));
  }
  if (techniques.empty()) return invalid_argument(fmt::format("--candidates needs at least one of: {}", known));
  return {};
}

// The GGUF file a reference names: a file, or a registered model whose version is one; empty when
// it names a tabular model.
Result<std::string> gguf_path(const GlobalOptions& global, const std::string& reference) {
  std::error_code error;
  if (std::filesystem::is_regular_file(reference, error)) {
    if (serve::is_gguf_artifact(reference)) return reference;
    if (reference.ends_with(".gguf")) return invalid_argument(reference + " is not a GGUF file (no GGUF magic)");
    return std::string();
  }
  if (reference.ends_with(".gguf")) return not_found("no such file: " + reference);
  if (pipeline::names_bundle_file(reference)) return std::string();
  auto store = open_workspace(global, WorkspaceAccess::kReadOnly);
  if (!store.ok()) return std::string();  // the tabular path reports it
  SLIPWAY_ASSIGN_OR_RETURN(auto parsed, registry::parse_model_reference(reference));
  auto version = (*store)->models().resolve(parsed.first, parsed.second);
  if (!version.ok()) return std::string();
  std::string path = (*store)->artifacts().path_for(version->bundle_sha256);
  return serve::is_gguf_artifact(path) ? path : std::string();
}

Result<LlmOptimizeResult> optimize_llm_command(const OptimizeFlags& flags, const std::string& path) {
  if (flags.register_candidates || flags.resume) {
    return invalid_argument(
        "LLM candidates are measured, not registered: register the file you choose with `slipway import gguf`");
  }
  for (const auto& [given, name] : {std::pair{!flags.data_path.empty(), "--data"},
                                    {!flags.train_path.empty(), "--train"},
                                    {!flags.slice.empty(), "--slice"},
                                    {flags.tolerance.has_value(), "--tolerance"}}) {
    if (given) return invalid_argument(std::string(name) + " applies to tabular models, not to a GGUF LLM");
  }
  SLIPWAY_RETURN_IF_ERROR(check_markdown_path(flags));
  optimize::LlmOptimizeOptions options;
  options.model_path = path;
  options.baseline_name = flags.reference;
  if (!flags.slo.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(options.slo, optimize::parse_llm_slo(flags.slo));
  }
  SLIPWAY_RETURN_IF_ERROR(read_price_and_candidates(flags, "quantize, kv, speculative, batching, tensor-parallel",
                                                    options.price_per_hour, options.techniques));
  options.clients = flags.clients;
  options.requests = flags.requests;
  options.prompt_tokens = flags.prompt_tokens;
  options.output_tokens = flags.output_tokens;
  if (flags.threads < 0 || flags.threads > 1024)
    return invalid_argument("--threads must be from 0 (all cores) to 1024");
  options.threads = flags.threads;
  options.engine.max_sequences = std::max<std::size_t>(options.engine.max_sequences, flags.clients);
  options.engine.max_batched_tokens = std::max(options.engine.max_batched_tokens, options.engine.max_sequences);
  options.work_dir = flags.out_dir;
  if (!flags.out_dir.empty()) {
    std::error_code error;
    std::filesystem::create_directories(flags.out_dir, error);
    if (error || ::access(flags.out_dir.c_str(), W_OK) != 0) {
      return invalid_argument("--out-dir: cannot write in " + flags.out_dir);
    }
  }
  LlmOptimizeResult result;
  result.model_path = path;
  SLIPWAY_RETURN_IF_ERROR(run_table(flags, options, result, optimize::optimize_llm));
  return result;
}

Result<OptimizeResult> optimize_command(const GlobalOptions& global, const OptimizeFlags& flags) {
  optimize::OptimizationRequest request;
  request.reference = flags.reference;
  request.data_path = flags.data_path;
  request.train_path = flags.train_path;
  request.unlabeled_path = flags.unlabeled_path;
  request.calibration_path = flags.calibration_path;
  request.slo = flags.slo;
  SLIPWAY_RETURN_IF_ERROR(read_price_and_candidates(flags, "quantize, prune, features, distill, int8, sparse, serving",
                                                    request.price_per_hour, request.techniques));
  // The flags' own ranges, said in their names (run_optimization checks the same settings for
  // every door, in words).
  if (flags.tolerance && (!(*flags.tolerance >= 0) || !std::isfinite(*flags.tolerance))) {
    return invalid_argument("--tolerance must be a finite number >= 0");
  }
  request.tolerance = flags.tolerance;
  SLIPWAY_ASSIGN_OR_RETURN(request.duration, parse_duration("--duration", flags.duration));
  if (request.duration < std::chrono::milliseconds(200)) return invalid_argument("--duration must be at least 200ms");
  if (!flags.budget.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(request.budget, parse_duration("--budget", flags.budget));
    if (*request.budget <= std::chrono::milliseconds(0)) return invalid_argument("--budget must be positive");
  }
  if (!flags.slo.empty()) {
    SLIPWAY_ASSIGN_OR_RETURN(auto slo, optimize::parse_slo(flags.slo));
    if (slo.cost_per_1k && !(flags.price_per_hour > 0)) return invalid_argument("a cost SLO needs --price-per-hour");
  }
  if (flags.resume && !flags.register_candidates) {
    return invalid_argument("--resume continues a --register run of a registered model; add --register");
  }
  if (flags.resume && flags.reference.find('@') == std::string::npos) {
    // Without a production alias a bare NAME is the newest version: after a --register run, one of
    // its candidates.
    return invalid_argument("--resume needs the baseline pinned as NAME@VERSION (the run being resumed printed it)");
  }
  if (!(flags.repeat_rate >= 0 && flags.repeat_rate <= 1)) return invalid_argument("--repeat-rate must be from 0 to 1");
  if (!(flags.alpha >= 0 && flags.alpha <= 1)) return invalid_argument("--alpha must be from 0 to 1");
  if (!(flags.temperature > 0 && flags.temperature <= 100)) {
    return invalid_argument("--temperature must be above 0 and at most 100");
  }
  if (flags.threads < 0 || flags.threads > 256) return invalid_argument("--threads must be from 1 to 256");
  request.threads = std::max(1, flags.threads);
  request.repeat_rate = flags.repeat_rate;
  request.distill_alpha = flags.alpha;
  request.distill_temperature = flags.temperature;
  request.slice_column = flags.slice;
  request.register_candidates = flags.register_candidates;
  request.resume = flags.resume;
  SLIPWAY_RETURN_IF_ERROR(check_markdown_path(flags));
  std::unique_ptr<registry::Registry> store;
  if (!pipeline::names_bundle_file(flags.reference)) {
    SLIPWAY_ASSIGN_OR_RETURN(store, open_workspace(global, flags.register_candidates ? WorkspaceAccess::kWrite
                                                                                     : WorkspaceAccess::kReadOnly));
  }
  OptimizeResult result;
  result.data_path = flags.data_path;
  SLIPWAY_RETURN_IF_ERROR(run_table(flags, request, result, [&store](const optimize::OptimizationRequest& given) {
    return optimize::run_optimization(store.get(), given);
  }));
  return result;
}

}  // namespace

int run_optimize(const GlobalOptions& global, const OptimizeFlags& flags) {
  auto path = gguf_path(global, flags.reference);
  if (!path.ok()) return fail(path.status());
  if (!path->empty()) return render(global, optimize_llm_command(flags, *path));
  if (flags.data_path.empty())
    return fail(invalid_argument("--data (labelled golden rows) is required for a tabular model"));
  return render(global, optimize_command(global, flags));
}

}  // namespace slipway::cli
