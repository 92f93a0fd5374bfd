// Endpoints: names whose requests are routed to pinned model versions by share
// (registry::Endpoint), read from the registry every refresh period.
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include "serve/service_state.h"

namespace slipway::serve {
namespace {

// Routing slices a key space of 10,000 points: a share is kept to a hundredth of a percent.
constexpr std::uint64_t kPoints = 10'000;

std::uint64_t mix(std::uint64_t value) {  // splitmix64's finalizer
  value ^= value >> 30;
  value *= 0xbf58476d1ce4e5b9ULL;
  value ^= value >> 27;
  value *= 0x94d049bb133111ebULL;
  return value ^ (value >> 31);
}

std::uint64_t point_of_key(std::string_view key) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a
  for (char c : key) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ULL;
  }
  return mix(hash) % kPoints;
}

std::uint64_t random_point() {
  thread_local std::uint64_t state =
      mix(static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
          std::hash<std::thread::id>{}(std::this_thread::get_id()));
  state += 0x9e3779b97f4a7c15ULL;
  return mix(state) % kPoints;
}

}  // namespace

const registry::EndpointRoute& pick_route(const registry::Endpoint& endpoint, std::string_view route_key) {
  std::uint64_t point = route_key.empty() ? random_point() : point_of_key(route_key);
  double covered = 0.0;
  for (const auto& route : endpoint.routes) {
    covered += route.percent;
    if (point < static_cast<std::uint64_t>(std::llround(covered * kPoints / 100.0))) return route;
  }
  return endpoint.routes.back();
}

bool sampled(double percent) {
  return static_cast<double>(random_point()) < percent * static_cast<double>(kPoints) / 100.0;
}

const registry::EndpointRoute& main_route(const registry::Endpoint& endpoint) {
  return registry::main_route(endpoint.routes);
}

std::shared_ptr<const registry::Endpoint> Service::State::endpoint_named(std::string_view name) {
  std::shared_ptr<const EndpointMap> snapshot;
  {
    std::lock_guard lock(endpoints_mutex);
    auto now = std::chrono::steady_clock::now();
    if (endpoints == nullptr || now - endpoints_fetched >= options.registry_refresh) {
      auto listed = registry.endpoints().list();
      if (listed.ok()) {
        auto fresh = std::make_shared<EndpointMap>();
        for (auto& endpoint : *listed) {
          if (!endpoint.routes.empty()) fresh->emplace(endpoint.name, std::move(endpoint));
        }
        endpoints = std::move(fresh);
      } else {
        // Keep routing as before (or route nothing, at start) and try again next period.
        log_warn("cannot read the endpoints: " + listed.status().message());
        if (endpoints == nullptr) endpoints = std::make_shared<EndpointMap>();
      }
      endpoints_fetched = now;
    }
    snapshot = endpoints;
  }
  auto found = snapshot->find(name);
  if (found == snapshot->end()) return nullptr;
  return {snapshot, &found->second};
}

}  // namespace slipway::serve
