// Pipeline speculation is lossless under SAMPLING, checked statistically.
//
// Greedy losslessness is token-for-token (scheduler_spec_test.cc). With
// sampling, speculative verification consumes the request's randomness
// differently from plain decoding, so outputs differ per seed; what must be
// identical is the DISTRIBUTION of the output. For a fixed short prompt and
// max_tokens = 3 we compute that distribution exactly from the plain model
// (LocalPipeline + Warp, never the engine): P(t1), P(t2 | t1), P(t3 | t1, t2),
// hence the exact joint of (t1, t2) and the exact marginal of t3. Then we
// draw N requests (seed = i) through the real pipeline in each decoding mode
// and run chi-square goodness-of-fit tests of the observed (t1, t2) joint,
// t3 marginal and (t1, t2, t3) joint against the exact ones.
//
// Rejection threshold: p < 1e-4 per test. There are 75 chi-square tests of
// the engine in this file (the 23 modes of INSTANTIATE_TEST_SUITE_P(Modes)
// and the 2 of MixtureOfExperts below, 25 modes x 3 statistics), so if the
// engine is lossless the chance that any of them fails spuriously in a run
// is at most 75 x 1e-4 = 0.75% (Bonferroni). (A mode added below adds 3
// tests and 0.03%: update this count with it.)
// PTP (coupled sampling at counter-based u, docs/ptp.md) is deterministic
// per seed; across seeds it must have the same distribution. The outputs depend on pipeline timing
// (whether a draft exists when a token is decided changes how the request's
// randomness is used), so runs are not bit-reproducible; each run is a fresh
// sample. Two negative controls show the tests' power at the same N: the
// (t1, t2) test rejects a distribution whose top first-token probability is
// off by 0.1 (and by 0.05); and the engine over a deliberately broken stage
// (t3 conditioned on the wrong token, t1 and t2 exact) is rejected by the t3
// and (t1, t2, t3) statistics while the (t1, t2) one, blind to it, passes.
// The broken engine runs plain decoding, so its outputs are the same on
// every run: its (t1, t2) test is deterministic, not a 76th chance of a
// spurious failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <map>
#include <tuple>
#include <mutex>
#include <span>
#include <ostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "model/runtime/local_pipeline.h"
#include "model/runtime/sampler.h"
#include "scheduler/policies/ppsd.h"
#include "scheduler/policies/ptp.h"
#include "scheduler/policies/spd.h"
#include "tests/inproc_pipeline.h"
#include "tests/spec_heads.h"

namespace specline::testing {
namespace {

using v1::DecodingPolicy;

constexpr double kAlpha = 1e-4;  // per-test rejection level (see the header comment)

// ---------------------------------------------------------------------------
// Chi-square goodness of fit.

// Regularized upper incomplete gamma Q(a, x) = Gamma(a, x) / Gamma(a), the
// chi-square upper tail: P(X >= x) for X ~ chi2(k) is Q(k / 2, x / 2).
// Numerical Recipes' split: for x < a + 1 the series of P(a, x) converges
// fast (Q = 1 - P); otherwise the continued fraction of Q (modified Lentz).
// Both are accurate to ~1e-14 relative, far more than a 1e-4 threshold needs.
double GammaQ(double a, double x) {
  if (x <= 0) return 1.0;
  const double log_prefix = -x + a * std::log(x) - std::lgamma(a);  // x^a e^-x / Gamma(a)
  if (x < a + 1) {
    // P(a, x) = x^a e^-x / Gamma(a + 1) * sum_n x^n / ((a + 1) ... (a + n)).
    double ap = a, term = 1.0 / a, sum = term;
    for (int n = 0; n < 10000; ++n) {
      ap += 1;
      term *= x / ap;
      sum += term;
      if (std::fabs(term) < std::fabs(sum) * 1e-16) break;
    }
    return std::max(0.0, 1.0 - sum * std::exp(log_prefix));
  }
  // Q(a, x) = x^a e^-x / Gamma(a) * 1 / (x + 1 - a - 1 (1 - a) / (x + 3 - a - ...)).
  constexpr double kTiny = 1e-300;
  double b = x + 1 - a, c = 1 / kTiny, d = 1 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1) < 1e-16) break;
  }
  return std::exp(log_prefix) * h;
}

double ChiSquareUpperTail(double stat, int df) { return GammaQ(df / 2.0, stat / 2.0); }

struct ChiSquare {
  double stat = 0;
  int df = 0;
  double p = 1;
  int outside_support = 0;  // observations the exact distribution gives probability 0
  std::string table;        // for failure messages
};

