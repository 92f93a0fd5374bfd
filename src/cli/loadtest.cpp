// `slipway loadtest`: flags to LoadTestOptions, CSV rows to KServe v2 request bodies, the report.
#include <cmath>
#include <iostream>

#include <fmt/format.h>

#include "cli/cli.h"
#include "slipway/data.h"
#include "slipway/optimize.h"
#include "slipway/serve.h"

namespace slipway::cli {

namespace {

// What one load test measured, and each --slo against it.
struct LoadTestResult : CommandResult {
  std::string url;
  double rate = 0;  // the open loop's target; 0 for a closed loop
  optimize::LoadTestReport report;
  std::vector<std::pair<const optimize::LatencySlo*, double>> checked;
  bool slos_met = true;

  void write_json(JsonWriter& json) const override {
    json.begin_object().key("url").value(url);
    json.key("mode").value(rate > 0 ? "open" : "closed");
    json.key("target_rate").value(report.target_rate).key("achieved_rate").value(report.achieved_rate);
    json.key("measured_seconds").value(report.measured_seconds);
    json.key("requests").value(report.sent).key("succeeded").value(report.succeeded);
    json.key("late_sends").value(report.late_sends).key("connections").value(report.connections_used);
    json.key("status").begin_object();
    for (const auto& [status, count] : report.status_counts) {
      json.key(status == 0 ? "no_response" : std::to_string(status)).value(count);
    }
    json.end_object().key("latency_ms").begin_object();
    json.key("mean").value(report.mean_ms).key("p50").value(report.p50_ms).key("p90").value(report.p90_ms);
    json.key("p95").value(report.p95_ms).key("p99").value(report.p99_ms).key("p99.9").value(report.p999_ms);
    json.key("max").value(report.max_ms).end_object();
    json.key("slos").begin_array();
    for (const auto& [slo, value] : checked) {
      json.begin_object().key("slo").value(slo->text).key("value_ms").value(value);
      json.key("met").value(value <= slo->limit_ms).end_object();
    }
    json.end_array().key("slos_met").value(slos_met).end_object();
  }

