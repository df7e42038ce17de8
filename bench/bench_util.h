// Shared by the benchmarks: timing, medians and the machine's memory
// bandwidth, so every figure can be reported next to what the hardware does.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace specline::bench {

inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

// Median after dropping the first `warmup` samples (graph capture, cuBLAS
// heuristics, first-touch allocations), when there are more than that.
inline double MedianAfterWarmup(std::vector<double> v, size_t warmup) {
  if (v.size() > warmup) v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(warmup));
  return Median(std::move(v));
}

// Command lines of "--flag value" and "--switch" arguments: calls
// on(arg, next) for each, where next() takes the flag's value (throwing when
// it is missing); on returns false for an unknown argument, and so does this.
template <typename On>
bool ParseArgs(int argc, char** argv, On on) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (!on(a, next)) return false;
  }
  return true;
}

// "0,0.5,1" -> {0, 0.5, 1} (command-line lists).
inline std::vector<double> ParseDoubles(const std::string& s) {
  std::vector<double> v;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');) v.push_back(std::stod(t));
  return v;
}

// memcpy bandwidth in GB/s over a buffer much larger than the caches,
// counting bytes read plus bytes written (the STREAM "copy" convention).
inline double CopyBandwidthGBs(size_t bytes = size_t{512} << 20, int repeats = 5) {
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    const double t0 = Now();
    std::memcpy(dst.data(), src.data(), bytes);
    t.push_back(Now() - t0);
    src[r] = dst[bytes - 1 - r];  // keep the copy observable
  }
  return 2.0 * bytes / Median(t) / 1e9;
}

}  // namespace specline::bench