// Tests `counts` (n observations in all) against the exact `probs`. Cells
// whose expected count is below 5 are pooled into one cell (and that cell
// with the next smallest until it reaches 5), the usual validity rule of
// the chi-square approximation. An observation outside the support is an
// outright failure (p = 0).
ChiSquare ChiSquareTest(const std::map<int64_t, double>& probs,
                        const std::map<int64_t, int64_t>& counts, int64_t n) {
  ChiSquare r;
  for (const auto& [key, c] : counts) {
    if (!probs.contains(key)) r.outside_support += static_cast<int>(c);
  }
  struct Cell {
    double expected = 0;
    int64_t observed = 0;
  };
  std::vector<Cell> cells;
  for (const auto& [key, p] : probs) {
    auto it = counts.find(key);
    cells.push_back({p * static_cast<double>(n), it == counts.end() ? 0 : it->second});
  }
  std::sort(cells.begin(), cells.end(),
            [](const Cell& a, const Cell& b) { return a.expected < b.expected; });
  // Pool from the smallest up while the pooled cell is below 5.
  size_t first = 0;
  Cell pooled;
  while (first < cells.size() &&
         (cells[first].expected < 5 || (first > 0 && pooled.expected < 5))) {
    pooled.expected += cells[first].expected;
    pooled.observed += cells[first].observed;
    ++first;
  }
  std::vector<Cell> merged(cells.begin() + static_cast<std::ptrdiff_t>(first), cells.end());
  if (pooled.expected > 0) merged.push_back(pooled);
  std::ostringstream table;
  for (const Cell& c : merged) {
    r.stat += (c.observed - c.expected) * (c.observed - c.expected) / c.expected;
    table << " [E " << c.expected << " O " << c.observed << "]";
  }
  r.df = static_cast<int>(merged.size()) - 1;
  r.p = r.df > 0 ? ChiSquareUpperTail(r.stat, r.df) : 1.0;
  if (r.outside_support > 0) r.p = 0;
  r.table = table.str();
  return r;
}

TEST(ChiSquare, UpperTailMatchesKnownValues) {
  // Critical values of the chi-square distribution (standard tables).
  EXPECT_NEAR(ChiSquareUpperTail(3.841459, 1), 0.05, 1e-6);
  EXPECT_NEAR(ChiSquareUpperTail(18.307038, 10), 0.05, 1e-6);
  EXPECT_NEAR(ChiSquareUpperTail(6.634897, 1), 0.01, 1e-6);
  // Closed forms, over both branches of GammaQ (x < a + 1 and beyond):
  // df = 1: erfc(sqrt(x / 2)); even df = 2k: the Poisson sum
  // exp(-x / 2) * sum_{i < k} (x / 2)^i / i!.
  for (double x : {0.3, 1.9, 2.1, 10.0, 40.0}) {
    EXPECT_NEAR(ChiSquareUpperTail(x, 1), std::erfc(std::sqrt(x / 2)), 1e-12) << x;
  }
  for (int k : {1, 5, 18, 40}) {
    for (double x : {0.5, 1.0 * k, 2.0 * k - 1, 2.0 * k + 3, 3.0 * k + 20, 6.0 * k + 60}) {
      double term = 1, sum = 0;
      for (int i = 0; i < k; ++i) {
        sum += term;
        term *= (x / 2) / (i + 1);
      }
      const double exact = std::exp(-x / 2) * sum;
      EXPECT_NEAR(ChiSquareUpperTail(x, 2 * k), exact, 1e-12 + 1e-9 * exact) << k << " " << x;
    }
  }
}

// ---------------------------------------------------------------------------
// The exact output distribution of the plain model.

constexpr int kMaxTokens = 3;

// `cached_prefix`: the same 6 tokens after 2 full KV blocks, which every
// request but the first few finds in the prefix cache.
std::vector<int32_t> Prompt(bool cached_prefix = false) {
  std::vector<int32_t> p = cached_prefix ? MakePrompt(32, 4321) : std::vector<int32_t>{};
  const std::vector<int32_t> tail = MakePrompt(6, 1234);
  p.insert(p.end(), tail.begin(), tail.end());
  return p;
}

