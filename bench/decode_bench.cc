// Single-process decode and prefill speed of the CPU runtime.
//
// Decode is memory-bound: every token streams all weights once, so the
// figure of merit is achieved bandwidth (weight bytes per token / time per
// token) next to the machine's measured copy bandwidth. Prefill is
// compute-bound and is reported in GFLOP/s.
//
//   build/bench/decode_bench [--model PATH] [--threads 1,2] [--tokens 32]
//                            [--prefill 256] [--repeats 3] [--json out.json]
//                            [--depth 0,1024,4096] [--chunk N]
// --depth D[,D...]: instead of the default run, for each D prefill a prompt
// of D tokens (1 token for D = 0) in chunks of --chunk positions (default:
// the whole prompt in one forward call, as the default run's prefill), then
// decode --tokens tokens after it; reports the prompt's prefill tok/s and the
// median decode tok/s (per-token intervals) at that depth, median over
// --repeats runs.
// Without --model it writes a random fp32 model of stories110M's shape
// (dim 768, 12 layers, 12 heads, vocab 32000) to a temporary file.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "model/formats/random_model.h"
#include "model/runtime/generator.h"

namespace specline {
namespace {

struct Options {
  std::string model;
  std::vector<int> threads = {1, 2};
  int tokens = 32;
  int prefill = 256;
  int repeats = 3;
  std::string json = "bench_decode.json";
  std::vector<int> depths;  // empty: the default run
  int chunk = 0;            // 0: the whole prompt in one call
};

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") o.model = v;
    else if (k == "--tokens") o.tokens = std::stoi(v);
    else if (k == "--prefill") o.prefill = std::stoi(v);
    else if (k == "--repeats") o.repeats = std::stoi(v);
    else if (k == "--json") o.json = v;
    else if (k == "--chunk") o.chunk = std::stoi(v);
    else if (k == "--depth") {
      std::stringstream ss(v);
      for (std::string t; std::getline(ss, t, ',');) o.depths.push_back(std::stoi(t));
    }
    else if (k == "--threads") {
      o.threads.clear();
      std::stringstream ss(v);
      for (std::string t; std::getline(ss, t, ',');) o.threads.push_back(std::stoi(t));
    } else {
      throw std::invalid_argument("unknown option " + k);
    }
  }
  return o;
}

// Bytes of weights one decode step reads: every layer matrix, the norms and
// the LM head (the embedding contributes one row, ignored).
int64_t WeightBytesPerToken(const ModelSource& m) {
  int64_t bytes = 0;
  for (const TensorInfo* t : m.Tensors()) {
    if (t->name == "model.embed_tokens.weight" && !m.config().tied_embeddings) continue;
    bytes += t->nbytes;
  }
  return bytes;
}

// Multiply-adds x2 of one prefill of n tokens: matrices plus attention.
double PrefillFlops(const ModelSource& m, int n) {
  const ModelConfig& c = m.config();
  double matrix_params = 0;
  for (const TensorInfo* t : m.Tensors()) {
    if (t->shape.size() == 2 && t->name != "model.embed_tokens.weight") matrix_params += t->numel();
  }
  if (c.tied_embeddings) matrix_params += double(c.vocab_size) * c.dim;
  const double attn = 2.0 * c.n_layers * c.n_heads * c.head_dim * double(n) * (n + 1);  // QK^T and PV
  // LM head runs on the last position only.
  return 2.0 * (matrix_params - double(c.vocab_size) * c.dim) * n + 2.0 * c.vocab_size * c.dim + attn;
}

}  // namespace
}  // namespace specline

