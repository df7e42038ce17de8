// The training-free drafters (model/drafters): top-k against a sort, prompt
// lookup's match rules, the recycling matrix's chains, and the combined
// drafter's preference order and counters.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "model/drafters/prompt_lookup.h"
#include "model/drafters/token_recycling.h"
#include "model/drafters/top_k.h"
#include "model/drafters/training_free_drafter.h"

namespace specline {
namespace {

using Ids = std::vector<int32_t>;

// ---- TopK ----

Ids SortedTopK(const std::vector<float>& row, int k) {
  Ids ids;
  for (int32_t i = 0; i < static_cast<int32_t>(row.size()); ++i) {
    if (!std::isnan(row[i])) ids.push_back(i);
  }
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
  ids.resize(std::min<size_t>(ids.size(), k));
  return ids;
}

TEST(DraftersTopK, MatchesSortOnRandomRowsWithTies) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    const int vocab = 1 + static_cast<int>(rng() % 50000);
    // Integer-valued logits in a small range: many ties, resolved by id.
    const int range = 1 + static_cast<int>(rng() % 40);
    std::vector<float> row(vocab);
    for (float& v : row) v = static_cast<float>(static_cast<int>(rng() % range) - range / 2);
    for (int k : {1, 2, 5, 8, 16}) {
      EXPECT_EQ(TopK(row, k), SortedTopK(row, k)) << "vocab " << vocab << " k " << k;
    }
  }
}

TEST(DraftersTopK, ContinuousValuesAndShortRows) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g;
  std::vector<float> row(49152);
  for (float& v : row) v = g(rng);
  EXPECT_EQ(TopK(row, 8), SortedTopK(row, 8));
  EXPECT_EQ(TopK(std::vector<float>{1, 3, 2}, 8), (Ids{1, 2, 0}));  // k > vocab
  EXPECT_TRUE(TopK(std::vector<float>{}, 4).empty());
  EXPECT_TRUE(TopK(std::vector<float>{1, 2}, 0).empty());
}

TEST(DraftersTopK, TiesGoToLowerIdAndNansAreSkipped) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(TopK(std::vector<float>{5, 5, 5, 5}, 2), (Ids{0, 1}));
  EXPECT_EQ(TopK(std::vector<float>{1, 5, 2, 5}, 3), (Ids{1, 3, 2}));
  EXPECT_EQ(TopK(std::vector<float>{nan, 1, nan, 2}, 3), (Ids{3, 1}));
  EXPECT_EQ(TopK(std::vector<float>{-1e30f, -std::numeric_limits<float>::infinity()}, 2),
            (Ids{0, 1}));
}

// ---- PromptLookup ----

TEST(DraftersPromptLookup, NoMatch) {
  EXPECT_TRUE(PromptLookup(Ids{1, 2, 3, 4, 5}, 1, 3, 4).empty());
  EXPECT_TRUE(PromptLookup(Ids{}, 1, 3, 4).empty());
  EXPECT_TRUE(PromptLookup(Ids{7}, 1, 3, 4).empty());
  // The last two tokens never occurred together before: no 2-gram match
  // even though the last token alone did.
  EXPECT_TRUE(PromptLookup(Ids{1, 9, 5, 2, 9}, 2, 3, 4).empty());
  EXPECT_EQ(PromptLookup(Ids{1, 9, 5, 2, 9}, 1, 3, 4), (Ids{5, 2, 9}));
  // Bad arguments.
  EXPECT_TRUE(PromptLookup(Ids{1, 2, 1, 2}, 1, 3, 0).empty());
  EXPECT_TRUE(PromptLookup(Ids{1, 2, 1, 2}, 0, 3, 2).empty());
  EXPECT_TRUE(PromptLookup(Ids{1, 2, 1, 2}, 3, 2, 2).empty());
}

