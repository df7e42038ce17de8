#include "model/runtime/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <utility>
#include <vector>

#include "model/splitmix64.h"

namespace specline {
namespace {

std::vector<float> Logits() { return {1.0f, 3.0f, -2.0f, 2.5f, 0.0f, 3.0f, -1.0f, 0.5f}; }

// Independent reference of the warping: softmax at T, then filters by rank.
std::vector<double> Reference(const std::vector<float>& z, const SamplingParams& p) {
  const size_t n = z.size();
  std::vector<double> prob(n);
  double mx = *std::max_element(z.begin(), z.end()), sum = 0;
  for (size_t i = 0; i < n; ++i) sum += prob[i] = std::exp((z[i] - mx) / p.temperature);
  for (double& v : prob) v /= sum;
  std::vector<size_t> rank(n);
  std::iota(rank.begin(), rank.end(), 0);
  std::stable_sort(rank.begin(), rank.end(), [&](size_t a, size_t b) { return z[a] > z[b]; });
  std::vector<bool> keep(n, true);
  if (p.top_k > 0) {
    for (size_t r = p.top_k; r < n; ++r) keep[rank[r]] = false;
  }
  // top-k renormalises before top-p sees the mass.
  double kept_mass = 0;
  for (size_t i = 0; i < n; ++i) kept_mass += keep[i] ? prob[i] : 0;
  double cum = 0;
  bool reached = false;
  for (size_t r = 0; r < n; ++r) {
    size_t i = rank[r];
    if (!keep[i]) continue;
    if (reached) keep[i] = false;
    cum += prob[i] / kept_mass;
    if (cum >= p.top_p) reached = true;
  }
  double top = 0;
  for (size_t i = 0; i < n; ++i) top = std::max(top, keep[i] ? prob[i] : 0);
  for (size_t i = 0; i < n; ++i) {
    if (keep[i] && prob[i] < p.min_p * top) keep[i] = false;
  }
  double total = 0;
  for (size_t i = 0; i < n; ++i) total += keep[i] ? prob[i] : 0;
  std::vector<double> out(n, 0);
  for (size_t i = 0; i < n; ++i) out[i] = keep[i] ? prob[i] / total : 0;
  return out;
}

void ExpectMatchesReference(const SamplingParams& p) {
  TokenDistribution d = Warp(Logits(), p, {});
  std::vector<double> ref = Reference(Logits(), p);
  EXPECT_TRUE(std::is_sorted(d.ids.begin(), d.ids.end()));
  for (int32_t id = 0; id < 8; ++id) {
    EXPECT_NEAR(d.Prob(id), ref[id], 1e-6) << "token " << id;
  }
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  SamplingParams p;
  TokenDistribution d = Warp(Logits(), p, {});
  ASSERT_EQ(d.ids.size(), 1u);
  EXPECT_EQ(d.ids[0], 1);  // 1 and 5 tie at 3.0
  Rng rng(0);
  EXPECT_EQ(Sample(Logits(), p, {}, rng), 1);
}

TEST(Sampler, TemperatureOnly) { ExpectMatchesReference({.temperature = 0.7f}); }
TEST(Sampler, TopK) { ExpectMatchesReference({.temperature = 1.0f, .top_k = 3}); }
TEST(Sampler, TopP) { ExpectMatchesReference({.temperature = 1.3f, .top_p = 0.8f}); }
TEST(Sampler, MinP) { ExpectMatchesReference({.temperature = 1.0f, .min_p = 0.2f}); }
TEST(Sampler, AllFilters) {
  ExpectMatchesReference({.temperature = 0.9f, .top_k = 5, .top_p = 0.9f, .min_p = 0.05f});
}

TEST(Sampler, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  std::vector<float> z = Logits();
  std::vector<int32_t> history = {1, 1, 2};
  ApplyRepetitionPenalty(z, 2.0f, history);
  EXPECT_FLOAT_EQ(z[1], 1.5f);   // applied once despite two occurrences
  EXPECT_FLOAT_EQ(z[2], -4.0f);
  EXPECT_FLOAT_EQ(z[0], 1.0f);
  SamplingParams p{.repetition_penalty = 2.0f};
  EXPECT_EQ(Warp(Logits(), p, {history, 0, {}}).ids[0], 5);  // 1 is penalised, 5 wins
}

TEST(Sampler, SameSeedSameTokens) {
  SamplingParams p{.temperature = 1.0f, .seed = 42};
  Rng a(p.seed), b(p.seed), c(p.seed + 1);
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 200; ++i) {
    sa.push_back(Sample(Logits(), p, {}, a));
    sb.push_back(Sample(Logits(), p, {}, b));
    sc.push_back(Sample(Logits(), p, {}, c));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(Sampler, RngStreamIsPinned) {
  // Seeded generations are part of the API contract, so the stream is
  // pinned to published values, not to itself. Rng is xoshiro256** (Blackman
  // and Vigna, https://prng.di.unimi.it/xoshiro256starstar.c) whose state is
  // four outputs of splitmix64 (https://prng.di.unimi.it/splitmix64.c) from
  // the seed, the seeding those authors recommend. The numbers below come
  // from a separate 20-line Python transcription of both reference C files
  // (arbitrary-precision ints masked to 64 bits) that also reproduces the
  // xoshiro256** reference vector from state {1, 2, 3, 4} (11520, 0,
  // 1509978240, 1215971899390074240, ...); splitmix64's outputs from 0 and
  // the xoshiro256** streams for seeds 0, 1 and 42 are the ones other
  // implementations publish as known answers.
  uint64_t state = 0;
  EXPECT_EQ(SplitMix64(state), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64(state), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(SplitMix64(state), 0x06C45D188009454Full);
  EXPECT_EQ(SplitMix64(state), 0xF88BB8A8724C81ECull);

  const std::pair<uint64_t, std::vector<uint64_t>> streams[] = {
      {0, {0x99EC5F36CB75F2B4ull, 0xBF6E1F784956452Aull, 0x1A5F849D4933E6E0ull,
           0x6AA594F1262D2D2Cull, 0xBBA5AD4A1F842E59ull, 0xFFEF8375D9EBCACAull,
           0x6C160DEED2F54C98ull, 0x8920AD648FC30A3Full}},
      {1, {0xB3F2AF6D0FC710C5ull, 0x853B559647364CEAull, 0x92F89756082A4514ull,
           0x642E1C7BC266A3A7ull}},
      {42, {0x15780B2E0C2EC716ull, 0x6104D9866D113A7Eull, 0xAE17533239E499A1ull,
            0xECB8AD4703B360A1ull}},
  };
  for (const auto& [seed, want] : streams) {
    Rng r(seed);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(r.Next(), want[i]) << "seed " << seed << " #" << i;
  }
  // Uniform() is the top 53 bits of Next() times 2^-53: the same stream as
  // doubles (hex literals: exact).
  Rng u(0);
  EXPECT_EQ(u.Uniform(), 0x1.33d8be6d96ebep-1);   // 0.6012629994179048
  EXPECT_EQ(u.Uniform(), 0x1.7edc3ef092ac8p-1);   // 0.7477740925472398
  EXPECT_EQ(u.Uniform(), 0x1.a5f849d4933e0p-4);   // 0.10301998939503632
  EXPECT_EQ(u.Uniform(), 0x1.aa9653c498b4ap-2);   // 0.4165890778296456
  for (int i = 0; i < 1000; ++i) {
    const double x = u.Uniform();
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
  }
}

TEST(Sampler, FrequenciesFollowTheWarpedDistribution) {
  // Deterministic seed, so this is not flaky: a chi-square test that the
  // draws follow Warp's probabilities (p > 0.001 threshold, 7 dof).
  SamplingParams p{.temperature = 1.0f, .seed = 7};
  TokenDistribution d = Warp(Logits(), p, {});
  Rng rng(p.seed);
  const int n = 40000;
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) ++counts[Sample(Logits(), p, {}, rng)];
  double chi2 = 0;
  for (size_t i = 0; i < d.ids.size(); ++i) {
    const double expect = n * d.probs[i];
    const double diff = counts[d.ids[i]] - expect;
    chi2 += diff * diff / expect;
  }
  EXPECT_LT(chi2, 24.32);  // chi-square(7) at p = 0.001
}

TEST(Sampler, InverseCdfFollowsVocabularyOrder) {
  TokenDistribution d{{2, 5, 9}, {0.25f, 0.5f, 0.25f}};
  EXPECT_EQ(d.InverseCdf(0.0), 2);
  EXPECT_EQ(d.InverseCdf(0.2499), 2);
  EXPECT_EQ(d.InverseCdf(0.25), 5);
  EXPECT_EQ(d.InverseCdf(0.7499), 5);
  EXPECT_EQ(d.InverseCdf(0.9999999), 9);
  EXPECT_EQ(d.Prob(5), 0.5f);
  EXPECT_EQ(d.Prob(4), 0.0f);
}

TEST(Sampler, ValidateNamesTheField) {
  EXPECT_NE(SamplingParams{.temperature = -1}.Validate().find("temperature"), std::string::npos);
  EXPECT_NE(SamplingParams{.top_p = 0}.Validate().find("top_p"), std::string::npos);
  EXPECT_NE(SamplingParams{.top_k = -2}.Validate().find("top_k"), std::string::npos);
  EXPECT_NE(SamplingParams{.min_p = 2}.Validate().find("min_p"), std::string::npos);
  EXPECT_TRUE(SamplingParams{}.Validate().empty());
}

}  // namespace
}  // namespace specline
