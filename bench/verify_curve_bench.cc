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
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "model/runtime/local_pipeline.h"

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

  std::printf("model %s, %d threads, depth %d\n%6s %12s %10s\n", o.model.c_str(), o.threads,
              o.depth, "rows", "ms/call", "vs m=1");
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
    std::printf("%6d %12.2f %10.2f\n", m, t * 1e3, t / base);
    results.push_back({{"rows", m}, {"ms_per_call", t * 1e3}, {"ratio_to_first", t / base}});
  }
  nlohmann::json j = {{"bench", "verify_curve"}, {"model", o.model},  {"threads", o.threads},
                      {"depth", o.depth},        {"repeats", o.repeats}, {"results", results}};
  std::ofstream(o.json) << j.dump(2) << "\n";
  std::printf("wrote %s\n", o.json.c_str());
  return 0;
}