  void write_text(std::ostream& out) const override {
    out << fmt::format("requests   {} in {:.2f} s: {:.1f} req/s", report.sent, report.measured_seconds,
                       report.achieved_rate);
    if (rate > 0) {
      out << fmt::format(" (target {:.1f}; {} sent more than 1 ms late)", rate, report.late_sends);
    }
    out << "\nstatus    ";
    for (const auto& [status, count] : report.status_counts) {
      out << " " << (status == 0 ? std::string("no-response") : std::to_string(status)) << "=" << count;
    }
    out << fmt::format(
        "\nlatency    mean {:.3f}  p50 {:.3f}  p90 {:.3f}  p95 {:.3f}  p99 {:.3f}  p99.9 {:.3f}  max {:.3f} ms\n",
        report.mean_ms, report.p50_ms, report.p90_ms, report.p95_ms, report.p99_ms, report.p999_ms, report.max_ms);
    for (const auto& [slo, value] : checked) {
      out << fmt::format("slo        {}: {} ({} = {:.3f} ms)\n", slo->text, value <= slo->limit_ms ? "met" : "MISSED",
                         slo->statistic, value);
    }
  }
};

}  // namespace

int run_loadtest(const GlobalOptions& global, const LoadTestFlags& flags) {
  optimize::LoadTestOptions options;
  options.url = flags.url;
  options.rate = flags.rate;
  options.concurrency = flags.concurrency;
  options.poisson = flags.arrival == "poisson";
  options.max_connections = flags.connections;
  options.threads = flags.threads;
  options.seed = flags.seed;
  options.repeat_rate = flags.repeat_rate;
  if (options.rate == 0 && options.concurrency == 0) {
    return fail(invalid_argument("give --rate R (open loop) or --concurrency C (closed loop)"));
  }
  auto duration = parse_duration("--duration", flags.duration);
  auto warmup = parse_duration("--warmup", flags.warmup);
  auto timeout = parse_duration("--timeout", flags.timeout);
  for (const auto* parsed : {&duration, &warmup, &timeout}) {
    if (!parsed->ok()) return fail(parsed->status());
  }
  options.duration = *duration;
  options.warmup = *warmup;
  options.timeout = *timeout;
  // Every scheduled request keeps its latency: past what one process can send, a rate only
  // allocates. (1M req/s is ~30x what a loopback server answers here.)
  constexpr double kMaxRate = 1e6;
  constexpr double kMaxScheduled = 2e8;
  double seconds = std::chrono::duration<double>(options.duration + options.warmup).count();
  if (!std::isfinite(options.rate) || options.rate > kMaxRate || options.rate * seconds > kMaxScheduled) {
    return fail(invalid_argument(fmt::format(
        "--rate {} for {:.0f} s is more than a load generator can schedule (at most {:.0f} req/s and {:.0f} requests)",
        flags.rate, seconds, kMaxRate, kMaxScheduled)));
  }
  if (options.concurrency > 100'000) return fail(invalid_argument("--concurrency must be at most 100000"));
  for (const auto& header : flags.headers) {
    auto colon = header.find(':');
    if (colon == std::string::npos || colon == 0) {
      return fail(invalid_argument("--header '" + header + "' must look like 'Name: value'"));
    }
    std::string value = header.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    options.headers.emplace_back(header.substr(0, colon), value);
  }
  if (!flags.body_path.empty() && !flags.csv_path.empty()) {
    return fail(invalid_argument("give --body or --csv, not both"));
  }
  if (!flags.body_path.empty()) {
    auto body = read_file(flags.body_path);
    if (!body.ok()) return fail(body.status());
    options.bodies.push_back(std::move(*body));
  }
  if (!flags.csv_path.empty()) {
    auto table = data::read_csv(flags.csv_path);
    if (!table.ok()) return fail(table.status());
    options.bodies = serve::v2_requests_from_table(
        *table, static_cast<std::size_t>(std::max(1, flags.rows_per_request)), flags.skip_columns);
    if (options.bodies.empty()) {
      return fail(invalid_argument(flags.csv_path + " has fewer rows than --rows-per-request"));
    }
  }
  std::vector<optimize::LatencySlo> slos;
  for (const auto& text : flags.slos) {
    auto slo = optimize::parse_latency_slo(text);
    if (!slo.ok()) return fail(slo.status());
    slos.push_back(*slo);
  }

  double total_seconds = std::chrono::duration<double>(options.duration + options.warmup).count();
  ProgressBar progress("loadtest", static_cast<std::int64_t>(std::ceil(total_seconds)), flags.progress && !global.json);
  options.on_progress = [&](double elapsed, std::uint64_t completed, double current_rate) {
    progress.update(static_cast<std::int64_t>(elapsed),
                    fmt::format("{} answered, {:.0f} req/s", completed, current_rate));
  };
  log_info(fmt::format("loadtest {} {} for {} (warm-up {})", flags.url,
                       options.rate > 0 ? fmt::format("at {} req/s ({})", options.rate, flags.arrival)
                                        : fmt::format("with {} outstanding", options.concurrency),
                       flags.duration, flags.warmup));
  auto report = optimize::run_load_test(options);
  progress.finish();
  if (!report.ok()) return fail(report.status());

  std::vector<std::pair<const optimize::LatencySlo*, double>> checked;
  bool all_met = true;
  for (const auto& slo : slos) {
    double value = optimize::latency_statistic(*report, slo.statistic);
    checked.emplace_back(&slo, value);
    all_met = all_met && value <= slo.limit_ms;
  }
  LoadTestResult result;
  result.url = flags.url;
  result.rate = options.rate;
  result.report = std::move(*report);
  result.checked = std::move(checked);
  result.slos_met = all_met;
  render(global, result);
  return all_met ? 0 : 1;
}

}  // namespace slipway::cli