TEST(DraftersPromptLookup, LongestNgramWins) {
  // Suffix [7 8 9]. A recent occurrence of [8 9] (followed by 50) and an
  // older occurrence of [7 8 9] (followed by 10 11): the 3-gram wins.
  const Ids ctx = {7, 8, 9, 10, 11, 12, 8, 9, 50, 51, 7, 8, 9};
  EXPECT_EQ(PromptLookup(ctx, 1, 3, 2), (Ids{10, 11}));
  // With max_ngram 2 both are 2-gram matches: the most recent wins.
  EXPECT_EQ(PromptLookup(ctx, 1, 2, 2), (Ids{50, 51}));
}

TEST(DraftersPromptLookup, MostRecentOccurrenceWins) {
  const Ids ctx = {4, 5, 1, 2, 4, 5, 3, 3, 4, 5};
  EXPECT_EQ(PromptLookup(ctx, 2, 2, 3), (Ids{3, 3, 4}));
  // A longer match bound changes nothing when no longer match exists.
  EXPECT_EQ(PromptLookup(ctx, 2, 5, 3), (Ids{3, 3, 4}));
}

TEST(DraftersPromptLookup, ProposalClippedAtContextEnd) {
  // [1 2] last occurred right before the suffix: only what lies between it
  // and the end can be proposed.
  EXPECT_EQ(PromptLookup(Ids{1, 2, 3, 1, 2}, 2, 2, 5), (Ids{3, 1, 2}));
  // A run of one token: the occurrence ending one before the end.
  EXPECT_EQ(PromptLookup(Ids{6, 6, 6, 6}, 2, 3, 5), (Ids{6}));
  // An occurrence at the very start of the context counts.
  EXPECT_EQ(PromptLookup(Ids{1, 2, 3, 4, 9, 1, 2}, 2, 4, 2), (Ids{3, 4}));
}

TEST(DraftersPromptLookup, MatchesBruteForceOnRandomContexts) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int len = 1 + static_cast<int>(rng() % 60);
    Ids ctx(len);
    for (int32_t& t : ctx) t = static_cast<int32_t>(rng() % 4);
    const int min_n = 1 + static_cast<int>(rng() % 3), max_n = min_n + static_cast<int>(rng() % 3);
    const int n = 1 + static_cast<int>(rng() % 6);
    // Reference: for each length from the longest, the most recent start.
    Ids want;
    for (int m = max_n; m >= min_n && want.empty(); --m) {
      if (m >= len) continue;
      for (int s = len - m - 1; s >= 0; --s) {
        if (std::equal(ctx.begin() + s, ctx.begin() + s + m, ctx.end() - m)) {
          want.assign(ctx.begin() + s + m, ctx.begin() + std::min(len, s + m + n));
          break;
        }
      }
    }
    EXPECT_EQ(PromptLookup(ctx, min_n, max_n, n), want) << "trial " << trial;
  }
}

// ---- TokenRecycling ----

TEST(DraftersTokenRecycling, UpdateAndDraftChain) {
  TokenRecycling tr(100, 3);
  EXPECT_TRUE(tr.Draft(Ids{5}, 4).empty());  // never seen
  tr.Update(5, Ids{6, 7, 8});
  tr.Update(6, Ids{9});
  tr.Update(9, Ids{5, 1});
  EXPECT_EQ(tr.Draft(Ids{1, 2, 5}, 1), (Ids{6}));
  EXPECT_EQ(tr.Draft(Ids{5}, 5), (Ids{6, 9, 5, 6, 9}));  // cycles are followed
  EXPECT_EQ(tr.Draft(Ids{9}, 2), (Ids{5, 6}));
  EXPECT_EQ(tr.Candidates(5), (Ids{6, 7, 8}));
  EXPECT_EQ(tr.Candidates(9), (Ids{5, 1}));
  EXPECT_TRUE(tr.Draft(Ids{}, 3).empty());
  EXPECT_TRUE(tr.Draft(Ids{5}, 0).empty());
  // The chain stops at a token never updated.
  tr.Update(40, Ids{41});
  EXPECT_EQ(tr.Draft(Ids{40}, 4), (Ids{41}));
}

