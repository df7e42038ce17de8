// The GPU runtime against the CPU one: CudaStageSlice + CudaOutputHead give
// the CPU's logits (within bf16 / fp16 tolerance) on random models of
// several shapes (GQA, MHA, Qwen2 biases, Qwen3 q/k norms, interleaved
// RoPE), through prefill chunks, mixed batches, decode steps replayed from
// CUDA graphs, rollbacks and taps; graph replay equals eager execution bit
// for bit; device-to-device chaining equals the host path bit for bit; bad
// batches fail without touching the cache; and greedy generation on the
// real stories260K follows the CPU token for token (where it departs, the
// CPU's own top-two logits must be a near tie).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>

#include "kernels/cuda/cublas_loader.h"
#include "model/cuda/cuda_output_head.h"
#include "model/cuda/cuda_stage_slice.h"
#include "model/formats/random_model.h"
#include "model/formats/random_model_arch.h"
#include "model/runtime/output_head.h"
#include "model/runtime/stage_slice.h"
#include "tests/cuda_test_util.h"
#include "tests/test_util.h"

namespace specline {
namespace {

using cuda::CudaOutputHead;
using cuda::CudaSliceOptions;
using cuda::CudaStageSlice;

struct Shape {
  std::string name;
  ModelConfig config;
  ModelFormat format;
  DType weights;
};

std::vector<Shape> Shapes() {
  std::vector<Shape> s;
  s.push_back({"llama_gqa", LlamaShape(128, 256, 3, 4, 2, 256, 256), ModelFormat::kHuggingFace,
               DType::kBF16});
  s.push_back({"llama_mha_hd64", LlamaShape(256, 512, 2, 4, 4, 320, 256),
               ModelFormat::kHuggingFace, DType::kBF16});
  s.push_back({"smollm_like_gqa3", LlamaShape(192, 384, 2, 6, 2, 300, 256),
               ModelFormat::kHuggingFace, DType::kBF16});
  // 32 query heads over 4 KV heads (TinyLlama's grouping) with a long
  // context bound: the decode split-K plan varies with the batch size here.
  s.push_back({"gqa8_32heads", LlamaShape(1024, 512, 2, 32, 4, 256, 1024),
               ModelFormat::kHuggingFace, DType::kBF16});
  ModelConfig qwen2 = LlamaShape(128, 256, 2, 4, 2, 256, 256);
  qwen2.arch = "qwen2";
  qwen2.qkv_bias = true;
  s.push_back({"qwen2_bias", qwen2, ModelFormat::kHuggingFace, DType::kBF16});
  ModelConfig qwen3 = LlamaShape(96, 192, 2, 4, 2, 256, 256);
  qwen3.arch = "qwen3";
  qwen3.head_dim = 32;  // not dim / n_heads
  qwen3.qk_norm = true;
  qwen3.rope_theta = 1e6f;
  qwen3.norm_eps = 1e-6f;
  qwen3.tied_embeddings = true;
  s.push_back({"qwen3_qk_norm", qwen3, ModelFormat::kHuggingFace, DType::kBF16});
  // Gemma 2: soft caps small enough to bend these scores and logits,
  // alternating window-24 layers (the 70-token prefill crosses it), head_dim
  // 32 (the generic prefill kernel).
  ModelConfig gemma2 = LlamaShape(128, 256, 3, 4, 2, 256, 256);
  gemma2.arch = "gemma2";
  gemma2.head_dim = 32;
  ApplyGemmaArch(gemma2);
  gemma2.tied_embeddings = true;
  gemma2.norm_eps = 1e-6f;
  gemma2.sliding_window = 24;
  gemma2.swa_pattern = 2;
  gemma2.attn_softcap = 5.0f;
  gemma2.final_softcap = 5.0f;
  s.push_back({"gemma2_softcap_window", gemma2, ModelFormat::kHuggingFace, DType::kBF16});
  // Gemma 3: q/k norm, 2 local : 1 global layers with their own RoPE bases,
  // head_dim 64 (the wmma prefill kernel).
  ModelConfig gemma3 = LlamaShape(256, 512, 4, 4, 2, 256, 256);
  gemma3.arch = "gemma3";
  gemma3.head_dim = 64;
  ApplyGemmaArch(gemma3);
  gemma3.tied_embeddings = true;
  gemma3.norm_eps = 1e-6f;
  gemma3.sliding_window = 24;
  gemma3.swa_pattern = 3;
  gemma3.rope_theta = 1e6f;
  gemma3.rope_theta_local = 1e4f;
  s.push_back({"gemma3_window", gemma3, ModelFormat::kHuggingFace, DType::kBF16});
  // GGUF "llama": interleaved RoPE pairs; fp16 weights.
  s.push_back({"gguf_interleaved_f16", LlamaShape(128, 352, 2, 4, 4, 256, 256), ModelFormat::kGguf,
               DType::kF16});
  // Phi-4-mini-like GGUF: fused qkv and gate/up, partial rotary (24 of 32
  // dims), LongRoPE long factors with the attention factor, tied.
  ModelConfig phi3 = LlamaShape(128, 256, 2, 4, 2, 256, 256);
  phi3.arch = "phi3";
  phi3.rope_dim = 24;
  phi3.longrope = RandomLongRope(24, 64, phi3.max_seq_len);
  phi3.tied_embeddings = true;
  s.push_back({"phi3_partial_longrope", phi3, ModelFormat::kGguf, DType::kF16});
  // Mixture of experts: routed on the host, grouped GEMMs per expert.
  auto moe = [](const std::string& arch, int experts, int used, int expert_hidden) {
    ModelConfig c = LlamaShape(128, expert_hidden, 2, 4, 2, 256, 256);
    c.arch = arch;
    c.n_experts = experts;
    c.n_experts_used = used;
    c.expert_hidden_dim = expert_hidden;
    c.moe_routing = arch == "olmoe" ? MoeRouting::kSoftmaxTopK : MoeRouting::kSoftmaxTopKRenorm;
    c.qk_norm = arch != "mixtral";
    c.qk_norm_full = arch == "olmoe";
    return c;
  };
  s.push_back({"qwen3moe", moe("qwen3moe", 8, 2, 64), ModelFormat::kHuggingFace, DType::kBF16});
  s.push_back({"mixtral_gguf", moe("mixtral", 4, 2, 160), ModelFormat::kGguf, DType::kF16});
  s.push_back({"olmoe", moe("olmoe", 6, 3, 96), ModelFormat::kHuggingFace, DType::kBF16});
  return s;
}

// One batch: (seq, first position, tokens) runs.
struct Run {
  uint64_t seq;
  int32_t start;
  std::vector<int32_t> tokens;
};
using Batch = std::vector<Run>;

// Prefill chunks of two sequences, then a mixed batch, decode steps of
// three sequences (graph buckets with padding), an implicit rollback with
// a 3-token chunk, and more decode.
std::vector<Batch> Script(int vocab) {
  auto tok = [vocab](int i) { return (i * 37 + 11) % vocab; };
  std::vector<Batch> s;
  std::vector<int32_t> p1, p2;
  for (int i = 0; i < 70; ++i) p1.push_back(tok(i));
  for (int i = 0; i < 5; ++i) p2.push_back(tok(100 + i));
  s.push_back({{1, 0, p1}, {2, 0, p2}});
  s.push_back({{3, 0, {tok(7), tok(8), tok(9)}}, {1, 70, {tok(70)}}, {2, 5, {tok(5)}}});
  for (int step = 0; step < 6; ++step) {
    s.push_back({{1, 71 + step, {tok(200 + step)}},
                 {2, 6 + step, {tok(300 + step)}},
                 {3, 3 + step, {tok(400 + step)}}});
  }
  s.push_back({{1, 75, {tok(1), tok(2), tok(3)}}});  // rolls seq 1 back from 77 to 75
  s.push_back({{1, 78, {tok(4)}}, {3, 9, {tok(5)}}});
  return s;
}

struct Flat {
  std::vector<SlotRef> slots;
  std::vector<int32_t> tokens;
};
Flat Flatten(const Batch& b) {
  Flat f;
  for (const Run& r : b) {
    for (size_t i = 0; i < r.tokens.size(); ++i) {
      f.slots.push_back({r.seq, r.start + int32_t(i)});
      f.tokens.push_back(r.tokens[i]);
    }
  }
  return f;
}

// Runs `batch` through a chain of slices; returns the last hidden rows and
// the taps (in the order asked) of every slice.
std::vector<float> Chain(std::vector<SliceBackend*>& slices, const Batch& batch,
                         const std::vector<int>& taps, std::vector<Tap>* all_taps) {
  const Flat f = Flatten(batch);
  std::vector<float> hidden;
  for (size_t s = 0; s < slices.size(); ++s) {
    SliceInput in{f.slots, s == 0 ? std::span<const int32_t>(f.tokens) : std::span<const int32_t>(),
                  s == 0 ? std::span<const float>() : std::span<const float>(hidden)};
    std::vector<int> mine;
    for (int t : taps) {
      if (slices[s]->CanTap(t) && (t > slices[s]->begin() || s == 0)) mine.push_back(t);
    }
    SliceOutput out;
    absl::Status st = slices[s]->Forward(in, mine, &out);
    EXPECT_TRUE(st.ok()) << st;
    hidden = std::move(out.hidden);
    if (all_taps) {
      for (Tap& t : out.taps) all_taps->push_back(std::move(t));
    }
  }
  return hidden;
}

// A random bf16 Hugging Face model of `config`, written under the test's
// temporary directory and opened.
std::unique_ptr<ModelSource> RandomModel(const std::string& name, const ModelConfig& config,
                                         uint64_t seed) {
  const std::string path = testing::TempDir() + "/" + name;
  WriteRandomModel(config, ModelFormat::kHuggingFace, path, seed, DType::kBF16);
  return OpenModel(path);
}

CudaSliceOptions Options(int kv_tokens, DType t = DType::kBF16) {
  CudaSliceOptions o;
  o.slice = SliceOptions{16, kv_tokens};
  o.dtype = t;
  return o;
}

class CudaRuntimeTest : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(CudaRuntimeTest, MatchesTheCpuThroughPrefillDecodeAndRollback) {
  SPECLINE_SKIP_WITHOUT_GPU();
  const Shape shape = Shapes()[std::get<0>(GetParam())];
  const DType t = std::get<1>(GetParam());
  const std::string path = testing::TempDir() + "/" + shape.name +
                           (shape.format == ModelFormat::kGguf ? ".gguf" : "");
  WriteRandomModel(shape.config, shape.format, path, /*seed=*/11, shape.weights);
  auto model = OpenModel(path);
  const ModelConfig& c = model->config();
  const int mid = c.n_layers / 2 > 0 ? c.n_layers / 2 : 1;

