// Lossless verification (model/drafters/verify.h) and the oracle drafter.
//
// Each rejection-sampling case is checked twice: analytically, by enumerating
// the algorithm (every draft x with weight q(x), its accept branch and its
// residual branch) from the same building blocks VerifyDraft uses; and
// empirically, by running VerifyDraft on 200k fixed-seed drafts and testing
// the output histogram against p with a chi-square test at a 1e-3 false
// positive rate. Seeds are fixed, so the tests are deterministic, not flaky.
#include "model/drafters/verify.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/drafters/oracle_drafter.h"
#include "model/runtime/sampler.h"

namespace specline {
namespace {

constexpr int kTrials = 200000;
constexpr double kFalsePositive = 1e-3;

// Tokens with positive weight, normalised (weights indexed by token id).
TokenDistribution Dist(const std::vector<double>& w) {
  double sum = 0;
  for (double v : w) sum += v;
  TokenDistribution d;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] > 0) {
      d.ids.push_back(static_cast<int32_t>(i));
      d.probs.push_back(static_cast<float>(w[i] / sum));
    }
  }
  return d;
}

TokenDistribution OneHot(int32_t id) { return TokenDistribution{{id}, {1.0f}}; }

// Random weights over `vocab` tokens, each zeroed with probability zero_frac
// (at least one token stays).
std::vector<double> RandomWeights(Rng& rng, int vocab, double zero_frac) {
  std::vector<double> w(vocab);
  for (double& v : w) v = rng.Uniform() < zero_frac ? 0.0 : 0.05 + rng.Uniform();
  if (std::all_of(w.begin(), w.end(), [](double v) { return v == 0; })) w[vocab / 2] = 1.0;
  return w;
}

// P(chi2_k > x), exact closed forms for integer k (no special-function
// library needed): even k is a Poisson tail, odd k adds erfc.
double ChiSquareSurvival(double x, int k) {
  if (x <= 0) return 1.0;
  const double h = x / 2;
  double sum = 0;
  if (k % 2 == 0) {
    double term = 1;  // h^i / i!
    for (int i = 0; i < k / 2; ++i) {
      sum += term;
      term *= h / (i + 1);
    }
    return std::exp(-h) * sum;
  }
  for (int i = 0; i <= (k - 3) / 2; ++i) sum += std::pow(h, i + 0.5) / std::tgamma(i + 1.5);
  return std::erfc(std::sqrt(h)) + std::exp(-h) * sum;
}

TEST(ChiSquareSurvivalTest, KnownQuantiles) {
  // 0.999 quantiles of chi-square with 1, 2, 5 and 10 degrees of freedom.
  EXPECT_NEAR(ChiSquareSurvival(10.828, 1), 1e-3, 2e-6);
  EXPECT_NEAR(ChiSquareSurvival(13.816, 2), 1e-3, 2e-6);
  EXPECT_NEAR(ChiSquareSurvival(20.515, 5), 1e-3, 2e-6);
  EXPECT_NEAR(ChiSquareSurvival(29.588, 10), 1e-3, 2e-6);
  EXPECT_NEAR(ChiSquareSurvival(3.0, 2), std::exp(-1.5), 1e-12);
}

// Histogram of outputs over [0, vocab) against p: nothing outside p's
// support, and a chi-square p-value above the false positive rate.
void ExpectMatches(const std::vector<int64_t>& counts, const TokenDistribution& p,
                   const std::string& what) {
  int64_t n = 0;
  for (int64_t c : counts) n += c;
  double psum = 0;
  for (float v : p.probs) psum += v;
  double chi2 = 0;
  int cells = 0;
  for (size_t y = 0; y < counts.size(); ++y) {
    const double py = p.Prob(static_cast<int32_t>(y)) / psum;
    if (py == 0) {
      EXPECT_EQ(counts[y], 0) << what << ": token " << y << " is outside p's support";
      continue;
    }
    const double expected = py * n;
    chi2 += (counts[y] - expected) * (counts[y] - expected) / expected;
    ++cells;
  }
  if (cells < 2) return;  // one cell: the support check above is the test
  const double pvalue = ChiSquareSurvival(chi2, cells - 1);
  EXPECT_GT(pvalue, kFalsePositive) << what << ": chi2 = " << chi2 << " over " << cells
                                    << " cells";
}

