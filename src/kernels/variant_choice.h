// Picking a kernel variant at run time: private to kernels, shared by the dense and LLM kernels.
#pragma once

#include <cstdlib>
#include <span>
#include <string_view>

namespace slipway::kernels {

// The variant `environment_variable` names when this CPU runs it; else the last (fastest) one it
// runs; else the first (the scalar reference). Variants have `name` and `supported()`.
template <class Variant>
const Variant& choose_variant(std::span<const Variant> variants, const char* environment_variable) {
  const char* requested = std::getenv(environment_variable);
  std::string_view name = requested == nullptr ? "" : requested;
  for (const auto& variant : variants) {
    if (variant.name == name && variant.supported()) return variant;
  }
  for (auto variant = variants.rbegin(); variant != variants.rend(); ++variant) {
    if (variant->supported()) return *variant;
  }
  return variants.front();
}

}  // namespace slipway::kernels