TEST(DraftersTokenRecycling, LatestUpdateReplacesRowAndKeepsK) {
  TokenRecycling tr(100, 2);
  tr.Update(3, Ids{4, 5, 6, 7});  // only the first k are kept
  EXPECT_EQ(tr.Candidates(3), (Ids{4, 5}));
  tr.Update(3, Ids{8});  // a shorter list clears the rest of the row
  EXPECT_EQ(tr.Candidates(3), (Ids{8}));
  EXPECT_EQ(tr.Draft(Ids{3}, 1), (Ids{8}));
  tr.Update(3, Ids{-1, 200, 9});  // out-of-range candidates are dropped
  EXPECT_EQ(tr.Candidates(3), (Ids{9}));
  tr.Update(-1, Ids{1});  // out-of-range inputs are ignored
  tr.Update(100, Ids{1});
  EXPECT_TRUE(tr.Seen(3));
  tr.Clear();
  EXPECT_FALSE(tr.Seen(3));
  EXPECT_TRUE(tr.Draft(Ids{3}, 2).empty());
}

TEST(DraftersTokenRecycling, EntryWidthByVocab) {
  // uint16 entries while every id fits below the empty marker, int32 above.
  EXPECT_EQ(TokenRecycling(49152, 8).bytes(), size_t{49152} * 8 * 2);
  EXPECT_EQ(TokenRecycling(65535, 8).bytes(), size_t{65535} * 8 * 2);
  EXPECT_EQ(TokenRecycling(65536, 8).bytes(), size_t{65536} * 8 * 4);
  EXPECT_LT(TokenRecycling(49152, 8).bytes(), size_t{2} << 20);
  // The largest id of each width round-trips.
  TokenRecycling narrow(65535, 2), wide(128256, 2);
  narrow.Update(65534, Ids{65534, 0});
  wide.Update(128255, Ids{128255, 65535});
  EXPECT_EQ(narrow.Candidates(65534), (Ids{65534, 0}));
  EXPECT_EQ(wide.Candidates(128255), (Ids{128255, 65535}));
}

// ---- TrainingFreeDrafter ----

TrainingFreeDrafterOptions Opts() {
  TrainingFreeDrafterOptions o;
  o.vocab_size = 100;
  o.k = 4;
  o.num_drafts = 3;
  o.min_ngram = 2;
  o.max_ngram = 3;
  return o;
}

TEST(DraftersCombined, PromptLookupIsPreferredOverRecycling) {
  TrainingFreeDrafter d(Opts());
  const std::shared_ptr<DrafterMemory> mem = d.MemoryFor("");
  d.ObserveTopK(*mem, 2, Ids{50});
  d.ObserveTopK(*mem, 50, Ids{51});
  d.ObserveTopK(*mem, 51, Ids{52});
  // [1 2] occurred before, followed by 3 4 5: lookup wins over M[2] = 50.
  DraftProposal got = d.Propose(*mem, Ids{1, 2, 3, 4, 5, 9, 1, 2});
  EXPECT_EQ(got.source, DraftSource::kPromptLookup);
  EXPECT_EQ(got.tokens, (Ids{3, 4, 5}));
  // No n-gram match: recycling's chain.
  got = d.Propose(*mem, Ids{7, 8, 2});
  EXPECT_EQ(got.source, DraftSource::kTokenRecycling);
  EXPECT_EQ(got.tokens, (Ids{50, 51, 52}));
  // Neither.
  got = d.Propose(*mem, Ids{7, 8, 9});
  EXPECT_EQ(got.source, DraftSource::kNone);
  EXPECT_TRUE(got.tokens.empty());
  const DrafterCounters c = d.counters();
  EXPECT_EQ(c.prompt_lookup_drafts, 1);
  EXPECT_EQ(c.token_recycling_drafts, 1);
  EXPECT_EQ(c.empty_drafts, 1);
  EXPECT_EQ(c.prompt_lookup_tokens, 3);
  EXPECT_EQ(c.token_recycling_tokens, 3);
}

