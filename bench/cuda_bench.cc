// GPU backend benchmark: the card's ceilings, then single-stream decode and
// prefill of random Llama-shaped models next to them.
//
//   ceilings  device-to-device copy bandwidth (bytes read + written), read
//             bandwidth (a kernel that only reads: the ceiling of batch-1
//             decode, which only reads weights) and the bf16 GEMM rate of
//             cuBLAS at 8192^3, each the median of repeats;
//   gemv      batch-1 matrix-vector bandwidth: the own GEMV vs cuBLAS;
//   decode    per model shape: a prompt, then greedy decode steps (stage
//             slice holding every layer + output head + argmax), per-token
//             wall time (median), tokens/s, achieved weight bandwidth and its
//             fractions of the measured read and copy bandwidths; with and
//             without CUDA graphs;
//   prefill   one 2K-token chunk: tokens/s and TFLOP/s as a fraction of the
//             measured GEMM rate.
//   breakdown one layer's prefill, GEMM by GEMM and the attention kernel;
//   stages    per-stage decode step times for 1, 2 and 4 stages.
// Shapes' weights are random, drawn on the device (no 13 GB file for 7B);
// --model adds a model file's own weights (any format and type the loader
// reads, converted at load as a stage does).
//
//   cuda_bench [--shapes tinyllama,llama2-7b|none] [--model PATH]
//              [--sections gemv,decode,breakdown,stages] [--decode-tokens 128]
//              [--prompt 16] [--prefill 2048] [--repeats 5] [--dtype bf16|f16]
//              [--json PATH]
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/cuda_read_bandwidth.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/ops.h"
#include "model/cuda/cuda_output_head.h"
#include "model/cuda/cuda_stage_slice.h"
#include "model/formats/model_source.h"
#include "nlohmann/json.hpp"

