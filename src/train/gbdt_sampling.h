// Row and feature sampling for GBDT training: a stateless hash of (seed, round, index), so a
// sample is the same at any thread count and after a resume. Private to train.
#pragma once

#include <cstdint>

namespace slipway::train {

// SplitMix64's finalizer over the seed, the round and the index.
inline std::uint64_t sample_hash(std::uint64_t seed, std::uint64_t round, std::uint64_t index) {
  std::uint64_t z = seed ^ (round * 0x9e3779b97f4a7c15ULL) ^ (index * 0xbf58476d1ce4e5b9ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// True for about `share` of the indexes (always when share >= 1).
inline bool sampled(double share, std::uint64_t seed, std::uint64_t round, std::uint64_t index) {
  if (share >= 1.0) return true;
  return static_cast<double>(sample_hash(seed, round, index) >> 11) * 0x1.0p-53 < share;
}

}  // namespace slipway::train