double SumMin(const TokenDistribution& p, const TokenDistribution& q, int vocab) {
  double s = 0;
  for (int y = 0; y < vocab; ++y) s += std::min<double>(p.Prob(y), q.Prob(y));
  return s;
}

// Output distribution of VerifyDraft, enumerated: sum over drafts x ~ q of
// q(x) * (accept: point mass at x; reject: the residual).
std::vector<double> Enumerate(const TokenDistribution& p, const TokenDistribution& q, int vocab,
                              double* accept_rate) {
  std::vector<double> out(vocab, 0.0);
  const TokenDistribution r = ResidualDistribution(p, q);
  double acc = 0;
  for (size_t i = 0; i < q.ids.size(); ++i) {
    const int32_t x = q.ids[i];
    const double a = AcceptProbability(p, q, x);
    acc += q.probs[i] * a;
    out[x] += q.probs[i] * a;
    for (size_t j = 0; j < r.ids.size(); ++j) out[r.ids[j]] += q.probs[i] * (1 - a) * r.probs[j];
  }
  *accept_rate = acc;
  return out;
}

// Both checks for one (p, q) pair.
void CheckLossless(const TokenDistribution& p, const TokenDistribution& q, int vocab,
                   uint64_t seed, const std::string& what) {
  SCOPED_TRACE(what);
  const double sum_min = SumMin(p, q, vocab);

  double exact_accept = 0;
  const std::vector<double> exact = Enumerate(p, q, vocab, &exact_accept);
  for (int y = 0; y < vocab; ++y) EXPECT_NEAR(exact[y], p.Prob(y), 2e-6) << "token " << y;
  EXPECT_NEAR(exact_accept, sum_min, 2e-6);

  Rng draft_rng(seed);
  Rng verify_rng(seed ^ 0x5eed5eed5eedull);
  std::vector<int64_t> counts(vocab, 0);
  int64_t accepted = 0;
  for (int t = 0; t < kTrials; ++t) {
    const int32_t x = q.InverseCdf(draft_rng.Uniform());
    const VerifyResult r = VerifyDraft(p, q, x, verify_rng);
    ASSERT_GE(r.token, 0);
    ASSERT_LT(r.token, vocab);
    if (r.accepted) {
      ASSERT_EQ(r.token, x);
      ++accepted;
    }
    ++counts[r.token];
  }
  ExpectMatches(counts, p, what);
  // Acceptance is Binomial(N, sum_min): within 5 standard deviations (plus
  // float slack for the degenerate a = 0 or 1 cases).
  const double rate = static_cast<double>(accepted) / kTrials;
  const double a = std::clamp(sum_min, 0.0, 1.0);  // float sums may exceed 1
  const double sd = std::sqrt(a * (1 - a) / kTrials);
  EXPECT_NEAR(rate, sum_min, 5 * sd + 1e-6);
}

TEST(VerifyDraftTest, RandomFullSupport) {
  Rng rng(1);
  for (int i = 0; i < 3; ++i) {
    const int vocab = 5 + i;
    const TokenDistribution p = Dist(RandomWeights(rng, vocab, 0.0));
    const TokenDistribution q = Dist(RandomWeights(rng, vocab, 0.0));
    CheckLossless(p, q, vocab, 100 + i, "full support #" + std::to_string(i));
  }
}

TEST(VerifyDraftTest, RandomSparseSupports) {
  // Zeros in both: q = 0 where p > 0 and p = 0 where q > 0 both occur.
  Rng rng(2);
  for (int i = 0; i < 4; ++i) {
    const int vocab = 5 + i;
    const TokenDistribution p = Dist(RandomWeights(rng, vocab, 0.35));
    const TokenDistribution q = Dist(RandomWeights(rng, vocab, 0.35));
    CheckLossless(p, q, vocab, 200 + i, "sparse #" + std::to_string(i));
  }
}

