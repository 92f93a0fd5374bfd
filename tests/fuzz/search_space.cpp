// libFuzzer target: any bytes as a search-space YAML file. The parser must return a space that
// passes its own checks and reads back the same from the YAML it writes, or an error; and a
// sampler and the grid must keep every trial inside the space. Never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "slipway/tune.h"

// NOLINTNEXTLINE(readability-identifier-naming): libFuzzer's entry point, a fixed name
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(bytes), size);
  auto space = slipway::tune::parse_search_space(text, "fuzz.yaml", "");
  if (!space.ok()) return 0;
  if (!slipway::tune::check_search_space(*space).ok()) std::abort();
  auto written = slipway::tune::search_space_yaml(*space);
  auto again = slipway::tune::parse_search_space(written, "again.yaml", space->family);
  if (!again.ok() || slipway::tune::search_space_yaml(*again) != written) std::abort();
  auto grid = slipway::tune::grid_points(*space, 3, 1000);
  if (grid.ok() && grid->empty()) std::abort();
  slipway::tune::QmcOptions qmc;
  qmc.seed = size;
  auto sampler = size % 2 ? slipway::tune::make_random_sampler(size) : slipway::tune::make_qmc_sampler(qmc);
  for (int i = 0; i < 4; ++i) {
    auto values = sampler->sample(*space, {}, slipway::tune::Direction::kMinimize);
    if (grid.ok() && i < static_cast<int>(grid->size())) values = (*grid)[static_cast<std::size_t>(i)];
    for (const auto& param : space->params) {
      auto found = values.find(param.name);
      if (found == values.end() || param.kind == slipway::tune::ParamKind::kCategorical) continue;
      auto number = slipway::parse_finite_number(found->second);
      if (!number || *number < param.low || *number > param.high) std::abort();
    }
  }
  return 0;
}
