// The list of model families. Adding a family: its file src/model/<name>_family.cpp, and one
// declaration and one entry here.
#include "model/model_family.h"

namespace slipway::model {

const ModelFamily& linear_family();         // linear_family.cpp
const ModelFamily& tree_ensemble_family();  // tree_ensemble_family.cpp
const ModelFamily& mlp_family();            // mlp_family.cpp

std::span<const ModelFamily* const> model_families() {
  static const std::vector<const ModelFamily*> kFamilies = {
      &linear_family(),
      &tree_ensemble_family(),
      &mlp_family(),
  };
  return kFamilies;
}

const ModelFamily* find_model_family(std::string_view name) {
  for (const ModelFamily* family : model_families()) {
    if (family->name == name) return family;
  }
  return nullptr;
}

}  // namespace slipway::model