TEST(VerifyDraftTest, QMissesTokensOfP) {
  // Tokens 0 and 4 only reachable through the residual.
  const TokenDistribution p = Dist({0.3, 0.1, 0.2, 0.15, 0.25, 0.0});
  const TokenDistribution q = Dist({0.0, 0.4, 0.3, 0.2, 0.0, 0.1});
  CheckLossless(p, q, 6, 300, "q misses p");
}

TEST(VerifyDraftTest, PMissesTokensOfQ) {
  // Drafts of tokens 1, 5 and 6 are always rejected.
  const TokenDistribution p = Dist({0.2, 0.0, 0.3, 0.1, 0.4, 0.0, 0.0});
  const TokenDistribution q = Dist({0.1, 0.3, 0.1, 0.1, 0.1, 0.2, 0.1});
  CheckLossless(p, q, 7, 301, "p misses q");
}

TEST(VerifyDraftTest, PEqualsQAlwaysAccepts) {
  const TokenDistribution p = Dist({0.05, 0.2, 0.1, 0.15, 0.05, 0.25, 0.1, 0.1});
  CheckLossless(p, p, 8, 302, "p == q");
  // The residual has no mass: it falls back to p.
  const TokenDistribution r = ResidualDistribution(p, p);
  EXPECT_EQ(r.ids, p.ids);
  EXPECT_EQ(r.probs, p.probs);
  Rng rng(7);
  for (int32_t x : p.ids) EXPECT_TRUE(VerifyDraft(p, p, x, rng).accepted);
}

TEST(VerifyDraftTest, OneHotDraftIsLossless) {
  // A deterministic drafter: q = one-hot(x). Accept with p(x), else p
  // restricted to y != x.
  const TokenDistribution p = Dist({0.1, 0.35, 0.05, 0.2, 0.0, 0.3});
  for (int32_t x : {1, 4}) {  // one in p's support, one outside it
    const TokenDistribution q = OneHot(x);
    EXPECT_DOUBLE_EQ(AcceptProbability(p, q, x), p.Prob(x));
    const TokenDistribution r = ResidualDistribution(p, q);
    for (int32_t y = 0; y < 6; ++y) {
      const double want = y == x ? 0.0 : p.Prob(y) / (1.0 - p.Prob(x));
      EXPECT_NEAR(r.Prob(y), want, 1e-6) << "x " << x << " y " << y;
    }
    CheckLossless(p, q, 6, 400 + x, "one-hot q at " + std::to_string(x));
  }
}

TEST(VerifyDraftTest, OneHotTargetSampledDraft) {
  // Greedy-like target (p one-hot) with a spread draft: output is always
  // the target token.
  const TokenDistribution p = OneHot(3);
  const TokenDistribution q = Dist({0.2, 0.2, 0.1, 0.3, 0.2});
  CheckLossless(p, q, 5, 500, "one-hot p");
}

TEST(VerifyDraftTest, WarpedDistributions) {
  // p and q from the same warping of different logits (the draft's are the
  // target's plus noise), as the scheduler will produce them.
  std::vector<SamplingParams> settings(5);
  settings[0].temperature = 1.0f;
  settings[1].temperature = 0.7f;
  settings[1].top_k = 5;
  settings[2].temperature = 1.3f;
  settings[2].top_p = 0.8f;
  settings[3].temperature = 0.9f;
  settings[3].top_k = 8;
  settings[3].top_p = 0.9f;
  settings[3].min_p = 0.05f;
  settings[4].temperature = 1.0f;
  settings[4].repetition_penalty = 1.3f;
  const std::vector<int32_t> history = {2, 5, 5, 11};
  Rng rng(3);
  for (size_t s = 0; s < settings.size(); ++s) {
    const int vocab = 16;
    std::vector<float> target(vocab), draft(vocab);
    for (int i = 0; i < vocab; ++i) {
      target[i] = static_cast<float>(4 * rng.Uniform() - 2);
      draft[i] = target[i] + static_cast<float>(2 * rng.Uniform() - 1);
    }
    const TokenDistribution p = Warp(target, settings[s], {history, 0, {}});
    const TokenDistribution q = Warp(draft, settings[s], {history, 0, {}});
    CheckLossless(p, q, vocab, 600 + s, "warp setting " + std::to_string(s));
  }
}

