// slipway profile: where one model's serving time goes, per request size.
#include <fmt/format.h>

#include <ostream>

#include "cli/cli.h"
#include "slipway/optimize.h"

namespace slipway::cli {
namespace {

std::string format_us(double microseconds) {
  if (microseconds >= 10'000) return fmt::format("{:.1f} ms", microseconds / 1000);
  if (microseconds >= 100) return fmt::format("{:.0f} us", microseconds);
  return fmt::format("{:.2f} us", microseconds);
}

std::string format_rate(double rows_per_second) {
  if (rows_per_second >= 1e6) return fmt::format("{:.2f}M", rows_per_second / 1e6);
  if (rows_per_second >= 1e3) return fmt::format("{:.1f}k", rows_per_second / 1e3);
  return fmt::format("{:.0f}", rows_per_second);
}

const char* stage_label(const std::string& stage) {
  if (stage == "parse") return "parse request (JSON to columns)";
  if (stage == "preprocess") return "preprocess (bundle transform)";
  if (stage == "compute") return "model compute";
  if (stage == "postprocess") return "postprocess (link)";
  if (stage == "encode") return "encode response";
  return "transport (HTTP, hand-off, loopback)";
}

struct ProfileResult : CommandResult {
  optimize::ProfileReport report;

  void write_json(JsonWriter& json) const override { optimize::write_profile_report_json(json, report); }

  void write_text(std::ostream& out) const override {
    out << "profile " << report.model << " (" << report.family << "): bundle " << format_bytes(report.bundle_bytes)
        << ", loaded " << format_bytes(report.loaded_bytes) << "\n";
    out << "per request: the median of each stage in-process (one thread), and what the server adds around "
           "them (its p50 with one request outstanding, less the in-process total)\n\n";
    std::vector<std::string> headers = {"rows/request"};
    for (const auto& size : report.sizes) headers.push_back(std::to_string(size.rows_per_request));
    std::vector<std::vector<std::string>> rows;
    if (report.sizes.empty()) return;
    for (std::size_t stage = 0; stage < report.sizes.front().stages.size(); ++stage) {
      std::vector<std::string> row = {stage_label(report.sizes.front().stages[stage].name)};
      for (const auto& size : report.sizes) {
        const auto& time = size.stages[stage];
        row.push_back(fmt::format("{} ({:.0f}%)", format_us(time.median_us), 100 * time.share));
      }
      rows.push_back(std::move(row));
    }
    auto add = [&](const std::string& label, auto cell) {
      std::vector<std::string> row = {label};
      for (const auto& size : report.sizes) row.push_back(cell(size));
      rows.push_back(std::move(row));
    };
    add("in-process total", [](const auto& size) { return format_us(size.in_process_us); });
    add("server latency p50 / p99",
        [](const auto& size) { return format_us(size.server_p50_us) + " / " + format_us(size.server_p99_us); });
    add("rows/s in-process, 1 thread", [](const auto& size) { return format_rate(size.in_process_rows_per_second); });
    add(fmt::format("rows/s via server, {} conn.", report.sizes.front().connections),
        [](const auto& size) { return format_rate(size.server_rows_per_second); });
    add("request / response bytes",
        [](const auto& size) { return format_bytes(size.request_bytes) + " / " + format_bytes(size.response_bytes); });
    add("bottleneck", [](const auto& size) { return size.bottleneck; });
    print_table(out, headers, rows);
  }
};

Result<std::vector<std::size_t>> parse_sizes(const std::vector<std::string>& texts) {
  std::vector<std::size_t> sizes;
  for (const auto& text : texts) {
    auto items = config_detail::split_list(text);
    if (text.empty() || text.back() == ',') items.emplace_back();  // an empty size, refused below
    for (const auto& item : items) {
      char* end = nullptr;
      unsigned long long value = std::strtoull(item.c_str(), &end, 10);
      if (item.empty() || end != item.c_str() + item.size() || item.front() == '-' || value == 0 || value > 1'000'000) {
        return invalid_argument("--rows-per-request takes sizes from 1 to 1000000, e.g. 1,8,64 (got '" + item + "')");
      }
      sizes.push_back(static_cast<std::size_t>(value));
    }
  }
  return sizes;
}

Result<ProfileResult> profile(const GlobalOptions& global, const ProfileFlags& flags) {
  SLIPWAY_ASSIGN_OR_RETURN(auto sizes, parse_sizes(flags.rows_per_request));
  SLIPWAY_ASSIGN_OR_RETURN(auto server_time, parse_duration("--duration", flags.duration));
  if (server_time < std::chrono::milliseconds(100)) return invalid_argument("--duration must be at least 100ms");
  if (flags.threads < 1 || flags.threads > 256) return invalid_argument("--threads must be from 1 to 256");
  SLIPWAY_ASSIGN_OR_RETURN(auto loaded, load_reference(global, flags.reference));
  SLIPWAY_ASSIGN_OR_RETURN(auto table, pipeline::read_table(flags.data_path));
  optimize::ProfileOptions options;
  options.bundle = loaded.bundle;
  options.model = loaded.description;
  options.rows = &table;
  options.rows_per_request = sizes;
  options.threads = flags.threads;
  options.server_time = server_time;
  options.in_process_time = std::min(server_time, std::chrono::milliseconds(1000));
  ProgressBar bar("profile", 1, flags.progress);
  options.on_progress = [&bar](int step, int total, const std::string& what) {
    bar.set_total(total);
    bar.update(step, what);
  };
  ProfileResult result;
  SLIPWAY_ASSIGN_OR_RETURN(result.report, optimize::profile_model(options));
  bar.finish();
  return result;
}

}  // namespace

int run_profile(const GlobalOptions& global, const ProfileFlags& flags) {
  return render(global, profile(global, flags));
}

}  // namespace slipway::cli
