// The verification curve: the cost of one decode call that carries m rows
// of one sequence (m = 1, 2, 4, 8, 16: drafts to verify, PTP's auxiliary
// rows) against the plain m = 1 step, on a real model. Every speculative
// method pays this: a call of m rows must read the weights once, so its time
// should stay near the m = 1 time while decode is bandwidth-bound.
//
//   build/bench/verify_curve_bench --model PATH [--threads 2] [--rows 1,2,4,8,16]
//        [--depth 64] [--repeats 15] [--json out.json]
//
// Each call runs the whole layer stack and the LM head on its m rows at
// positions depth .. depth + m - 1, after a prompt of `depth` tokens, then
// truncates the sequence back (as a rejected draft would). Reports the
// median time per call and its ratio to m = 1. The same shape on llama.cpp
// is `llama-bench -p 1,2,4,8,16 -n 0 -d 64` (bench/peer_decode.sh).
//
// Beside it, the compute floor: the machine's rate of int8 weight x
// activation products with the best AVX2 sequence the quantized kernels can
// use (maddubs, madd, convert, fma with the block scale per 32 products),
// measured here on data in registers with the same threads. A call of m rows
// does m * (the model's matrix multiply-adds) of them, so it cannot take
// less than that divided by the rate: the floor column is that time over the
// measured m = 1 call. No kernel reaches the floor (it ignores loads,
// unpacking and attention); it says how far the curve could fall.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "kernels/cpu/thread_pool.h"
#include "model/runtime/local_pipeline.h"

#ifdef __AVX2__
#include <immintrin.h>
#endif

namespace specline {
namespace {

struct Options {
  std::string model;
  int threads = 2;
  std::vector<int> rows = {1, 2, 4, 8, 16};
  int depth = 64;
  int repeats = 15;
  std::string json = "bench_verify_curve.json";
};

// Products per second of the int8 dot-product step on `threads` threads;
// 0 without AVX2.
double Int8ProductsPerSecond(int threads) {
#ifdef __AVX2__
  constexpr long kIters = 20000000;
  constexpr int kChains = 8;  // independent accumulators hide the latency
  kernels::ThreadPool pool(threads);
  std::vector<float> sink(threads);
  const double t0 = bench::Now();
  pool.ParallelFor(threads, [&](int64_t lo, int64_t hi) {
    for (int64_t t = lo; t < hi; ++t) {
      __m256i w = _mm256_set1_epi8(3);
      __m256i a[kChains];
      __m256 acc[kChains];
      for (int i = 0; i < kChains; ++i) {
        a[i] = _mm256_set1_epi8(static_cast<char>(i + 1));
        acc[i] = _mm256_setzero_ps();
      }
      const __m256i ones = _mm256_set1_epi16(1);
      const __m256 scale = _mm256_set1_ps(1e-9f);
      for (long it = 0; it < kIters; ++it) {
        for (int i = 0; i < kChains; ++i) {
          const __m256i pairs = _mm256_maddubs_epi16(w, a[i]);
          const __m256i sums = _mm256_madd_epi16(pairs, ones);
          acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), scale, acc[i]);
        }
        __asm__ volatile("" : "+x"(w));  // keeps the loop from being folded
      }
      float total = 0;
      for (int i = 0; i < kChains; ++i) total += _mm256_cvtss_f32(acc[i]);
      sink[t] = total;
    }
  }, /*grain=*/1);
  const double seconds = bench::Now() - t0;
  if (sink[0] < 0) std::printf("(unreachable)\n");
  return double{kIters} * kChains * 32 * threads / seconds;
#else
  (void)threads;
  return 0;
#endif
}

// Multiply-adds of the model's matrices for one row (attention over the
// cache is left out: at the bench's depth it is a few percent).
double MatrixProductsPerRow(const ModelConfig& c) {
  const double q = static_cast<double>(c.n_heads) * c.head_dim,
               kv = static_cast<double>(c.n_kv_heads) * c.head_dim;
  const double per_layer = c.dim * (q + 2 * kv) + q * c.dim + 3.0 * c.dim * c.hidden_dim;
  return c.n_layers * per_layer + static_cast<double>(c.vocab_size) * c.dim;
}