// `penalised`: with every logit processing step too (repetition, presence
// and frequency penalties, and a logit_bias over 40 tokens that raises some
// and lowers others), which the exact distribution applies as Warp does.
SamplingParams Sampling(uint64_t seed, bool penalised = false) {
  SamplingParams s;
  s.temperature = 0.8f;
  s.top_k = 6;  // each step has at most 6 outcomes: (t1, t2) at most 36 cells
  s.seed = seed;
  if (penalised) {
    s.repetition_penalty = 1.2f;
    s.presence_penalty = 1.0f;
    s.frequency_penalty = 0.7f;
    const int32_t vocab = SchedulerTestConfig().vocab_size;
    std::map<int32_t, float> bias;
    for (int i = 0; i < 40; ++i) bias[(i * 37 + 3) % vocab] = static_cast<float>((i % 7) - 3) * 0.8f;
    s.logit_bias.assign(bias.begin(), bias.end());
  }
  return s;
}

int64_t Key(int32_t a, int32_t b) { return int64_t{a} * 1000003 + b; }

int64_t Key3(int32_t a, int32_t b, int32_t c) { return Key(a, b) * 1000003 + c; }

// Requests per mode. Drawing them is cheap (the test model is tiny: ~0.1 ms
// a request), so N is large for power: see the negative control for what the test
// detects at this N.
constexpr int kRequests = 12000;

struct Exact {
  std::map<int64_t, double> t1, joint12, t3, joint123;
};

// A random Gemma 3 of the test model's vocabulary: window 4 (the 6-token
// prompt and its 3 outputs cross it), 2 local : 1 global layers, q/k norms,
// post-norms, GeGLU, scaled tied embeddings, a final soft cap.
const std::string& GemmaSamplingModel() {
  static const std::string path = [] {
    ModelConfig c = LlamaShape(48, 96, 3, 4, 2, SchedulerTestConfig().vocab_size, 160);
    c.arch = "gemma3";
    c.head_dim = 16;
    ApplyGemmaArch(c);
    c.tied_embeddings = true;
    c.norm_eps = 1e-6f;
    c.sliding_window = 4;
    c.swa_pattern = 3;
    c.rope_theta = 1e6f;
    c.rope_theta_local = 1e4f;
    // A final soft cap of 2 keeps the logits within [-2, 2]: without it this
    // random Gemma's distribution is so peaked that drafts are almost never
    // rejected and the residual path goes untested.
    c.final_softcap = 2.0f;
    const std::string p = TempDir() + "/sampling_gemma3.gguf";
    WriteRandomModel(c, ModelFormat::kGguf, p, /*seed=*/13, DType::kF32);
    return p;
  }();
  return path;
}

// `model`: "" for the scheduler test model, "gemma3" for GemmaSamplingModel,
// "moe" for the shared mixture-of-experts test model.
std::string SamplingModelPath(const std::string& model) {
  if (model == "moe") return SchedulerMoeTestModel();
  return model == "gemma3" ? GemmaSamplingModel() : SchedulerTestModel();
}

const Exact& ExactDistribution(bool cached_prefix = false, const std::string& model_name = "",
                               bool penalised = false) {
  static std::map<std::tuple<bool, std::string, bool>, Exact> cache;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(cached_prefix, model_name, penalised);
  const int32_t prompt_len = static_cast<int32_t>(Prompt(cached_prefix).size());
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const Exact exact = [&] {
    auto model = OpenModel(SamplingModelPath(model_name));
    LocalPipeline local(*model, {0, model->config().n_layers}, SliceOptions{16, 4096}, 1);
    const int dim = model->config().dim;
    uint64_t seq = 1;
    // Warp(logits after `history`): the distribution of the next token.
    auto next = [&](const std::vector<int32_t>& history) {
      std::vector<SlotRef> slots;
      for (int32_t i = 0; i < static_cast<int32_t>(history.size()); ++i) slots.push_back({seq, i});
      SliceOutput out;
      absl::Status st = local.Forward(slots, history, {}, &out);
      EXPECT_TRUE(st.ok()) << st;
      std::vector<float> logits(local.head().vocab_size());
      local.head().Logits(out.hidden.data() + (history.size() - 1) * dim, 1, logits.data());
      local.Release(seq++);
      return Warp(logits, Sampling(0, penalised), {history, prompt_len, {}});
    };
    Exact e;
    std::vector<int32_t> h = Prompt(cached_prefix);
    const TokenDistribution d1 = next(h);
    for (size_t i = 0; i < d1.ids.size(); ++i) {
      const int32_t t1 = d1.ids[i];
      e.t1[t1] += d1.probs[i];
      h.push_back(t1);
      const TokenDistribution d2 = next(h);
      for (size_t j = 0; j < d2.ids.size(); ++j) {
        const int32_t t2 = d2.ids[j];
        const double p12 = double{d1.probs[i]} * d2.probs[j];
        e.joint12[Key(t1, t2)] += p12;
        h.push_back(t2);
        const TokenDistribution d3 = next(h);
        for (size_t k = 0; k < d3.ids.size(); ++k) {
          e.t3[d3.ids[k]] += p12 * d3.probs[k];
          e.joint123[Key3(t1, t2, d3.ids[k])] += p12 * d3.probs[k];
        }
        h.pop_back();
      }
      h.pop_back();
    }
    return e;
  }();
  return cache.emplace(key, exact).first->second;
}