int main(int argc, char** argv) {
  using namespace specline;
  Options o = Parse(argc, argv);
  std::string path = o.model;
  if (path.empty()) {
    path = (std::filesystem::temp_directory_path() / "specline-bench-stories110m.gguf").string();
    if (!std::filesystem::exists(path)) {
      ModelConfig c = Stories110MShape();
      c.rope_style = RopeStyle::kInterleaved;
      std::cerr << "writing random stories110M-shaped model to " << path << "\n";
      WriteRandomModel(c, ModelFormat::kGguf, path, 1, DType::kF32);
    }
  }
  auto model = OpenModel(path);
  const ModelConfig& c = model->config();
  const double weight_gb = WeightBytesPerToken(*model) / 1e9;
  const double copy_gbs = bench::CopyBandwidthGBs();
  std::printf("model %s: %.1f MB of weights per token; copy bandwidth %.1f GB/s\n", path.c_str(),
              weight_gb * 1e3, copy_gbs);
  nlohmann::json results = nlohmann::json::array();
  if (!o.depths.empty()) {
    std::printf("%8s %8s %16s %14s %12s\n", "threads", "depth", "prefill tok/s", "decode tok/s",
                "ms/token");
    int max_depth = 0;
    for (int d : o.depths) max_depth = std::max(max_depth, d);
    for (int threads : o.threads) {
      SliceOptions so;
      so.kv_capacity_tokens = max_depth + o.tokens + 32;
      LocalPipeline p(*model, {0, c.n_layers}, so, threads);
      {  // warm-up: page in the weights
        GenerationOptions w;
        w.max_tokens = 4;
        w.ignore_eos = true;
        const std::vector<int32_t> warm = {1, 2, 3, 4, 5, 6, 7, 8};
        Generate(p, 1, warm, w).IgnoreError();
      }
      for (int depth : o.depths) {
        std::vector<int32_t> prompt(std::max(depth, 1));
        for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = (i * 101 + 7) % c.vocab_size;
        GenerationOptions g;
        g.max_tokens = o.tokens + 1;
        g.ignore_eos = true;
        g.prefill_chunk = o.chunk > 0 ? o.chunk : static_cast<int>(prompt.size());
        std::vector<double> prefill_tps, decode_s;
        for (int r = 0; r < o.repeats; ++r) {
          std::vector<double> stamps;
          auto res = Generate(p, 3, prompt, g, [&](int32_t) {
            stamps.push_back(bench::Now());
            return true;
          });
          if (!res.ok()) {
            std::cerr << res.status() << "\n";
            return 1;
          }
          prefill_tps.push_back(prompt.size() / res->prefill_seconds);
          std::vector<double> steps;
          for (size_t i = 1; i < stamps.size(); ++i) steps.push_back(stamps[i] - stamps[i - 1]);
          decode_s.push_back(bench::Median(steps));
        }
        const double t = bench::Median(decode_s);
        const double ptps = bench::Median(prefill_tps);
        std::printf("%8d %8d %16.2f %14.2f %12.2f\n", threads, depth, ptps, 1.0 / t, t * 1e3);
        std::fflush(stdout);
        results.push_back({{"threads", threads},
                           {"depth", depth},
                           {"prompt_tokens", prompt.size()},
                           {"prefill_chunk", g.prefill_chunk},
                           {"prefill_tokens_per_s", ptps},
                           {"decode_tokens_per_s", 1.0 / t},
                           {"ms_per_token", t * 1e3}});
      }
    }
    nlohmann::json out = {{"bench", "decode_depth"},       {"model", path},
                          {"decode_tokens", o.tokens},      {"repeats", o.repeats},
                          {"results", results}};
    std::ofstream(o.json) << out.dump(2) << "\n";
    std::printf("wrote %s\n", o.json.c_str());
    return 0;
  }
  std::printf("%8s %12s %12s %10s %12s %14s %14s\n", "threads", "decode tok/s", "ms/token",
              "GB/s", "% of copy", "prefill GFLOP/s", "prefill tok/s");

  std::vector<int32_t> prompt(16);
  for (int i = 0; i < 16; ++i) prompt[i] = (i * 37 + 11) % c.vocab_size;
  std::vector<int32_t> long_prompt(o.prefill);
  for (int i = 0; i < o.prefill; ++i) long_prompt[i] = (i * 101 + 7) % c.vocab_size;

  for (int threads : o.threads) {
    SliceOptions so;
    so.kv_capacity_tokens = std::max(o.prefill, 16 + o.tokens) + 16;
    LocalPipeline p(*model, {0, c.n_layers}, so, threads);
    GenerationOptions g;
    g.max_tokens = o.tokens;
    g.ignore_eos = true;
    g.prefill_chunk = o.prefill;
    std::vector<double> per_token, prefill_s;
    Generate(p, 1, prompt, g).IgnoreError();  // warm-up: page in the weights
    for (int r = 0; r < o.repeats; ++r) {
      auto res = Generate(p, 1, prompt, g);
      if (!res.ok()) {
        std::cerr << res.status() << "\n";
        return 1;
      }
      per_token.push_back(res->decode_seconds / (res->tokens.size() - 1));
      GenerationOptions one = g;
      one.max_tokens = 1;
      auto pre = Generate(p, 2, long_prompt, one);
      prefill_s.push_back(pre->prefill_seconds);
    }
    const double t = bench::Median(per_token);
    const double gbs = weight_gb / t;
    const double gflops = PrefillFlops(*model, o.prefill) / bench::Median(prefill_s) / 1e9;
    std::printf("%8d %12.2f %12.2f %10.2f %11.1f%% %14.1f %14.2f\n", threads, 1.0 / t, t * 1e3,
                gbs, 100 * gbs / copy_gbs, gflops, o.prefill / bench::Median(prefill_s));
    results.push_back({{"threads", threads},
                       {"decode_tokens_per_s", 1.0 / t},
                       {"ms_per_token", t * 1e3},
                       {"achieved_GBps", gbs},
                       {"fraction_of_copy_bandwidth", gbs / copy_gbs},
                       {"prefill_tokens", o.prefill},
                       {"prefill_GFLOPs", gflops},
                       {"prefill_tokens_per_s", o.prefill / bench::Median(prefill_s)}});
  }
  nlohmann::json out = {{"bench", "decode"},
                        {"model", path},
                        {"weight_bytes_per_token", weight_gb * 1e9},
                        {"copy_bandwidth_GBps", copy_gbs},
                        {"decode_tokens", o.tokens},
                        {"repeats", o.repeats},
                        {"results", results}};
  std::ofstream(o.json) << out.dump(2) << "\n";
  std::printf("wrote %s\n", o.json.c_str());
  return 0;
}
