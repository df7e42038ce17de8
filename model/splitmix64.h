// splitmix64: a tiny generator whose output is the same on every platform
// (the standard library's distributions are not). Seeds the sampler's RNG
// and the random-model writer, so a seed names the same stream everywhere.
#pragma once

#include <cstdint>

namespace specline {

inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace specline