namespace specline {
namespace {

using cuda::DeviceBuffer;
using json = nlohmann::json;

// Median seconds of `fn` (enqueued on `stream`) over `repeats` runs, timed
// with device events after `warmup` untimed runs.
template <typename Fn>
double TimeDevice(cudaStream_t stream, int warmup, int repeats, Fn fn) {
  cudaEvent_t a, b;
  SPECLINE_CUDA_CHECK(cudaEventCreate(&a));
  SPECLINE_CUDA_CHECK(cudaEventCreate(&b));
  for (int i = 0; i < warmup; ++i) fn(i);
  std::vector<double> t;
  for (int r = 0; r < repeats; ++r) {
    SPECLINE_CUDA_CHECK(cudaEventRecord(a, stream));
    fn(warmup + r);
    SPECLINE_CUDA_CHECK(cudaEventRecord(b, stream));
    SPECLINE_CUDA_CHECK(cudaEventSynchronize(b));
    float ms = 0;
    SPECLINE_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms / 1e3);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return bench::Median(t);
}

double CopyBandwidth(cudaStream_t s, int repeats) {
  const size_t bytes = size_t{2} << 30;
  DeviceBuffer src(bytes), dst(bytes);
  cuda::FillUniform(DType::kBF16, src.get(), bytes / 2, 1, 1.0f, s);
  const double sec = TimeDevice(s, 2, repeats, [&](int) {
    SPECLINE_CUDA_CHECK(cudaMemcpyAsync(dst.get(), src.get(), bytes, cudaMemcpyDeviceToDevice, s));
  });
  return 2.0 * bytes / sec / 1e9;
}

// Bytes read per second by a read-only kernel over 2 GiB (40x the L2).
double ReadBandwidth(cudaStream_t s, int repeats) {
  const size_t bytes = size_t{2} << 30;
  DeviceBuffer src(bytes), sink(4);
  cuda::FillUniform(DType::kBF16, src.get(), bytes / 2, 4, 1.0f, s);
  const double sec = TimeDevice(s, 2, repeats, [&](int) {
    cuda_bench::EnqueueReadPass(src.get(), bytes, sink.as<unsigned>(), s);
    SPECLINE_CUDA_CHECK(cudaGetLastError());
  });
  return bytes / sec / 1e9;
}

double GemmTflops(cudaStream_t s, DType t, int repeats) {
  const int64_t n = 8192;
  DeviceBuffer a(n * n * 2), b(n * n * 2), c(n * n * 2);
  cuda::FillUniform(t, a.get(), n * n, 2, 1.0f, s);
  cuda::FillUniform(t, b.get(), n * n, 3, 1.0f, s);
  cuda::Gemm gemm(s);
  const cuda::DeviceMatrix w{t, a.get(), n, n};
  const double sec = TimeDevice(s, 2, repeats, [&](int) { gemm.Run(w, b.get(), n, c.get()); });
  return 2.0 * n * n * n / sec / 1e12;
}

// Batch-1 GEMV bandwidth over a 4096 x 11008 matrix (Llama-2-7B's MLP),
// rotating among enough copies to defeat the L2 cache.
json GemvBandwidth(cudaStream_t s, DType t, int repeats, double copy_gbs) {
  const int64_t rows = 11008, cols = 4096, copies = 4;
  std::vector<DeviceBuffer> w;
  for (int i = 0; i < copies; ++i) {
    w.emplace_back(rows * cols * 2);
    cuda::FillUniform(t, w.back().get(), rows * cols, 10 + i, 0.02f, s);
  }
  DeviceBuffer x(cols * 2), y(rows * 2);
  cuda::FillUniform(t, x.get(), cols, 20, 1.0f, s);
  json out;
  cuda::Gemm gemm(s);
  for (auto [name, path] : {std::pair{"gemv", cuda::SmallMPath::kGemv},
                            std::pair{"cublas", cuda::SmallMPath::kCublas}}) {
    gemm.set_small_m_path(path);
    const double sec = TimeDevice(s, 4, repeats * 8, [&](int i) {
      gemm.Run({t, w[i % copies].get(), rows, cols}, x.get(), 1, y.get());
    });
    const double gbs = rows * cols * 2 / sec / 1e9;
    out[name] = {{"us", sec * 1e6}, {"GBs", gbs}, {"of_copy_bw", gbs / copy_gbs}};
  }
  return out;
}

// What a row measures: a named shape with random weights, or a model file.
struct Subject {
  std::string name;
  ModelConfig config;
  const ModelSource* src = nullptr;  // null: random weights of config's shape
};

ModelConfig ShapeByName(const std::string& name) {
  if (name == "tinyllama") return LlamaShape(2048, 5632, 22, 32, 4, 32000, 4096);
  if (name == "llama2-7b") return LlamaShape(4096, 11008, 32, 32, 32, 32000, 4096);
  if (name == "stories110m") return Stories110MShape();
  throw std::invalid_argument("unknown shape " + name + " (tinyllama, llama2-7b, stories110m)");
}

double Params(const ModelConfig& c) {
  const double q = double(c.n_heads) * c.head_dim, kv = double(c.n_kv_heads) * c.head_dim;
  const double layer = c.dim * (q + 2 * kv) + q * c.dim + 3.0 * c.dim * c.hidden_dim;
  return c.n_layers * layer + double(c.vocab_size) * c.dim;  // + lm_head (embedding not multiplied)
}

json DecodeAndPrefill(const Subject& subject, DType t, int prompt, int decode_tokens, int prefill,
                      int repeats, double copy_gbs, double read_gbs, double gemm_tflops) {
  const ModelConfig& c = subject.config;
  json row;
  row["shape"] = subject.name;
  row["params"] = Params(c);
  const double t_load = bench::Now();
  std::unique_ptr<cuda::CudaOutputHead> head_ptr =
      subject.src ? std::make_unique<cuda::CudaOutputHead>(*subject.src, t, 0)
                  : std::make_unique<cuda::CudaOutputHead>(c, t, 0, 77);
  cuda::CudaOutputHead& head = *head_ptr;
  for (bool graphs : {true, false}) {
    cuda::CudaSliceOptions o;
    o.dtype = t;
    o.cuda_graphs = graphs;
    o.slice.kv_capacity_tokens = std::max(prefill, prompt + decode_tokens) + 64;
    std::unique_ptr<cuda::CudaStageSlice> slice_ptr =
        subject.src ? std::make_unique<cuda::CudaStageSlice>(*subject.src, 0, c.n_layers, o)
                    : std::make_unique<cuda::CudaStageSlice>(c, 0, c.n_layers, o, 1234);
    cuda::CudaStageSlice& slice = *slice_ptr;
    if (graphs) row["load_s"] = bench::Now() - t_load;
    const double bytes = double(slice.decode_weight_bytes() + head.weight_bytes());
    std::vector<double> per_token_medians;
    for (int r = 0; r < repeats; ++r) {
      const uint64_t seq = 100 + r;
      std::vector<SlotRef> slots;
      std::vector<int32_t> tokens;
      for (int i = 0; i < prompt; ++i) {
        slots.push_back({seq, i});
        tokens.push_back((i * 131 + 7) % c.vocab_size);
      }
      SliceOutput out;
      if (absl::Status st = slice.Forward({slots, tokens, {}}, {}, &out); !st.ok()) {
        throw std::runtime_error("prompt: " + st.ToString());
      }
      int32_t next = 0;
      head.Argmax(out.hidden.data() + int64_t(prompt - 1) * c.dim, 1, &next);
      std::vector<double> step;
      for (int i = 0; i < decode_tokens; ++i) {
        const double t0 = bench::Now();
        std::vector<SlotRef> one{{seq, prompt + i}};
        std::vector<int32_t> tok{next};
        if (!slice.Forward({one, tok, {}}, {}, &out).ok()) throw std::runtime_error("decode");
        head.Argmax(out.hidden.data(), 1, &next);
        step.push_back(bench::Now() - t0);
      }
      slice.Release(seq);
      // The first steps capture graphs: leave them out.
      per_token_medians.push_back(bench::MedianAfterWarmup(step, 4));
    }
    const double sec = bench::Median(per_token_medians);
    const double gbs = bytes / sec / 1e9;
    row[graphs ? "decode_graphs" : "decode_eager"] = {
        {"ms_per_token", sec * 1e3}, {"tokens_per_s", 1.0 / sec}, {"weight_GB", bytes / 1e9},
        {"GBs", gbs}, {"of_copy_bw", gbs / copy_gbs}, {"of_read_bw", gbs / read_gbs}};
    if (!graphs) continue;
    // Prefill: one chunk of `prefill` tokens into an empty sequence.
    std::vector<double> times;
    for (int r = 0; r < std::max(2, repeats / 2) + 1; ++r) {
      std::vector<SlotRef> slots;
      std::vector<int32_t> tokens;
      for (int i = 0; i < prefill; ++i) {
        slots.push_back({1, i});
        tokens.push_back((i * 17 + 3) % c.vocab_size);
      }
      SliceOutput out;
      const double t0 = bench::Now();
      if (!slice.Forward({slots, tokens, {}}, {}, &out).ok()) throw std::runtime_error("prefill");
      times.push_back(bench::Now() - t0);
      slice.Release(1);
    }
    const double psec = bench::MedianAfterWarmup(times, 1);
    const double q_dim = double(c.n_heads) * c.head_dim;
    const double flops = 2.0 * (Params(c) - double(c.vocab_size) * c.dim) * prefill +
                         2.0 * 2.0 * c.n_layers * q_dim * double(prefill) * prefill / 2.0;
    row["prefill"] = {{"tokens", prefill},
                      {"ms", psec * 1e3},
                      {"tokens_per_s", prefill / psec},
                      {"TFLOPs", flops / psec / 1e12},
                      {"of_gemm_rate", flops / psec / 1e12 / gemm_tflops}};
  }
  return row;
}

// Where one layer's prefill time goes: the four GEMMs at m = T and the
// prefill attention kernel over a T-token causal chunk, each timed alone.
json PrefillBreakdown(const std::string& name, const ModelConfig& c, DType t, int tokens,
                      int repeats) {
  cudaStream_t s;
  SPECLINE_CUDA_CHECK(cudaStreamCreate(&s));
  cuda::Gemm gemm(s);
  const int64_t q_dim = int64_t{c.n_heads} * c.head_dim, kv_dim = int64_t{c.n_kv_heads} * c.head_dim;
  const int64_t qkv = q_dim + 2 * kv_dim;
  json out;
  auto time_gemm = [&](const char* what, int64_t rows, int64_t cols) {
    DeviceBuffer w(rows * cols * 2), x(int64_t{tokens} * cols * 2), y(int64_t{tokens} * rows * 2);
    cuda::FillUniform(t, w.get(), rows * cols, 5, 0.02f, s);
    cuda::FillUniform(t, x.get(), int64_t{tokens} * cols, 6, 1.0f, s);
    const double sec = TimeDevice(s, 2, repeats * 2, [&](int) {
      gemm.Run({t, w.get(), rows, cols}, x.get(), tokens, y.get());
    });
    out[what] = {{"ms", sec * 1e3}, {"TFLOPs", 2.0 * rows * cols * tokens / sec / 1e12}};
    return sec;
  };
  double total = time_gemm("qkv", qkv, c.dim) + time_gemm("o", c.dim, q_dim) +
                 time_gemm("gate_up", 2 * int64_t{c.hidden_dim}, c.dim) +
                 time_gemm("down", c.dim, c.hidden_dim);
  // Attention: one sequence of `tokens` positions in a contiguous cache.
  const int bs = 16, blocks = (tokens + bs - 1) / bs;
  DeviceBuffer q(int64_t{tokens} * qkv * 2), out_buf(int64_t{tokens} * q_dim * 2);
  DeviceBuffer kc(int64_t{blocks} * bs * kv_dim * 2), vc(int64_t{blocks} * bs * kv_dim * 2);
  cuda::FillUniform(t, q.get(), int64_t{tokens} * qkv, 7, 1.0f, s);
  cuda::FillUniform(t, kc.get(), int64_t{blocks} * bs * kv_dim, 8, 1.0f, s);
  cuda::FillUniform(t, vc.get(), int64_t{blocks} * bs * kv_dim, 9, 1.0f, s);
  std::vector<int32_t> table(blocks), row_seq(tokens, 0), row_len(tokens), first, rows;
  for (int b = 0; b < blocks; ++b) table[b] = b;
  for (int i = 0; i < tokens; ++i) row_len[i] = i + 1;
  for (int i = 0; i < tokens; i += cuda::kPrefillTileRows) {
    first.push_back(i);
    rows.push_back(std::min(cuda::kPrefillTileRows, tokens - i));
  }
  auto up = [&](const std::vector<int32_t>& v) {
    DeviceBuffer d(v.size() * 4);
    SPECLINE_CUDA_CHECK(cudaMemcpy(d.get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
    return d;
  };
  DeviceBuffer d_table = up(table), d_seq = up(row_seq), d_len = up(row_len), d_first = up(first),
               d_rows = up(rows);
  cuda::PagedAttentionParams p;
  p.t = t;
  p.q = q.get();
  p.q_stride = static_cast<int>(qkv);
  p.out = out_buf.get();
  p.k_cache = kc.get();
  p.v_cache = vc.get();
  p.block_tables = d_table.as<int32_t>();
  p.max_blocks = blocks;
  p.row_seq = d_seq.as<int32_t>();
  p.row_len = d_len.as<int32_t>();
  p.n = tokens;
  p.n_heads = c.n_heads;
  p.n_kv_heads = c.n_kv_heads;
  p.head_dim = c.head_dim;
  p.block_size = bs;
  p.scale = 1.0f / std::sqrt(float(c.head_dim));
  p.max_len = tokens;
  const double att = TimeDevice(s, 2, repeats * 2, [&](int) {
    cuda::PagedAttentionPrefill(p, d_first.as<int32_t>(), d_rows.as<int32_t>(),
                                static_cast<int>(first.size()), s);
  });
  const double att_flops = 2.0 * 2.0 * q_dim * double(tokens) * (tokens + 1) / 2.0;
  out["attention"] = {{"ms", att * 1e3}, {"TFLOPs", att_flops / att / 1e12}};
  out["layer_ms"] = (total + att) * 1e3;
  out["model_ms_estimate"] = (total + att) * 1e3 * c.n_layers;
  out["shape"] = name;
  cudaStreamDestroy(s);
  return out;
}

// Per-stage decode step time for a pipeline of n stages (the first L/n
// layers, batch 1, graphs, hidden rows to and from the host as a stage
// worker does), and the output head's: the numbers docs/cuda.md projects an
// n-GPU pipeline from.
json StageTimes(const std::string& name, const ModelConfig& c, DType t, int repeats) {
  json out;
  out["shape"] = name;
  cuda::CudaOutputHead head(c, t, 0, 78);
  std::vector<float> hidden(c.dim, 0.5f);
  std::vector<double> ht;
  for (int i = 0; i < 20 * repeats; ++i) {
    int32_t id = 0;
    const double t0 = bench::Now();
    head.Argmax(hidden.data(), 1, &id);
    ht.push_back(bench::Now() - t0);
  }
  out["head_ms"] = bench::Median(ht) * 1e3;
  for (int n : {1, 2, 4}) {
    const int layers = c.n_layers / n;
    cuda::CudaSliceOptions o;
    o.dtype = t;
    o.slice.kv_capacity_tokens = 512;
    // Hidden rows in and out, as a middle stage (stage 0 embeds instead).
    o.slice.hidden_input = true;
    cuda::CudaStageSlice slice(c, 0, layers, o, 99);
    std::vector<double> times;
    SliceOutput so;
    std::vector<float> in(c.dim, 0.25f);
    for (int pos = 0; pos < 40 * repeats; ++pos) {
      std::vector<SlotRef> one{{1, pos}};
      const double t0 = bench::Now();
      if (absl::Status st = slice.Forward({one, {}, in}, {}, &so); !st.ok()) {
        throw std::runtime_error("stage step: " + st.ToString());
      }
      times.push_back(bench::Now() - t0);
    }
    out["stage_ms"][std::to_string(n)] = bench::MedianAfterWarmup(times, 4) * 1e3;
    out["stage_layers"][std::to_string(n)] = layers;
  }
  return out;
}

}  // namespace
}  // namespace specline

int main(int argc, char** argv) {
  using namespace specline;
  std::string shapes = "tinyllama,llama2-7b", json_path, dtype = "bf16", model_path;
  std::string sections = "gemv,decode,breakdown,stages";
  int decode_tokens = 128, prompt = 16, prefill = 2048, repeats = 5;
  try {
    const bool ok = bench::ParseArgs(argc, argv, [&](const std::string& a, auto next) {
      if (a == "--shapes") shapes = next();
      else if (a == "--model") model_path = next();
      else if (a == "--sections") sections = next();
      else if (a == "--decode-tokens") decode_tokens = std::stoi(next());
      else if (a == "--prompt") prompt = std::stoi(next());
      else if (a == "--prefill") prefill = std::stoi(next());
      else if (a == "--repeats") repeats = std::stoi(next());
      else if (a == "--dtype") dtype = next();
      else if (a == "--json") json_path = next();
      else return false;
      return true;
    });
    if (!ok) {
      std::fprintf(stderr,
                   "usage: cuda_bench [--shapes a,b|none] [--model PATH] "
                   "[--sections gemv,decode,breakdown,stages] [--decode-tokens N] [--prompt N] "
                   "[--prefill N] [--repeats N] [--dtype bf16|f16] [--json PATH]\n");
      return 2;
    }
    auto has_section = [&](const std::string& name) {
      return ("," + sections + ",").find("," + name + ",") != std::string::npos;
    };
    // What the decode, breakdown and stage sections measure: the shapes,
    // then the model file (read before any device work, so a bad path fails
    // at once).
    std::unique_ptr<ModelSource> model;
    std::vector<Subject> subjects;
    if (shapes != "none") {
      std::stringstream ss(shapes);
      for (std::string name; std::getline(ss, name, ',');) {
        if (!name.empty()) subjects.push_back({name, ShapeByName(name), nullptr});
      }
    }
    if (!model_path.empty()) {
      model = OpenModel(model_path);
      const std::string stem = model_path.substr(model_path.find_last_of('/') + 1);
      subjects.push_back({stem, model->config(), model.get()});
    }
    std::string why;
    if (!cuda::DeviceAvailable(&why)) {
      std::fprintf(stderr, "cuda_bench: no CUDA device (%s)\n", why.c_str());
      return 1;
    }
    const DType t = dtype == "f16" ? DType::kF16 : DType::kBF16;
    cudaDeviceProp prop{};
    SPECLINE_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    int driver = 0;
    cudaDriverGetVersion(&driver);
    cudaStream_t s;
    SPECLINE_CUDA_CHECK(cudaStreamCreate(&s));
    nlohmann::json report;
    report["gpu"] = prop.name;
    report["sms"] = prop.multiProcessorCount;
    report["driver_cuda_version"] = driver;
    report["dtype"] = dtype;
    report["sections"] = sections;
    const double copy = CopyBandwidth(s, repeats * 4);
    const double read = ReadBandwidth(s, repeats * 4);
    const double gemm = GemmTflops(s, t, repeats * 2);
    report["copy_GBs"] = copy;
    report["read_GBs"] = read;
    report["gemm_TFLOPs"] = gemm;
    std::printf("%s, %d SMs: read %.0f GB/s, copy %.0f GB/s (read+write), %s GEMM 8192^3 "
                "%.0f TFLOP/s\n",
                prop.name, prop.multiProcessorCount, read, copy, dtype.c_str(), gemm);
    if (has_section("gemv")) {
      report["gemv"] = GemvBandwidth(s, t, repeats, copy);
      std::printf("GEMV 11008x4096 m=1: own %.0f GB/s (%.0f%% of copy), cuBLAS %.0f GB/s (%.0f%%)\n",
                  report["gemv"]["gemv"]["GBs"].get<double>(),
                  100 * report["gemv"]["gemv"]["of_copy_bw"].get<double>(),
                  report["gemv"]["cublas"]["GBs"].get<double>(),
                  100 * report["gemv"]["cublas"]["of_copy_bw"].get<double>());
    }
    if (has_section("decode")) {
      std::printf("\n%-12s %-7s %10s %9s %9s %8s %8s %12s %10s %8s\n", "shape", "graphs",
                  "ms/token", "tok/s", "GB/s", "of read", "of copy", "prefill t/s", "TFLOP/s",
                  "of GEMM");
      for (const Subject& subject : subjects) {
        nlohmann::json row = DecodeAndPrefill(subject, t, prompt, decode_tokens, prefill, repeats,
                                              copy, read, gemm);
        report["models"].push_back(row);
        for (const char* mode : {"decode_graphs", "decode_eager"}) {
          const auto& d = row[mode];
          const bool g = std::string(mode) == "decode_graphs";
          std::printf("%-12s %-7s %10.3f %9.1f %9.0f %7.0f%% %7.0f%%", subject.name.c_str(),
                      g ? "yes" : "no", d["ms_per_token"].get<double>(),
                      d["tokens_per_s"].get<double>(), d["GBs"].get<double>(),
                      100 * d["of_read_bw"].get<double>(), 100 * d["of_copy_bw"].get<double>());
          if (g) {
            const auto& p = row["prefill"];
            std::printf(" %12.0f %10.1f %7.0f%%\n", p["tokens_per_s"].get<double>(),
                        p["TFLOPs"].get<double>(), 100 * p["of_gemm_rate"].get<double>());
          } else {
            std::printf("\n");
          }
        }
      }
    }
    if (has_section("breakdown")) {
      std::printf("\nprefill of %d tokens, one layer (ms and TFLOP/s):\n", prefill);
      for (const Subject& subject : subjects) {
        nlohmann::json b = PrefillBreakdown(subject.name, subject.config, t, prefill, repeats);
        report["prefill_breakdown"].push_back(b);
        std::printf("%-12s", subject.name.c_str());
        for (const char* k : {"qkv", "o", "gate_up", "down", "attention"}) {
          std::printf("  %s %.3f ms %.0f TF/s", k, b[k]["ms"].get<double>(),
                      b[k]["TFLOPs"].get<double>());
        }
        std::printf("\n");
      }
    }
    if (has_section("stages")) {
      std::printf("\n%-12s %9s %12s %12s %12s\n", "stage times", "head ms", "1 stage ms",
                  "1/2 model ms", "1/4 model ms");
      for (const Subject& subject : subjects) {
        nlohmann::json st = StageTimes(subject.name, subject.config, t, repeats);
        report["stage_times"].push_back(st);
        std::printf("%-12s %9.3f %12.3f %12.3f %12.3f\n", subject.name.c_str(),
                    st["head_ms"].get<double>(), st["stage_ms"]["1"].get<double>(),
                    st["stage_ms"]["2"].get<double>(), st["stage_ms"]["4"].get<double>());
      }
    }
    if (!json_path.empty()) std::ofstream(json_path) << report.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