TEST(DraftersCombined, ClippedLookupIsExtendedByRecycling) {
  TrainingFreeDrafter d(Opts());
  const std::shared_ptr<DrafterMemory> mem = d.MemoryFor("");
  d.ObserveTopK(*mem, 2, Ids{60});
  d.ObserveTopK(*mem, 60, Ids{61});
  // [1 2] then 3, then the suffix [1 2]: lookup gives 3 1 2, clipped... n=5
  // leaves two to fill from M[2] = 60, M[60] = 61.
  DraftProposal got = d.Propose(*mem, Ids{1, 2, 3, 1, 2}, 5);
  EXPECT_EQ(got.source, DraftSource::kPromptLookup);
  EXPECT_EQ(got.tokens, (Ids{3, 1, 2, 60, 61}));
  EXPECT_EQ(d.counters().token_recycling_tokens, 2);

  TrainingFreeDrafterOptions o = Opts();
  o.extend_lookup_with_recycling = false;
  TrainingFreeDrafter plain(o);
  const std::shared_ptr<DrafterMemory> plain_mem = plain.MemoryFor("");
  plain.ObserveTopK(*plain_mem, 2, Ids{60});
  EXPECT_EQ(plain.Propose(*plain_mem, Ids{1, 2, 3, 1, 2}, 5).tokens, (Ids{3, 1, 2}));
}

TEST(DraftersCombined, RecyclingFirstWhenAsked) {
  TrainingFreeDrafterOptions o = Opts();
  o.prefer_prompt_lookup = false;
  TrainingFreeDrafter d(o);
  const std::shared_ptr<DrafterMemory> mem = d.MemoryFor("");
  d.ObserveTopK(*mem, 2, Ids{50});
  // M[2] exists: recycling wins although [1 2] matches earlier.
  DraftProposal got = d.Propose(*mem, Ids{1, 2, 3, 4, 5, 9, 1, 2});
  EXPECT_EQ(got.source, DraftSource::kTokenRecycling);
  EXPECT_EQ(got.tokens, (Ids{50}));
  // M[5] does not: lookup is the fallback, and is not extended.
  got = d.Propose(*mem, Ids{4, 5, 6, 7, 4, 5});
  EXPECT_EQ(got.source, DraftSource::kPromptLookup);
  EXPECT_EQ(got.tokens, (Ids{6, 7, 4}));
  EXPECT_EQ(d.counters().prompt_lookup_drafts, 1);
  EXPECT_EQ(d.counters().token_recycling_drafts, 1);
}

TEST(DraftersCombined, SourcesCanBeSwitchedOff) {
  TrainingFreeDrafterOptions o = Opts();
  o.use_prompt_lookup = false;
  TrainingFreeDrafter recycling_only(o);
  const std::shared_ptr<DrafterMemory> recycling_only_mem = recycling_only.MemoryFor("");
  recycling_only.ObserveTopK(*recycling_only_mem, 2, Ids{50});
  DraftProposal got = recycling_only.Propose(*recycling_only_mem, Ids{1, 2, 3, 1, 2}, 1);
  EXPECT_EQ(got.source, DraftSource::kTokenRecycling);
  EXPECT_EQ(got.tokens, (Ids{50}));

  o = Opts();
  o.use_token_recycling = false;
  TrainingFreeDrafter lookup_only(o);
  const std::shared_ptr<DrafterMemory> lookup_only_mem = lookup_only.MemoryFor("");
  lookup_only.ObserveTopK(*lookup_only_mem, 9, Ids{50});
  EXPECT_EQ(lookup_only.Propose(*lookup_only_mem, Ids{7, 9}, 2).source, DraftSource::kNone);
}

TEST(DraftersCombined, ObserveRecordsTheLogitsTopK) {
  TrainingFreeDrafterOptions o = Opts();
  o.vocab_size = 10;
  o.k = 2;
  TrainingFreeDrafter d(o);
  const std::shared_ptr<DrafterMemory> mem = d.MemoryFor("");
  std::vector<float> row(10, 0.0f);
  row[7] = 3;
  row[4] = 2;
  row[1] = 2;
  d.Observe(*mem, 5, row);
  EXPECT_EQ(mem->recycling.Candidates(5), (Ids{7, 1}));
  EXPECT_EQ(d.Propose(*mem, Ids{5}, 1).tokens, (Ids{7}));
  EXPECT_THROW(TrainingFreeDrafter(TrainingFreeDrafterOptions{}), std::invalid_argument);
}

}  // namespace
}  // namespace specline
