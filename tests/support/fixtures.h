// A workspace with a trained, registered lending-club model, shared by serving tests.
#pragma once

#include <memory>
#include <string>

#include "slipway/data.h"
#include "slipway/registry.h"
#include "slipway/train.h"
#include "support/test_support.h"

namespace slipway::testing {

// Trains logistic regression on the first 2,000 lending-club rows and registers it as `name`
// (twice, so versions 1 and 2 exist). Returns the registry.
inline std::unique_ptr<registry::Registry> registry_with_lending_model(const TempDir& dir, const std::string& name) {
  auto store = std::move(registry::Registry::open(dir.path(), true)).value();
  auto table = *data::read_csv(data_path("lending_club.csv"));
  std::vector<std::uint32_t> rows(2000);
  for (std::uint32_t row = 0; row < rows.size(); ++row) rows[row] = row;
  auto summary = train::fit(table.take_rows(rows), train::TrainRequest{.target = "Class"});
  auto sha = store->artifacts().put(summary->bundle->serialize());
  (void)store->models().register_version(name, *sha, "");
  (void)store->models().register_version(name, *sha, "");
  return store;
}

}  // namespace slipway::testing