TEST(VerifyDraftTest, GreedyDistributionsMatchVerifyGreedy) {
  // Greedy warping gives one-hot p and q: VerifyDraft then is VerifyGreedy.
  Rng rng(4);
  for (int32_t a = 0; a < 4; ++a) {
    for (int32_t x = 0; x < 4; ++x) {
      const VerifyResult d = VerifyDraft(OneHot(a), OneHot(x), x, rng);
      const VerifyResult g = VerifyGreedy(a, x);
      EXPECT_EQ(d.accepted, g.accepted);
      EXPECT_EQ(d.token, g.token);
    }
  }
}

TEST(VerifyGreedyTest, AcceptsExactMatchOnly) {
  VerifyResult r = VerifyGreedy(7, 7);
  EXPECT_TRUE(r.accepted);
  EXPECT_EQ(r.token, 7);
  r = VerifyGreedy(7, 3);
  EXPECT_FALSE(r.accepted);
  EXPECT_EQ(r.token, 7);
  r = VerifyGreedy(0, 1);
  EXPECT_FALSE(r.accepted);
  EXPECT_EQ(r.token, 0);
}

TEST(VerifyDraftTest, RejectsDraftOutsideQ) {
  const TokenDistribution p = Dist({0.5, 0.5, 0.0});
  const TokenDistribution q = Dist({0.0, 0.6, 0.4});
  Rng rng(5);
  EXPECT_THROW(VerifyDraft(p, q, 0, rng), std::invalid_argument);    // q(0) = 0
  EXPECT_THROW(VerifyDraft(p, q, 9, rng), std::invalid_argument);    // not in vocab
  EXPECT_THROW(AcceptProbability(p, q, 0), std::invalid_argument);
  EXPECT_THROW(VerifyDraft(TokenDistribution{}, q, 1, rng), std::invalid_argument);
  EXPECT_NO_THROW(VerifyDraft(p, q, 2, rng));  // p(2) = 0 is fine: rejected
}

TEST(VerifyDraftTest, ConsumesOneUniformOnAcceptTwoOnReject) {
  const TokenDistribution p = Dist({0.3, 0.3, 0.4});
  const TokenDistribution q = Dist({0.6, 0.2, 0.2});
  Rng rng(6);
  int accepts = 0, rejects = 0;
  for (int t = 0; t < 200; ++t) {
    Rng before = rng;
    const VerifyResult r = VerifyDraft(p, q, 0, rng);
    before.Next();
    if (!r.accepted) before.Next();
    EXPECT_EQ(before.Next(), Rng(rng).Next()) << "trial " << t;
    (r.accepted ? accepts : rejects)++;
  }
  EXPECT_GT(accepts, 0);
  EXPECT_GT(rejects, 0);
}

TEST(VerifyDraftTest, DeterministicBySeed) {
  const TokenDistribution p = Dist({0.1, 0.2, 0.3, 0.4});
  const TokenDistribution q = Dist({0.4, 0.3, 0.2, 0.1});
  Rng a(42), b(42);
  for (int t = 0; t < 1000; ++t) {
    const int32_t x = t % 4;
    const VerifyResult ra = VerifyDraft(p, q, x, a);
    const VerifyResult rb = VerifyDraft(p, q, x, b);
    ASSERT_EQ(ra.accepted, rb.accepted);
    ASSERT_EQ(ra.token, rb.token);
  }
}