TEST(ExactDistribution, IsAProperNonDegenerateDistribution) {
  const Exact& e = ExactDistribution();
  double s12 = 0, s3 = 0;
  for (const auto& [k, p] : e.joint12) s12 += p;
  for (const auto& [k, p] : e.t3) s3 += p;
  EXPECT_NEAR(s12, 1.0, 1e-5);
  EXPECT_NEAR(s3, 1.0, 1e-5);
  // Sampling is not degenerate: several outcomes per step, so the test can
  // tell distributions apart.
  EXPECT_GE(e.t1.size(), 4u);
  EXPECT_GE(e.joint12.size(), 16u);
  double top = 0;
  for (const auto& [k, p] : e.t1) top = std::max(top, p);
  EXPECT_LT(top, 0.9);
}

// The penalised cases test something: their distribution is far from the
// plain one (total variation of the (t1, t2) joint).
TEST(ExactDistribution, PenaltiesAndBiasChangeIt) {
  const Exact& plain = ExactDistribution();
  const Exact& penalised = ExactDistribution(false, "", /*penalised=*/true);
  std::map<int64_t, double> diff;
  for (const auto& [k, p] : plain.joint12) diff[k] += p;
  for (const auto& [k, p] : penalised.joint12) diff[k] -= p;
  double tv = 0;
  for (const auto& [k, d] : diff) tv += std::abs(d) / 2;
  EXPECT_GT(tv, 0.2);
  double s = 0;
  for (const auto& [k, p] : penalised.joint12) s += p;
  EXPECT_NEAR(s, 1.0, 1e-5);
}

// Negative control (no engine): samples from a deliberately wrong
// distribution -- the exact one with the most likely t1's probability
// lowered by 0.1 (0.05) and that mass spread over the other first tokens in
// proportion -- are rejected by the same test at the same N; samples from
// the exact one are not. Deterministic (fixed seed).
TEST(ChiSquare, RejectsADistributionOffByATenth) {
  const Exact& e = ExactDistribution();
  int32_t top = -1;
  double p_top = -1;
  for (const auto& [t1, p] : e.t1) {
    if (p > p_top) top = static_cast<int32_t>(t1), p_top = p;
  }
  ASSERT_GT(p_top, 0.1);
  auto shifted = [&](double shift) {
    std::map<int64_t, double> wrong;
    for (const auto& [key, p] : e.joint12) {
      const auto t1 = static_cast<int32_t>(key / 1000003);
      wrong[key] = t1 == top ? p * (p_top - shift) / p_top : p * (1 - p_top + shift) / (1 - p_top);
    }
    return wrong;
  };
  auto draw = [](const std::map<int64_t, double>& dist, int64_t n, uint64_t seed) {
    std::vector<int64_t> keys;
    std::vector<double> weights;
    for (const auto& [k, p] : dist) keys.push_back(k), weights.push_back(p);
    std::mt19937_64 gen(seed);
    std::discrete_distribution<size_t> pick(weights.begin(), weights.end());
    std::map<int64_t, int64_t> counts;
    for (int64_t i = 0; i < n; ++i) ++counts[keys[pick(gen)]];
    return counts;
  };
  constexpr int64_t kN = kRequests;
  for (double shift : {0.1, 0.05}) {
    const ChiSquare bad = ChiSquareTest(e.joint12, draw(shifted(shift), kN, 99), kN);
    EXPECT_LT(bad.p, kAlpha) << "shift " << shift << ": chi2 " << bad.stat << " df " << bad.df
                             << bad.table;
  }
  const ChiSquare good = ChiSquareTest(e.joint12, draw(e.joint12, kN, 99), kN);
  EXPECT_GE(good.p, kAlpha) << "chi2 " << good.stat << " df " << good.df << good.table;
  // A wrong support is caught outright.
  std::map<int64_t, int64_t> outside = draw(e.joint12, 100, 5);
  int32_t t = 0;
  while (e.joint12.contains(Key(t, t))) ++t;
  ++outside[Key(t, t)];
  EXPECT_EQ(ChiSquareTest(e.joint12, outside, 101).p, 0);
}

// ---------------------------------------------------------------------------
// The engine, in every decoding mode.

