// slipway profile: where one model's serving time goes, stage by stage and through the server.
#include <fmt/format.h>
#include <algorithm>

#include "optimize/loopback.h"
#include "slipway/optimize.h"
#include "slipway/serve.h"

namespace slipway::optimize {
namespace {

constexpr int kWarmupRequests = 5;
constexpr std::uint64_t kMinimumTimedRequests = 20;
constexpr std::size_t kMaxBodies = 64;

double median_of(std::vector<double> values) {
  if (values.empty()) return 0.0;
  auto middle = values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2);
  std::nth_element(values.begin(), middle, values.end());
  return *middle;
}

struct InProcessTimes {
  std::vector<double> stages[5];  // microseconds per request, by stage
  std::vector<double> totals;
  std::vector<double> response_bytes;
};

Result<InProcessTimes> time_in_process(const std::shared_ptr<const model::Bundle>& bundle,
                                       const std::vector<std::string>& bodies, std::chrono::milliseconds budget) {
  InProcessTimes times;
  auto deadline = std::chrono::steady_clock::now() + budget;
  for (std::uint64_t index = 0;; ++index) {
    const std::string& body = bodies[index % bodies.size()];
    SLIPWAY_ASSIGN_OR_RETURN(serve::InferStageTimes stage_times, serve::time_v2_infer(bundle, body));
    if (index < kWarmupRequests) continue;
    double values[5] = {stage_times.parse, stage_times.preprocess, stage_times.compute, stage_times.postprocess,
                        stage_times.encode};
    for (int stage = 0; stage < 5; ++stage) times.stages[stage].push_back(values[stage] * 1e6);
    times.totals.push_back(stage_times.total() * 1e6);
    times.response_bytes.push_back(static_cast<double>(stage_times.response_bytes));
    if (times.totals.size() >= kMinimumTimedRequests && std::chrono::steady_clock::now() >= deadline) break;
  }
  return times;
}

}  // namespace

Result<ProfileReport> profile_model(const ProfileOptions& options) {
  if (options.bundle == nullptr || options.rows == nullptr) return invalid_argument("profile needs a model and rows");
  if (options.rows_per_request.empty()) return invalid_argument("give at least one request size");
  const data::Table& table = *options.rows;
  for (std::size_t size : options.rows_per_request) {
    if (size == 0) return invalid_argument("a request needs at least 1 row");
    if (size > table.row_count()) {
      return invalid_argument(fmt::format("a request of {} rows needs at least as many rows of data; the file has {}",
                                          size, table.row_count()));
    }
  }
  if (options.threads < 1) return invalid_argument("threads must be >= 1");
  const model::Bundle& bundle = *options.bundle;
  std::vector<std::string> skip = {bundle.manifest().target};

  ProfileReport report;
  report.model = options.model;
  report.family = std::string(bundle.model().family());
  report.bundle_bytes = bundle.serialize().size();
  report.loaded_bytes = bundle.memory_bytes();
  report.threads = options.threads;

  const int total_steps = 1 + 3 * static_cast<int>(options.rows_per_request.size());
  int step = 0;
  auto progress = [&](const std::string& what) {
    if (options.on_progress) options.on_progress(step, total_steps, what);
    ++step;
  };
  progress("starting a server on loopback");
  SLIPWAY_ASSIGN_OR_RETURN(auto scratch, ScratchWorkspace::create());
  SLIPWAY_RETURN_IF_ERROR(scratch->add("profile", bundle));
  SLIPWAY_ASSIGN_OR_RETURN(auto server, LoopbackServer::start(scratch->registry(), options.threads));
  std::string infer_url = server->url("/v2/models/profile/infer");

  for (std::size_t rows_per_request : options.rows_per_request) {
    RequestSizeProfile size;
    size.rows_per_request = rows_per_request;
    std::vector<std::string> bodies = serve::v2_requests_from_table(table, rows_per_request, skip, kMaxBodies);
    std::vector<double> body_sizes;
    body_sizes.reserve(bodies.size());
    for (const auto& body : bodies) body_sizes.push_back(static_cast<double>(body.size()));
    size.request_bytes = static_cast<std::size_t>(median_of(body_sizes));

    progress(fmt::format("{} row(s)/request: in-process stages", rows_per_request));
    SLIPWAY_ASSIGN_OR_RETURN(InProcessTimes times, time_in_process(options.bundle, bodies, options.in_process_time));
    size.requests_timed = times.totals.size();
    size.response_bytes = static_cast<std::size_t>(median_of(times.response_bytes));
    static constexpr const char* kStageNames[5] = {"parse", "preprocess", "compute", "postprocess", "encode"};
    for (int stage = 0; stage < 5; ++stage) {
      double median = median_of(times.stages[stage]);
      size.stages.push_back({kStageNames[stage], median, 0.0});
      size.in_process_us += median;
    }
    size.in_process_rows_per_second =
        size.in_process_us > 0 ? static_cast<double>(rows_per_request) * 1e6 / size.in_process_us : 0.0;

    progress(fmt::format("{} row(s)/request: latency through the server", rows_per_request));
    LoadTestOptions latency;
    latency.url = infer_url;
    latency.bodies = bodies;
    latency.concurrency = 1;
    latency.duration = options.server_time;
    latency.warmup = std::chrono::milliseconds(200);
    SLIPWAY_ASSIGN_OR_RETURN(LoadTestReport one_at_a_time, run_load_test(latency));
    if (one_at_a_time.succeeded == 0 || one_at_a_time.succeeded != one_at_a_time.sent) {
      return internal_error(fmt::format("the loopback server answered {} of {} profile requests with success",
                                        one_at_a_time.succeeded, one_at_a_time.sent));
    }
    size.server_p50_us = one_at_a_time.p50_ms * 1e3;
    size.server_p99_us = one_at_a_time.p99_ms * 1e3;
    size.stages.push_back({"transport", std::max(0.0, size.server_p50_us - size.in_process_us), 0.0});

    progress(fmt::format("{} row(s)/request: throughput through the server", rows_per_request));
    LoadTestOptions throughput = latency;
    size.connections = 2 * options.threads;
    throughput.concurrency = size.connections;
    SLIPWAY_ASSIGN_OR_RETURN(LoadTestReport saturated, run_load_test(throughput));
    size.server_rows_per_second = saturated.achieved_rate * static_cast<double>(rows_per_request);

    double whole = std::max(size.server_p50_us, size.in_process_us);
    const StageTime* largest = nullptr;
    for (auto& stage : size.stages) {
      stage.share = whole > 0 ? stage.median_us / whole : 0.0;
      if (largest == nullptr || stage.median_us > largest->median_us) largest = &stage;
    }
    size.bottleneck = largest->name;
    report.sizes.push_back(std::move(size));
  }
  return report;
}

}  // namespace slipway::optimize