TEST(OracleDrafterTest, AcceptanceIsAlphaAndLiesAreValid) {
  constexpr int kVocab = 10;
  constexpr int kN = 100000;
  for (double alpha : {0.0, 0.3, 0.7, 1.0}) {
    SCOPED_TRACE(alpha);
    OracleDrafter oracle(alpha, 11);
    Rng truth(12);
    int64_t truthful = 0, greedy_accepts = 0;
    for (int t = 0; t < kN; ++t) {
      const int32_t true_token = static_cast<int32_t>(truth.Uniform() * kVocab);
      const int32_t x = oracle.Propose(true_token, kVocab);
      ASSERT_GE(x, 0);
      ASSERT_LT(x, kVocab);
      if (x == true_token) ++truthful;
      // Greedy verification against the true token accepts exactly the
      // truthful proposals.
      if (VerifyGreedy(true_token, x).accepted) ++greedy_accepts;
    }
    EXPECT_EQ(greedy_accepts, truthful);
    const double sd = std::sqrt(alpha * (1 - alpha) / kN);
    EXPECT_NEAR(static_cast<double>(truthful) / kN, alpha, 5 * sd);
  }
}

TEST(OracleDrafterTest, WrongProposalsAreUniformOverOtherTokens) {
  constexpr int kVocab = 8;
  OracleDrafter oracle(0.3, 13);
  std::vector<int64_t> counts(kVocab, 0);
  for (int t = 0; t < kTrials; ++t) {
    const int32_t x = oracle.Propose(3, kVocab);
    if (x != 3) ++counts[x];
  }
  std::vector<double> w(kVocab, 1.0);
  w[3] = 0;
  ExpectMatches(counts, Dist(w), "oracle lies");
  // The edges are reachable.
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[kVocab - 1], 0);
  OracleDrafter edge(0.0, 14);
  for (int t = 0; t < 100; ++t) {
    EXPECT_EQ(edge.Propose(0, 2), 1);
    EXPECT_EQ(edge.Propose(1, 2), 0);
  }
}

TEST(OracleDrafterTest, DeterministicBySeed) {
  OracleDrafter a(0.5, 99), b(0.5, 99), c(0.5, 100);
  bool differs = false;
  for (int t = 0; t < 1000; ++t) {
    const int32_t true_token = t % 50;
    const int32_t xa = a.Propose(true_token, 50);
    ASSERT_EQ(xa, b.Propose(true_token, 50));
    if (xa != c.Propose(true_token, 50)) differs = true;
  }
  EXPECT_TRUE(differs);
}

TEST(OracleDrafterTest, RejectsBadArguments) {
  EXPECT_THROW(OracleDrafter(-0.1, 1), std::invalid_argument);
  EXPECT_THROW(OracleDrafter(1.5, 1), std::invalid_argument);
  EXPECT_THROW(OracleDrafter(std::nan(""), 1), std::invalid_argument);
  OracleDrafter o(0.5, 1);
  EXPECT_THROW(o.Propose(0, 1), std::invalid_argument);
  EXPECT_THROW(o.Propose(-1, 10), std::invalid_argument);
  EXPECT_THROW(o.Propose(10, 10), std::invalid_argument);
}

TEST(OracleDrafterTest, SampledVerificationOfOracleIsLossless) {
  // Sampling mode: the true token is itself a draw from p, the oracle's
  // proposal is a point mass, verified with q = one-hot(proposal). The
  // output must follow p even though the proposal is correlated with a
  // sample of p; acceptance is E[p(proposal)], not alpha.
  const TokenDistribution p = Dist({0.05, 0.3, 0.1, 0.25, 0.0, 0.2, 0.1});
  constexpr int kVocab = 7;
  OracleDrafter oracle(0.6, 21);
  Rng truth(22), verify(23);
  std::vector<int64_t> counts(kVocab, 0);
  for (int t = 0; t < kTrials; ++t) {
    const int32_t true_token = p.InverseCdf(truth.Uniform());
    const int32_t x = oracle.Propose(true_token, kVocab);
    const VerifyResult r = VerifyDraft(p, OneHot(x), x, verify);
    ++counts[r.token];
  }
  ExpectMatches(counts, p, "oracle, sampled");
}

}  // namespace
}  // namespace specline
