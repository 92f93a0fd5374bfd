// libFuzzer target: any bytes as the body, or the query, of the management API's routes (the JSON
// each one parses into an operation's request, the query parameters and paging tokens), called
// with the admin role against a workspace holding a model, an endpoint and a running run. The
// first byte picks the route; the rest is the body (a query for GET routes).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "slipway/control.h"
#include "slipway/pipeline.h"
#include "slipway/train.h"

namespace {

struct Workspace {
  std::string home;
  std::string run_id;
};

const Workspace& workspace() {
  static const Workspace kMade = [] {
    Workspace result;
    result.home = (std::filesystem::temp_directory_path() / ("slipway-fuzz-" + slipway::random_hex(6))).string();
    auto store = std::move(slipway::registry::Registry::open(result.home, true)).value();
    auto table = slipway::data::parse_csv("x,color,y\n1,red,a\n2,blue,b\n3,red,b\nNA,green,a\n", "seed.csv");
    auto summary = slipway::train::fit(*table, slipway::train::TrainRequest{.target = "y"});
    auto sha = store->artifacts().put(summary->bundle->serialize());
    (void)store->models().register_version("m", *sha, "");
    (void)store->models().register_version("m", *sha, "");
    (void)store->endpoints().deploy("e", "m", 1);
    auto run = slipway::pipeline::start_tracked_run(*store, {}, {});
    result.run_id = run.ok() ? run->run.run_id : "0";
    return result;
  }();
  return kMade;
}

struct Target {
  std::string_view method;
  std::vector<std::string_view> segments;
};

}  // namespace

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point, a fixed name
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  static const slipway::serve::ManagementHandler kHandler = slipway::control::management_api({workspace().home, ""});
  static const std::vector<Target> kTargets = {
      {"POST", {"api", "endpoints", "e", "deploy"}},
      {"POST", {"api", "endpoints", "e", "settings"}},
      {"POST", {"api", "runs"}},
      {"POST", {"api", "runs", workspace().run_id, "log"}},
      {"POST", {"api", "models", "m", "labels"}},
      {"POST", {"api", "tokens"}},
      {"PUT", {"api", "models", "m", "retrain-policy"}},
      {"POST", {"api", "models", "m", "annotations"}},
      {"POST", {"api", "models", "m", "versions", "2", "approval"}},
      {"PUT", {"api", "models", "m", "aliases", "staging"}},
      {"GET", {"api", "audit"}},
      {"GET", {"api", "runs"}},
      {"GET", {"api", "models"}},
      {"GET", {"api", "lineage"}},
      {"POST", {"api", "runs", workspace().run_id, "artifacts"}},
      {"POST", {"api", "models", "m", "versions"}},
      {"PATCH", {"api", "models", "m", "serving-config"}},
      {"POST", {"api", "models", "m", "versions", "2", "gate"}},
      {"GET", {"api", "monitoring", "e"}},
      {"POST", {"api", "monitoring", "e", "alerts"}},
      {"GET", {"api", "batch-jobs"}},
      {"POST", {"api", "batch-jobs"}},
      {"POST", {"api", "training-jobs"}},
      {"GET", {"api", "workspace", "garbage"}},
      {"POST", {"api", "models", "m", "optimizations"}},
      {"POST", {"api", "models", "m", "versions", "1", "profile"}},
      {"POST", {"api", "models", "m", "retrainings"}},
      {"GET", {"api", "models", "m", "versions", "1", "explanation"}},
      {"GET", {"api", "models", "m", "versions", "1", "export"}},
  };
  if (size == 0) return 0;
  const Target& target = kTargets[bytes[0] % kTargets.size()];
  std::string_view input(reinterpret_cast<const char*>(bytes) + 1, size - 1);
  slipway::serve::ManagementCall call;
  call.method = target.method;
  call.segments = target.segments;
  bool uploads = target.segments.back() == "artifacts" || target.segments.back() == "versions";
  if (target.method == "GET") {
    call.query = input;
  } else if (uploads) {
    // The query first (up to a newline), then the uploaded bytes.
    auto newline = input.find('\n');
    call.query = input.substr(0, newline);
    call.body = newline == std::string_view::npos ? std::string_view() : input.substr(newline + 1);
  } else {
    call.body = input;
  }
  (void)kHandler(call);
  return 0;
}
