// Shared by the benchmarks: timing, medians and the machine's memory
// bandwidth, so every figure can be reported next to what the hardware does.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
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

// Read-only bandwidth in GB/s: `threads` threads each sum their share of a
// buffer much larger than the caches with AVX2 loads (a streaming sum, the
// access pattern of a decode step, which only reads weights). This, not
// memcpy's read-plus-write rate, is the ceiling for decode.
inline double ReadBandwidthGBs(int threads, size_t bytes = size_t{512} << 20, int repeats = 5) {
  const size_t n = bytes / sizeof(float);
  std::vector<float> buf(n, 1.0f);
  std::vector<double> t;
  std::vector<float> sums(threads);
  for (int r = 0; r < repeats; ++r) {
    const double t0 = Now();
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) {
      pool.emplace_back([&, i] {
        const size_t begin = n / threads * i, end = i + 1 == threads ? n : n / threads * (i + 1);
        // 4 independent accumulators of 8 lanes, so the adds never wait.
        float acc[32] = {};
        size_t k = begin;
        for (; k + 32 <= end; k += 32) {
          for (int l = 0; l < 32; ++l) acc[l] += buf[k + l];
        }
        for (; k < end; ++k) acc[0] += buf[k];
        float s = 0;
        for (float a : acc) s += a;
        sums[i] = s;
      });
    }
    for (auto& th : pool) th.join();
    t.push_back(Now() - t0);
  }
  volatile float keep = sums[0];  // keep the sums observable
  (void)keep;
  return static_cast<double>(bytes) / Median(t) / 1e9;
}

}  // namespace specline::bench