std::vector<int> ParseInts(const std::string& s) {
  std::vector<int> v;
  for (double d : bench::ParseDoubles(s)) v.push_back(static_cast<int>(d));
  return v;
}

}  // namespace
}  // namespace specline

int main(int argc, char** argv) {
  using namespace specline;
  Options o;
  const bool ok = bench::ParseArgs(argc, argv, [&](const std::string& a, auto next) {
    if (a == "--model") o.model = next();
    else if (a == "--threads") o.threads = std::stoi(next());
    else if (a == "--rows") o.rows = ParseInts(next());
    else if (a == "--depth") o.depth = std::stoi(next());
    else if (a == "--repeats") o.repeats = std::stoi(next());
    else if (a == "--json") o.json = next();
    else return false;
    return true;
  });
  if (!ok || o.model.empty()) {
    std::cerr << "usage: verify_curve_bench --model PATH [--threads N] [--rows 1,2,4,8,16] "
                 "[--depth N] [--repeats N] [--json PATH]\n";
    return 2;
  }
  auto model = OpenModel(o.model);
  const ModelConfig& c = model->config();
  int max_rows = 1;
  for (int m : o.rows) max_rows = std::max(max_rows, m);
  LocalPipeline p(*model, {0, c.n_layers}, {.kv_capacity_tokens = o.depth + max_rows + 16},
                  o.threads);
  const uint64_t seq = 1;
  std::vector<int32_t> prompt(o.depth);
  std::vector<SlotRef> slots;
  for (int i = 0; i < o.depth; ++i) {
    prompt[i] = (i * 101 + 7) % c.vocab_size;
    slots.push_back({seq, i});
  }
  SliceOutput out;
  if (!p.Forward(slots, prompt, {}, &out).ok()) return 1;

  const double peak = Int8ProductsPerSecond(o.threads);
  const double products = MatrixProductsPerRow(c);
  std::printf("model %s, %d threads, depth %d; int8 product peak %.1f G/s, %.1f M products/row\n"
              "%6s %12s %10s %14s\n",
              o.model.c_str(), o.threads, o.depth, peak / 1e9, products / 1e6, "rows", "ms/call",
              "vs m=1", "floor vs m=1");
  nlohmann::json results = nlohmann::json::array();
  double base = 0;
  for (int m : o.rows) {
    std::vector<int32_t> tokens(m);
    std::vector<SlotRef> rows;
    for (int i = 0; i < m; ++i) {
      tokens[i] = (i * 37 + 11) % c.vocab_size;
      rows.push_back({seq, o.depth + i});
    }
    std::vector<double> times;
    for (int r = 0; r < o.repeats + 2; ++r) {
      const double t0 = bench::Now();
      if (!p.Forward(rows, tokens, {}, &out).ok()) return 1;
      const std::vector<float> logits = p.head().Logits(out.hidden.data(), m);
      times.push_back(bench::Now() - t0);
      p.Truncate(seq, o.depth);  // the drafts were rejected
      if (logits.empty()) return 1;
    }
    const double t = bench::MedianAfterWarmup(times, 2);
    if (m == o.rows.front()) base = t;
    // The floor can be below the m = 1 call (then the call is bound by
    // reading the weights, not by arithmetic).
    const double floor = peak > 0 ? std::max(1.0, m * products / peak / base) : 0;
    std::printf("%6d %12.2f %10.2f %14.2f\n", m, t * 1e3, t / base, floor);
    results.push_back({{"rows", m},
                       {"ms_per_call", t * 1e3},
                       {"ratio_to_first", t / base},
                       {"compute_floor_ratio", floor}});
  }
  nlohmann::json j = {{"bench", "verify_curve"},
                      {"model", o.model},
                      {"threads", o.threads},
                      {"depth", o.depth},
                      {"repeats", o.repeats},
                      {"int8_products_per_s", peak},
                      {"products_per_row", products},
                      {"results", results}};
  std::ofstream(o.json) << j.dump(2) << "\n";
  std::printf("wrote %s\n", o.json.c_str());
  return 0;
}