struct ModeCase {
  std::string name;
  int n_stages;
  v1::DecodingPolicy mode;
  bool oracle;      // oracle drafter at alpha 0.5 instead of a head
  std::string ppsd;  // head kinds (HeadDir)
  std::string spd;
  int n_requests;
  bool cached_prefix = false;  // the prompt starts with blocks the prefix cache holds
  std::string model = "";      // "" (the scheduler test model), "gemma3" or "moe"
  bool penalised = false;      // Sampling(seed, /*penalised=*/true)
};

// gtest prints the case in ctest's log.
void PrintTo(const ModeCase& c, std::ostream* os) { *os << c.name; }

// The outputs of `c.n_requests` requests (seed = i) through the engine,
// counted per statistic, and the speculation counters.
struct Outputs {
  std::map<int64_t, int64_t> joint12, t3, joint123;
  int64_t drafted = 0, rejected = 0, accepted = 0, calls = 0, bad = 0;
};

// The three goodness-of-fit tests of a set of outputs: the (t1, t2) joint,
// the t3 marginal and the (t1, t2, t3) joint.
struct Fits {
  ChiSquare g12, g3, g123;
};
Fits FitAll(const Exact& exact, const Outputs& out, int64_t n) {
  return {ChiSquareTest(exact.joint12, out.joint12, n), ChiSquareTest(exact.t3, out.t3, n),
          ChiSquareTest(exact.joint123, out.joint123, n)};
}

Outputs DrawOutputs(InprocPipeline& p, const ModeCase& c, const std::vector<int32_t>& reference) {
  Outputs out;
  constexpr int kWindow = 64;  // requests in flight at once
  for (int base = 0; base < c.n_requests; base += kWindow) {
    std::vector<std::shared_ptr<scheduler::RequestStream>> streams;
    for (int i = base; i < std::min(c.n_requests, base + kWindow); ++i) {
      scheduler::RequestOptions r;
      r.prompt = Prompt(c.cached_prefix);
      r.sampling = Sampling(static_cast<uint64_t>(i), c.penalised);
      r.max_tokens = kMaxTokens;
      r.mode = c.mode;
      if (c.oracle) r.oracle = {true, 0.5, reference};
      auto s = p.engine().Submit(std::move(r));
      EXPECT_TRUE(s.ok()) << s.status();
      if (!s.ok()) {
        ++out.bad;
        continue;
      }
      streams.push_back(*std::move(s));
    }
    for (auto& s : streams) {
      const StreamResult got = Collect(*s);
      if (got.tokens.size() != kMaxTokens || got.last.finish != scheduler::FinishReason::kLength) {
        if (++out.bad <= 5) {
          ADD_FAILURE() << "request " << s->id() << ": " << got.tokens.size() << " tokens, finish "
                        << scheduler::FinishReasonName(got.last.finish) << " " << got.last.error;
        }
        continue;
      }
      EXPECT_EQ(got.last.mode, c.mode);
      ++out.joint12[Key(got.tokens[0], got.tokens[1])];
      ++out.t3[got.tokens[2]];
      ++out.joint123[Key3(got.tokens[0], got.tokens[1], got.tokens[2])];
      const scheduler::SpecStats& st = got.last.spec;
      out.drafted += st.draft_tokens;
      out.calls += st.drafts;
      out.rejected += st.rejected_tokens;
      out.accepted += st.accepted_tokens;
      EXPECT_EQ(st.accepted_tokens + st.rejected_tokens + st.discarded_tokens, st.draft_tokens);
    }
  }
  return out;
}

class SampledOutput : public ::testing::TestWithParam<ModeCase> {};