  auto pool = std::make_shared<kernels::ThreadPool>(2);
  StageSlice cpu(*model, 0, c.n_layers, SliceOptions{16, 512}, pool);
  OutputHead cpu_head(*model, pool);
  const CudaSliceOptions o = Options(512, t);
  CudaStageSlice g0(*model, 0, mid, o), g1(*model, mid, c.n_layers, o);
  CudaOutputHead gpu_head(*model, t);
  std::vector<SliceBackend*> cpu_chain{&cpu}, gpu_chain{&g0, &g1};

  const double tol = t == DType::kBF16 ? 4e-2 : 1e-2;
  const std::vector<int> taps = {0, mid, c.n_layers};
  int step = 0;
  for (const Batch& batch : Script(c.vocab_size)) {
    std::vector<Tap> cpu_taps, gpu_taps;
    const std::vector<float> hc = Chain(cpu_chain, batch, taps, &cpu_taps);
    const std::vector<float> hg = Chain(gpu_chain, batch, taps, &gpu_taps);
    const int64_t n = static_cast<int64_t>(hc.size() / c.dim);
    const std::vector<float> lc = cpu_head.Logits(hc.data(), n);
    const std::vector<float> lg = gpu_head.Logits(hg.data(), n);
    EXPECT_LT(testing::RelativeError(lg, lc), tol) << shape.name << " step " << step;
    ASSERT_EQ(cpu_taps.size(), gpu_taps.size());
    for (size_t k = 0; k < cpu_taps.size(); ++k) {
      EXPECT_EQ(gpu_taps[k].index, cpu_taps[k].index);
      EXPECT_LT(testing::RelativeError(gpu_taps[k].hidden, cpu_taps[k].hidden), tol)
          << shape.name << " step " << step << " tap " << cpu_taps[k].index;
    }
    ++step;
  }
  if (c.IsMoe()) {
    EXPECT_EQ(g0.graphs_captured(), 0) << "MoE layers route on the host: no graphs";
  } else {
    EXPECT_GT(g0.graphs_captured(), 0) << "decode steps should replay graphs";
  }
  for (uint64_t seq : {1, 2, 3}) EXPECT_EQ(g0.Length(seq), cpu.Length(seq));
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaRuntimeTest,
    ::testing::Combine(::testing::Range(0, static_cast<int>(Shapes().size())),
                       ::testing::Values(DType::kBF16, DType::kF16)),
    [](const auto& info) {
      return Shapes()[std::get<0>(info.param)].name +
             (std::get<1>(info.param) == DType::kBF16 ? "_bf16" : "_f16");
    });

// Graph replay runs the same kernels as eager execution on the same
// arrays: outputs must agree bit for bit, padding rows or not.
TEST(CudaRuntime, GraphReplayEqualsEagerBitForBit) {
  SPECLINE_SKIP_WITHOUT_GPU();
  auto model = RandomModel("graph_model", LlamaShape(128, 256, 2, 4, 2, 256, 256), 5);
  CudaSliceOptions graphs = Options(512), eager = Options(512);
  eager.cuda_graphs = false;
  CudaStageSlice a(*model, 0, 2, graphs), b(*model, 0, 2, eager);
  std::vector<SliceBackend*> ca{&a}, cb{&b};
  for (const Batch& batch : Script(256)) {
    EXPECT_EQ(Chain(ca, batch, {1}, nullptr), Chain(cb, batch, {1}, nullptr));
  }
  EXPECT_GT(a.graphs_captured(), 0);
  EXPECT_EQ(b.graphs_captured(), 0);
}

// ForwardDevice hands the hidden rows from slice to slice on the device;
// the result equals the host round trip exactly.
TEST(CudaRuntime, DeviceHandOffEqualsTheHostPath) {
  SPECLINE_SKIP_WITHOUT_GPU();
  auto model = RandomModel("handoff_model", LlamaShape(128, 256, 4, 4, 2, 256, 256), 6);
  const CudaSliceOptions o = Options(512);
  CudaStageSlice h0(*model, 0, 2, o), h1(*model, 2, 4, o);  // host path
  CudaStageSlice d0(*model, 0, 2, o), d1(*model, 2, 4, o);  // device path
  std::vector<SliceBackend*> host{&h0, &h1};
  cudaEvent_t e0, e1;
  ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
  for (const Batch& batch : Script(256)) {
    const std::vector<float> want = Chain(host, batch, {}, nullptr);
    const Flat f = Flatten(batch);
    cuda::DeviceBuffer mid(want.size() * sizeof(float)), last(want.size() * sizeof(float));
    std::vector<Tap> taps;
    SliceInput in0{f.slots, f.tokens, {}};
    absl::Status st = d0.ForwardDevice(in0, nullptr, nullptr, {}, &taps, mid.as<float>(), e0);
    ASSERT_TRUE(st.ok()) << st;
    SliceInput in1{f.slots, {}, {}};
    st = d1.ForwardDevice(in1, mid.as<float>(), e0, {}, &taps, last.as<float>(), e1);
    ASSERT_TRUE(st.ok()) << st;
    ASSERT_EQ(cudaEventSynchronize(e1), cudaSuccess);
    std::vector<float> got(want.size());
    ASSERT_EQ(cudaMemcpy(got.data(), last.get(), got.size() * sizeof(float),
                         cudaMemcpyDeviceToHost),
              cudaSuccess);
    EXPECT_EQ(got, want);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
}

TEST(CudaRuntime, BadBatchesFailAndLeaveTheCacheAlone) {
  SPECLINE_SKIP_WITHOUT_GPU();
  auto model = RandomModel("bad_model", LlamaShape(64, 128, 2, 4, 2, 100, 128), 7);
  CudaStageSlice s(*model, 0, 2, Options(64));  // 4 blocks
  std::vector<SlotRef> slots{{1, 0}, {1, 1}};
  std::vector<int32_t> ok{1, 2}, bad{1, 100};
  SliceOutput out;
  ASSERT_TRUE(s.Forward({slots, ok, {}}, {}, &out).ok());
  EXPECT_EQ(s.Length(1), 2);
  EXPECT_EQ(s.Forward({slots, bad, {}}, {}, &out).code(), absl::StatusCode::kInvalidArgument);
  std::vector<SlotRef> gap{{1, 5}};
  std::vector<int32_t> one{3};
  EXPECT_EQ(s.Forward({gap, one, {}}, {}, &out).code(), absl::StatusCode::kInvalidArgument);
  std::vector<SlotRef> big;
  std::vector<int32_t> many;
  for (int i = 0; i < 80; ++i) {
    big.push_back({2, i});
    many.push_back(i % 100);
  }
  EXPECT_EQ(s.Forward({big, many, {}}, {}, &out).code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.Length(1), 2);
  EXPECT_EQ(s.Length(2), 0);
  const std::vector<int> outside{5};
  EXPECT_EQ(s.Forward({slots, ok, {}}, outside, &out).code(), absl::StatusCode::kInvalidArgument)
      << "tap outside the slice";
}

// cuBLAS is dlopen()ed (kernels/cuda/cublas_loader.h); loading it needs no
// device, so this runs in CI too.
TEST(CudaRuntime, CublasLoadsAtRunTime) {
  const cuda::CublasApi& api = cuda::Cublas();
  EXPECT_NE(api.create, nullptr);
  EXPECT_NE(api.gemm_ex, nullptr);
  EXPECT_STREQ(api.status_string(CUBLAS_STATUS_SUCCESS), "success");
}

// Greedy decoding of the real stories260K (fp32 llama2.c checkpoint) on the
// GPU against the CPU, token for token from BOS. bf16/fp16 activations may
// flip a near tie; where the two first differ, the CPU's two best logits
// must be within `margin` of each other, so only rounding can explain it.
void GreedyAgainstCpu(DType t, float margin, int min_agree) {
  const std::string path = testing::SharedModelPath("stories260K/stories260K.bin");
  if (path.empty()) GTEST_SKIP() << "../shared/models/stories260K is absent";
  auto model = OpenModel(path);
  const ModelConfig& c = model->config();
  auto pool = std::make_shared<kernels::ThreadPool>(2);
  StageSlice cpu(*model, 0, c.n_layers, SliceOptions{16, 512}, pool);
  OutputHead cpu_head(*model, pool);
  CudaStageSlice gpu(*model, 0, c.n_layers, Options(512, t));
  CudaOutputHead gpu_head(*model, t);
  int32_t tc = 1, tg = 1;  // BOS
  const int steps = 250;
  int agree = 0;
  for (int pos = 0; pos < steps; ++pos) {
    std::vector<SlotRef> slot{{1, pos}};
    std::vector<int32_t> a{tc}, b{tg};
    SliceOutput oc, og;
    ASSERT_TRUE(cpu.Forward({slot, a, {}}, {}, &oc).ok());
    ASSERT_TRUE(gpu.Forward({slot, b, {}}, {}, &og).ok());
    std::vector<float> logits = cpu_head.Logits(oc.hidden.data(), 1);
    int32_t next_g = 0;
    gpu_head.Argmax(og.hidden.data(), 1, &next_g);
    const int32_t next_c =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (next_c != next_g) {
      std::vector<float> sorted = logits;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      std::printf("[ stories260K %s ] first divergence at step %d: cpu %d, gpu %d, cpu top-2 gap %.4f\n",
                  DTypeName(t).data(), pos, next_c, next_g, sorted[0] - sorted[1]);
      EXPECT_LT(sorted[0] - sorted[1], margin) << "diverged at step " << pos << " without a near tie";
      break;
    }
    ++agree;
    tc = next_c;
    tg = next_g;
  }
  std::printf("[ stories260K %s ] %d of %d greedy tokens identical to the CPU\n",
              DTypeName(t).data(), agree, steps);
  EXPECT_GE(agree, min_agree);
}

TEST(CudaRuntime, Stories260kGreedyFollowsTheCpuBf16) {
  SPECLINE_SKIP_WITHOUT_GPU();
  GreedyAgainstCpu(DType::kBF16, 0.3f, 16);
}
TEST(CudaRuntime, Stories260kGreedyFollowsTheCpuF16) {
  SPECLINE_SKIP_WITHOUT_GPU();
  GreedyAgainstCpu(DType::kF16, 0.05f, 64);
}

}  // namespace
}  // namespace specline
