// The serving stack without HTTP: Service::handle() on KServe v2 JSON bodies built from CSV rows,
// closed loop from T threads, as `slipway loadtest --csv` would send them. Comparing it with the
// same model over loopback HTTP (bench/serve_bench.sh) shows what the transport costs.
//
// Usage: slipway_inprocess_serve WORKSPACE MODEL CSV SKIP_COLUMN ROWS_PER_REQUEST THREADS SECONDS
// Prints one JSON object: requests per second and latency percentiles in ms.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "slipway/data.h"
#include "slipway/serve.h"

using namespace slipway;

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: %s WORKSPACE MODEL CSV SKIP_COLUMN ROWS_PER_REQUEST THREADS SECONDS\n", argv[0]);
    return 2;
  }
  set_log_level(LogLevel::kWarn);
  auto store = registry::Registry::open(argv[1], false);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", store.status().message().c_str());
    return 1;
  }
  std::string target = std::string("/v2/models/") + argv[2] + "/infer";
  auto table = data::read_csv(argv[3]);
  if (!table.ok()) {
    std::fprintf(stderr, "%s\n", table.status().message().c_str());
    return 1;
  }
  auto bodies = serve::v2_requests_from_table(*table, std::stoul(argv[5]), {argv[4]}, 2000);
  int threads = std::stoi(argv[6]);
  double seconds = std::stod(argv[7]);
  serve::Service service(**store, {});
  if (service.handle("POST", target, bodies[0]).status != 200) {
    std::fprintf(stderr, "the first request failed: %s\n", service.handle("POST", target, bodies[0]).body.c_str());
    return 1;
  }
  std::atomic<bool> stop{false};
  std::vector<std::vector<double>> latencies(static_cast<std::size_t>(threads));
  std::vector<std::thread> workers;
  workers.reserve(static_cast<std::size_t>(threads));
  auto started = std::chrono::steady_clock::now();
  for (int index = 0; index < threads; ++index) {
    workers.emplace_back([&, index] {
      std::size_t next = static_cast<std::size_t>(index);
      auto& mine = latencies[static_cast<std::size_t>(index)];
      while (!stop.load(std::memory_order_relaxed)) {
        auto before = std::chrono::steady_clock::now();
        auto response = service.handle("POST", target, bodies[next++ % bodies.size()]);
        if (response.status != 200) std::abort();
        mine.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - before).count());
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& worker : workers) worker.join();
  double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::vector<double> all;
  for (const auto& mine : latencies) all.insert(all.end(), mine.begin(), mine.end());
  std::sort(all.begin(), all.end());
  auto percentile = [&](double p) { return all[std::min(all.size() - 1, static_cast<std::size_t>(p * all.size()))]; };
  std::printf("{\"requests\":%zu,\"rate\":%.1f,\"p50_ms\":%.4f,\"p99_ms\":%.4f}\n", all.size(),
              static_cast<double>(all.size()) / elapsed, percentile(0.5), percentile(0.99));
  return 0;
}
