// Lending-club rows, and a workspace with a trained, registered lending-club model.
#pragma once

#include <memory>
#include <string>

#include "slipway/data.h"
#include "slipway/registry.h"
#include "slipway/train.h"
#include "support/test_support.h"

namespace slipway::testing {

// Rows [first, first + count) of data/lending_club.csv, read once per process.
inline data::Table lending_rows(std::uint32_t first, std::uint32_t count) {
  static const data::Table kAll = *data::read_csv(data_path("lending_club.csv"));
  std::vector<std::uint32_t> rows(count);
  for (std::uint32_t index = 0; index < count; ++index) rows[index] = first + index;
  return kAll.take_rows(rows);
}

// Trains logistic regression on the first 2,000 lending-club rows and registers it as `name`
// (twice, so versions 1 and 2 exist). Returns the registry.
inline std::unique_ptr<registry::Registry> registry_with_lending_model(const TempDir& dir, const std::string& name) {
  auto store = std::move(registry::Registry::open(dir.path(), true)).value();
  auto summary = train::fit(lending_rows(0, 2000), train::TrainRequest{.target = "Class"});
  auto sha = store->artifacts().put(summary->bundle->serialize());
  (void)store->models().register_version(name, *sha, "");
  (void)store->models().register_version(name, *sha, "");
  return store;
}

}  // namespace slipway::testing