TEST_P(SampledOutput, MatchesTheExactDistribution) {
  ModeCase c = GetParam();
  // For investigating a suspicion at higher power: SPECLINE_SAMPLING_REQUESTS=N.
  if (const char* env = std::getenv("SPECLINE_SAMPLING_REQUESTS")) c.n_requests = std::atoi(env);
  const Exact& exact = ExactDistribution(c.cached_prefix, c.model, c.penalised);
  scheduler::EngineOptions o;
  o.spec.policy = scheduler::DraftGate::kAlways;
  o.spec.allow_oracle = true;
  if (!c.ppsd.empty()) o.spec.Of<scheduler::PpsdOptions>().head = HeadDir(c.ppsd, c.n_stages);
  if (c.spd == "recycle") {
    // The training-free drafter under SPD's timing.
    o.spec.Of<scheduler::SpdOptions>().drafter = "recycle";
  } else if (!c.spd.empty()) {
    o.spec.Of<scheduler::SpdOptions>().head = HeadDir(c.spd, c.n_stages);
  }
  if (c.mode == v1::DECODING_POLICY_PTP) {
    o.spec.Of<scheduler::PtpOptions>().head = HeadDir("ptp", c.n_stages);
  }
  InprocPipeline p(c.n_stages, o, InprocPipeline::kStageKvTokens, std::chrono::microseconds(0),
                   c.model.empty() ? "" : SamplingModelPath(c.model));

  // The oracle's reference: any fixed sequence does (verification is
  // lossless for every proposal); the greedy output makes its proposals
  // likely under p, so both the accept and the residual paths are taken.
  scheduler::RequestOptions greedy;
  greedy.prompt = Prompt(c.cached_prefix);
  greedy.max_tokens = kMaxTokens;
  const std::vector<int32_t> reference = Generate1(p.model(), greedy).tokens;

  const auto t0 = std::chrono::steady_clock::now();
  const Outputs out = DrawOutputs(p, c, reference);
  ASSERT_EQ(out.bad, 0);
  const int64_t drafted = out.drafted, rejected = out.rejected, accepted = out.accepted,
                calls = out.calls;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t n = c.n_requests;
  const auto [g12, g3, g123] = FitAll(exact, out, n);
  std::printf("[ %s ] %d requests in %.2f s; drafts %lld accepted %lld rejected %lld; "
              "(t1,t2): chi2 %.1f df %d p %.3g; t3: chi2 %.1f df %d p %.3g; "
              "(t1,t2,t3): chi2 %.1f df %d p %.3g\n",
              c.name.c_str(), c.n_requests, seconds, static_cast<long long>(drafted),
              static_cast<long long>(accepted), static_cast<long long>(rejected), g12.stat, g12.df,
              g12.p, g3.stat, g3.df, g3.p, g123.stat, g123.df, g123.p);
  EXPECT_EQ(g12.outside_support, 0) << "outputs the plain model cannot produce";
  EXPECT_EQ(g3.outside_support, 0) << "outputs the plain model cannot produce";
  EXPECT_GE(g12.p, kAlpha) << "(t1, t2) joint: chi2 " << g12.stat << " df " << g12.df << g12.table;
  EXPECT_GE(g3.p, kAlpha) << "t3 marginal: chi2 " << g3.stat << " df " << g3.df << g3.table;
  EXPECT_GE(g123.p, kAlpha) << "(t1, t2, t3) joint: chi2 " << g123.stat << " df " << g123.df
                            << g123.table;
  if (c.mode == v1::DECODING_POLICY_AUTOREGRESSIVE) {
    EXPECT_EQ(drafted, 0);
  } else if (c.mode == v1::DECODING_POLICY_PTP) {
    // PTP's tokens are the coupled samples at their own u whatever was
    // proposed (a random adapter's proposals rarely survive); every request
    // went through PTP calls (the prompt's, then one or more).
    EXPECT_GE(calls, 2 * n);
  } else {
    // The speculative paths were exercised: drafts verified, some accepted,
    // some rejected (each rejection samples from the residual max(0, p - q)).
    EXPECT_GT(drafted, n / 10) << "too few drafts to test speculation";
    EXPECT_GT(accepted, 0);
    EXPECT_GT(rejected, n / 20) << "too few rejections to test the residual path";
  }
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
  const auto stats = p.engine().Stats();
  EXPECT_EQ(stats.kv_free_tokens, stats.kv_capacity_tokens);
  if (c.cached_prefix) {
    // All but the first requests in flight, admitted before the prompt's
    // blocks were computed, started from the cache.
    EXPECT_GE(stats.prefix_cache_hits, uint64_t{32} * (n - 2 * 64));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, SampledOutput,
    ::testing::Values(
        ModeCase{"autoregressive", 2, v1::DECODING_POLICY_AUTOREGRESSIVE, false, "", "", kRequests},
        ModeCase{"spd_oracle", 2, v1::DECODING_POLICY_SPD, true, "", "", kRequests},
        ModeCase{"ppsd_oracle", 2, v1::DECODING_POLICY_PPSD, true, "", "", kRequests},
        ModeCase{"ppsd_layer_head", 2, v1::DECODING_POLICY_PPSD, false, "ppsd-layer", "", kRequests},
        ModeCase{"spd_v11_head", 2, v1::DECODING_POLICY_SPD, false, "", "spd-v11", kRequests},
        ModeCase{"ptp_adapter", 2, v1::DECODING_POLICY_PTP, false, "", "", kRequests},
        ModeCase{"recycle", 2, v1::DECODING_POLICY_RECYCLE, false, "", "", kRequests},
        ModeCase{"recycle_1stage", 1, v1::DECODING_POLICY_RECYCLE, false, "", "", kRequests},
        ModeCase{"spd_recycle", 2, v1::DECODING_POLICY_SPD, false, "", "recycle", kRequests},
        ModeCase{"spd_oracle_4stages", 4, v1::DECODING_POLICY_SPD, true, "", "", kRequests},
        ModeCase{"ppsd_layer_head_4stages", 4, v1::DECODING_POLICY_PPSD, false, "ppsd-layer", "",
                 kRequests},
        // The same with the prompt's first 2 blocks from the prefix cache
        // (the policies whose requests use it; docs/prefix_caching.md).
        ModeCase{"autoregressive_prefix_cached", 2, v1::DECODING_POLICY_AUTOREGRESSIVE, false, "",
                 "", kRequests, true},
        ModeCase{"spd_oracle_prefix_cached", 2, v1::DECODING_POLICY_SPD, true, "", "", kRequests,
                 true},
        ModeCase{"ptp_adapter_prefix_cached", 2, v1::DECODING_POLICY_PTP, false, "", "", kRequests,
                 true},
        ModeCase{"recycle_prefix_cached", 2, v1::DECODING_POLICY_RECYCLE, false, "", "", kRequests,
                 true},
        ModeCase{"spd_recycle_prefix_cached", 2, v1::DECODING_POLICY_SPD, false, "", "recycle",
                 kRequests, true},
        // Gemma 3 (sliding window shorter than prompt + outputs): the
        // training-free drafter's draft-then-verify, and SPD's oracle.
        ModeCase{"recycle_gemma3", 2, v1::DECODING_POLICY_RECYCLE, false, "", "", kRequests, false,
                 "gemma3"},
        ModeCase{"spd_oracle_gemma3", 2, v1::DECODING_POLICY_SPD, true, "", "", kRequests, false,
                 "gemma3"},
        // Penalties and logit_bias: the processed distribution, on the
        // autoregressive path and the speculative ones (the verifier, the
        // drafters' q and PTP's coupled sampling process rows alike).
        ModeCase{"autoregressive_penalised", 2, v1::DECODING_POLICY_AUTOREGRESSIVE, false, "", "",
                 kRequests, false, "", true},
        ModeCase{"spd_oracle_penalised", 2, v1::DECODING_POLICY_SPD, true, "", "", kRequests, false,
                 "", true},
        ModeCase{"ppsd_layer_head_penalised", 2, v1::DECODING_POLICY_PPSD, false, "ppsd-layer", "",
                 kRequests, false, "", true},
        ModeCase{"recycle_penalised", 2, v1::DECODING_POLICY_RECYCLE, false, "", "", kRequests,
                 false, "", true},
        ModeCase{"ptp_adapter_penalised", 2, v1::DECODING_POLICY_PTP, false, "", "", kRequests,
                 false, "", true}),
    [](const auto& info) { return info.param.name; });

// A mixture-of-experts model: verifying drafts routes each row as its own
// decode step would, so speculative sampling keeps the model's distribution.
INSTANTIATE_TEST_SUITE_P(
    MixtureOfExperts, SampledOutput,
    ::testing::Values(ModeCase{"spd_oracle_moe", 2, v1::DECODING_POLICY_SPD, true, "", "",
                               kRequests, false, "moe"},
                      ModeCase{"recycle_moe", 2, v1::DECODING_POLICY_RECYCLE, false, "", "",
                               kRequests, false, "moe"}),
    [](const auto& info) { return info.param.name; });

// ---------------------------------------------------------------------------
// Negative control through the engine: a deliberately broken pipeline.
//
// Stage 0 feeds the row at position prompt + 1 (the one that holds t2 and
// predicts t3) the token of the position before it, t1: an off-by-one in
// which token a row gets, the kind of bug a speculative pipeline's
// bookkeeping can have. t1 and t2 are untouched, so the (t1, t2) statistic
// cannot see it; t3 is drawn from P(t3 | prompt, t1, t1) instead of
// P(t3 | prompt, t1, t2). The t3 marginal and the (t1, t2, t3) joint must
// reject it at the same N, by the chi-square statistic itself (its upper
// tail, whatever the outside-support rule adds): when every request is hit,
// and when only one in 8 is (a bug that strikes now and then). Plain
// decoding, so the outputs (seed = i) and the p-values are the same on
// every run.
class OffByOneTokenStage : public SliceBackend {
 public:
  // Sequences whose id is a multiple of `every` are hit.
  OffByOneTokenStage(SliceBackend& real, int32_t pos, uint64_t every)
      : real_(real), pos_(pos), every_(every) {}
  int begin() const override { return real_.begin(); }
  int end() const override { return real_.end(); }
  const ModelConfig& config() const override { return real_.config(); }
  std::string device() const override { return real_.device(); }
  absl::Status Forward(const SliceInput& in, std::span<const int> tap_indices,
                       SliceOutput* out) override {
    std::vector<int32_t> tokens(in.tokens.begin(), in.tokens.end());
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < tokens.size() && i < in.slots.size(); ++i) {
        const SlotRef& slot = in.slots[i];
        if (slot.pos == pos_ - 1) previous_[slot.seq_id] = tokens[i];
        auto it = previous_.find(slot.seq_id);
        if (slot.pos == pos_ && it != previous_.end() && slot.seq_id % every_ == 0) {
          tokens[i] = it->second;
          ++corrupted_;
        }
      }
    }
    SliceInput broken = in;
    broken.tokens = tokens;
    return real_.Forward(broken, tap_indices, out);
  }
  void Truncate(uint64_t seq, int32_t length) override { real_.Truncate(seq, length); }
  void Release(uint64_t seq) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      previous_.erase(seq);
    }
    real_.Release(seq);
  }
  int32_t Length(uint64_t seq) const override { return real_.Length(seq); }
  const PagedKvCache& kv_cache() const override { return real_.kv_cache(); }
  PagedKvCache& mutable_kv_cache() override { return real_.mutable_kv_cache(); }
  int64_t corrupted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return corrupted_;
  }

 private:
  SliceBackend& real_;
  const int32_t pos_;
  const uint64_t every_;
  mutable std::mutex mu_;
  std::map<uint64_t, int32_t> previous_;
  int64_t corrupted_ = 0;
};

TEST(ChiSquare, T3AndJointStatisticsRejectABrokenEngine) {
  const Exact& exact = ExactDistribution();
  const int32_t t2_row = static_cast<int32_t>(Prompt().size()) + 1;
  for (uint64_t every : {uint64_t{1}, uint64_t{8}}) {
    SCOPED_TRACE("one request in " + std::to_string(every) + " hit");
    OffByOneTokenStage* broken = nullptr;
    InprocPipeline p(2, scheduler::EngineOptions{}, InprocPipeline::kStageKvTokens,
                     std::chrono::microseconds(0), "", true,
                     [&](int stage, SliceBackend& slice) -> std::unique_ptr<SliceBackend> {
                       if (stage != 0) return nullptr;
                       auto b = std::make_unique<OffByOneTokenStage>(slice, t2_row, every);
                       broken = b.get();
                       return b;
                     });
    ASSERT_NE(broken, nullptr);
    const ModeCase c{"broken", 2, v1::DECODING_POLICY_AUTOREGRESSIVE, false, "", "", kRequests};
    const Outputs out = DrawOutputs(p, c, {});
    ASSERT_EQ(out.bad, 0);
    EXPECT_NEAR(static_cast<double>(broken->corrupted()), static_cast<double>(kRequests) / every, 1.0);
    const auto [g12, g3, g123] = FitAll(exact, out, kRequests);
    std::printf("[ broken engine, 1 in %llu ] %lld rows corrupted; (t1,t2): chi2 %.1f df %d p %.3g; "
                "t3: chi2 %.1f df %d p %.3g (%d outside the support); (t1,t2,t3): chi2 %.1f df %d "
                "p %.3g (%d outside)\n",
                static_cast<unsigned long long>(every), static_cast<long long>(broken->corrupted()),
                g12.stat, g12.df, g12.p, g3.stat, g3.df, g3.p, g3.outside_support, g123.stat,
                g123.df, g123.p, g123.outside_support);
    // Invisible to the first two tokens...
    EXPECT_EQ(g12.outside_support, 0);
    EXPECT_GE(g12.p, kAlpha) << "(t1, t2) joint: chi2 " << g12.stat << " df " << g12.df
                             << g12.table;
    // ...caught by the t3 and (t1, t2, t3) statistics on their own.
    EXPECT_LT(ChiSquareUpperTail(g3.stat, g3.df), kAlpha)
        << "t3 marginal: chi2 " << g3.stat << " df " << g3.df << g3.table;
    EXPECT_LT(ChiSquareUpperTail(g123.stat, g123.df), kAlpha)
        << "(t1, t2, t3) joint: chi2 " << g123.stat << " df " << g123.df << g123.table;
  }
}

}  // namespace
}  // namespace specline::testing
