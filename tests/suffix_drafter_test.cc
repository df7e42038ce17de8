// Suffix drafting (model/drafters/suffix_automaton.h, suffix_index.h): the
// automaton's longest match and its occurrence against a brute-force
// search over random texts, separators, the per-request index catching up
// with a growing context, the recent-requests index's bound, how the
// combined drafter chooses between its sources, and the drafter's memory
// kept apart per cache scope within a bound on every scope together.
#include <algorithm>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "model/drafters/drafter_memory.h"
#include "model/drafters/suffix_automaton.h"
#include "model/drafters/suffix_index.h"
#include "model/drafters/training_free_drafter.h"

namespace specline {
namespace {

using Ids = std::vector<int32_t>;

// The longest suffix of `query` found in `text`, and the latest end of its
// occurrences (-1: none), by trying every length and every position.
std::pair<int32_t, int64_t> BruteLongestSuffix(const Ids& text, const Ids& query) {
  for (int32_t len = static_cast<int32_t>(query.size()); len > 0; --len) {
    if (query[query.size() - len] < 0) continue;  // a separator never matches
    bool has_separator = false;
    for (size_t i = query.size() - len; i < query.size(); ++i) has_separator |= query[i] < 0;
    if (has_separator) continue;
    for (int64_t end = static_cast<int64_t>(text.size()) - 1; end >= len - 1; --end) {
      if (std::equal(query.end() - len, query.end(), text.begin() + (end - len + 1))) {
        return {len, end};
      }
    }
  }
  return {0, -1};
}

TEST(SuffixAutomaton, LongestSuffixAndLatestOccurrenceMatchBruteForce) {
  std::mt19937 rng(7);
  for (int alphabet : {2, 3, 5, 40}) {
    for (int trial = 0; trial < 20; ++trial) {
      std::uniform_int_distribution<int32_t> token(0, alphabet - 1);
      Ids text;
      SuffixAutomaton a;
      const int n = 20 + trial * 7;
      for (int i = 0; i < n; ++i) {
        text.push_back(token(rng));
        a.Append(text.back());
      }
      ASSERT_EQ(a.size(), n);
      for (int q = 0; q < 30; ++q) {
        Ids query;
        const int qlen = 1 + q % 12;
        // Half the queries end with a piece of the text, so long matches occur.
        if (q % 2 == 0 && qlen <= n) {
          const int from = std::uniform_int_distribution<int>(0, n - qlen)(rng);
          query.assign(text.begin() + from, text.begin() + from + qlen);
          query[0] = token(rng);
        } else {
          for (int i = 0; i < qlen; ++i) query.push_back(token(rng));
        }
        const auto [len, end] = BruteLongestSuffix(text, query);
        const SuffixAutomaton::Match m = a.LongestSuffix(query);
        ASSERT_EQ(m.length, len) << "alphabet " << alphabet << " trial " << trial << " query " << q;
        if (len == 0) {
          EXPECT_EQ(m.end, -1);
          continue;
        }
        // Any occurrence is correct; these texts are shallow enough that
        // the automaton keeps the latest one (kRecentWalk states deep).
        ASSERT_TRUE(std::equal(query.end() - len, query.end(), text.begin() + (m.end - len + 1)));
        EXPECT_EQ(m.end, end) << "alphabet " << alphabet << " trial " << trial << " query " << q;
      }
    }
  }
}

TEST(SuffixAutomaton, ContinuationStopsAtASeparatorAndTheEnd) {
  SuffixAutomaton a;
  a.Append(Ids{1, 2, 3, 4, -1, 5, 6});
  const SuffixAutomaton::Match m = a.LongestSuffix(Ids{9, 1, 2});
  EXPECT_EQ(m.length, 2);
  EXPECT_EQ(m.end, 1);
  EXPECT_EQ(a.Continuation(m.end, 8), (Ids{3, 4}));  // not across the separator
  EXPECT_EQ(a.Continuation(5, 8), (Ids{6}));         // the text's end
  EXPECT_EQ(a.Continuation(m.end, 1), (Ids{3}));
  // A query with a separator matches only after it.
  EXPECT_EQ(a.LongestSuffix(Ids{4, -1, 5}).length, 1);
  a.Clear();
  EXPECT_EQ(a.size(), 0);
  EXPECT_EQ(a.LongestSuffix(Ids{1, 2}).length, 0);
}

TEST(RequestSuffixIndex, DraftsFromTheContextAsItGrows) {
  RequestSuffixIndex own;
  Ids ctx = {10, 11, 12, 13, 14, 20, 10, 11};
  SuffixDraft d = own.Draft(ctx, 32, 3);
  EXPECT_EQ(d.match, 2);
  EXPECT_EQ(d.tokens, (Ids{12, 13, 14}));
  EXPECT_EQ(own.indexed(), static_cast<int64_t>(ctx.size()) - 1);
  // Accepted tokens extend the match: the longest one is followed.
  ctx.insert(ctx.end(), {12, 13});
  d = own.Draft(ctx, 32, 4);
  EXPECT_EQ(d.match, 4);
  EXPECT_EQ(d.tokens, (Ids{14, 20, 10, 11}));
  EXPECT_EQ(own.indexed(), static_cast<int64_t>(ctx.size()) - 1);
  // The window bounds the match.
  EXPECT_EQ(own.Draft(ctx, 2, 1).match, 2);
  // A repetition runs into the context's last token, which is drafted too.
  EXPECT_EQ(own.Draft(Ids{5, 6, 5, 6}, 32, 4).tokens, (Ids{5, 6}));
  // A different context is indexed afresh.
  d = own.Draft(Ids{1, 2, 3, 1}, 32, 2);
  EXPECT_EQ(d.tokens, (Ids{2, 3}));
  EXPECT_EQ(own.indexed(), 3);
  EXPECT_TRUE(own.Draft(Ids{1}, 32, 2).tokens.empty());
}

TEST(RecentTextIndex, RemembersTextsSeparatelyWithinItsBound) {
  RecentTextIndex recent(40);  // two generations of 20 tokens
  recent.Remember(Ids{1, 2, 3, 4, 5});
  recent.Remember(Ids{6, 7, 8});
  SuffixDraft d = recent.Draft(Ids{99, 2, 3}, 32, 5);
  EXPECT_EQ(d.match, 2);
  EXPECT_EQ(d.tokens, (Ids{4, 5}));  // not into the next text
  d = recent.Draft(Ids{5, 6}, 32, 5);
  EXPECT_EQ(d.match, 1);  // "5 6" never occurred: texts do not join
  EXPECT_EQ(d.tokens, (Ids{7, 8}));
  // Fill well past both generations: the first texts are forgotten and the
  // index never holds more than its capacity.
  for (int i = 0; i < 10; ++i) recent.Remember(Ids{50, 51, 52, 53, 54, 55});
  EXPECT_LE(recent.tokens(), recent.capacity());
  EXPECT_EQ(recent.Draft(Ids{1, 2, 3}, 32, 2).match, 0);
  EXPECT_EQ(recent.Draft(Ids{52, 53}, 32, 2).tokens, (Ids{54, 55}));
  // A text longer than a generation keeps its tail.
  Ids long_text(100);
  for (int i = 0; i < 100; ++i) long_text[i] = 200 + i;
  recent.Remember(long_text);
  EXPECT_EQ(recent.Draft(Ids{297}, 32, 2).tokens, (Ids{298, 299}));
  EXPECT_EQ(recent.Draft(Ids{201}, 32, 2).match, 0);
  EXPECT_TRUE(RecentTextIndex(0).Draft(Ids{1}, 32, 1).tokens.empty());
}

TrainingFreeDrafterOptions Options() {
  TrainingFreeDrafterOptions o;
  o.vocab_size = 300;
  o.k = 4;
  o.num_drafts = 3;
  o.recent_tokens = 1000;
  o.recent_min_match = 3;
  return o;
}

TEST(SuffixDrafting, TheLongerMatchWinsAndTheRequestsOwnTextWinsTies) {
  TrainingFreeDrafter d(Options());
  const std::shared_ptr<DrafterMemory> mem = d.MemoryFor("");
  d.Remember(*mem, Ids{1, 2, 3, 4, 70, 71, 72});
  RequestSuffixIndex own;
  // Both the own text and the recent one match "2 3 4": the own text wins.
  DraftProposal p = d.Propose(*mem, Ids{2, 3, 4, 60, 61, 9, 2, 3, 4}, 3, &own);
  EXPECT_EQ(p.source, DraftSource::kPromptLookup);
  EXPECT_EQ(p.tokens, (Ids{60, 61, 9}));
  // The own text matches "3 4", the recent one "1 2 3 4": recent wins.
  RequestSuffixIndex other;
  p = d.Propose(*mem, Ids{8, 3, 4, 60, 9, 1, 2, 3, 4}, 3, &other);
  EXPECT_EQ(p.source, DraftSource::kRecentRequests);
  EXPECT_EQ(p.tokens, (Ids{70, 71, 72}));
  // A recent match shorter than recent_min_match is not drafted from:
  // Token Recycling's row answers instead.
  d.ObserveTopK(*mem, 4, Ids{90});
  RequestSuffixIndex third;
  p = d.Propose(*mem, Ids{5, 3, 4}, 1, &third);
  EXPECT_EQ(p.source, DraftSource::kTokenRecycling);
  EXPECT_EQ(p.tokens, (Ids{90}));
  const DrafterCounters c = d.counters();
  EXPECT_EQ(c.prompt_lookup_drafts, 1);
  EXPECT_EQ(c.recent_requests_drafts, 1);
  EXPECT_EQ(c.token_recycling_drafts, 1);
}

TEST(SuffixDrafting, WithoutAnIndexTheOwnTextIsSearchedByPromptLookup) {
  TrainingFreeDrafterOptions o = Options();
  o.recent_tokens = 0;
  TrainingFreeDrafter d(o);
  const std::shared_ptr<DrafterMemory> mem = d.MemoryFor("");
  const DraftProposal p = d.Propose(*mem, Ids{1, 2, 3, 4, 5, 9, 1, 2}, 3);
  EXPECT_EQ(p.source, DraftSource::kPromptLookup);
  EXPECT_EQ(p.tokens, (Ids{3, 4, 5}));
  EXPECT_THROW(
      [] {
        TrainingFreeDrafterOptions bad = Options();
        bad.suffix_window = 1;
        TrainingFreeDrafter x(bad);
      }(),
      std::invalid_argument);
}

// What one scope's requests teach (recent texts, Token Recycling rows) is
// drafted only for requests of that scope; the same scope gets the same
// memory back.
TEST(DrafterMemoryScopes, AScopeDraftsOnlyFromItsOwnRequests) {
  TrainingFreeDrafter d(Options());
  const std::shared_ptr<DrafterMemory> alice = d.MemoryFor("alice");
  const std::shared_ptr<DrafterMemory> bob = d.MemoryFor("bob");
  ASSERT_NE(alice, bob);
  EXPECT_EQ(d.MemoryFor("alice"), alice);
  d.Remember(*alice, Ids{1, 2, 3, 4, 70, 71, 72});
  d.ObserveTopK(*alice, 9, Ids{90});
  RequestSuffixIndex own_a, own_b;
  const Ids asked = {8, 1, 2, 3, 4};
  DraftProposal p = d.Propose(*alice, asked, 3, &own_a);
  EXPECT_EQ(p.source, DraftSource::kRecentRequests);
  EXPECT_EQ(p.tokens, (Ids{70, 71, 72}));
  p = d.Propose(*bob, asked, 3, &own_b);
  EXPECT_EQ(p.source, DraftSource::kNone);
  EXPECT_TRUE(p.tokens.empty());
  EXPECT_EQ(d.Propose(*alice, Ids{5, 9}, 1).tokens, (Ids{90}));
  EXPECT_TRUE(d.Propose(*bob, Ids{5, 9}, 1).tokens.empty());
  EXPECT_EQ(d.scopes().scopes(), 2u);
}

// Past the bound the least recently used scopes go (never the one asked
// for); a memory a request still holds outlives its scope's entry, and the
// scope comes back empty.
TEST(DrafterMemoryScopes, BoundedInTotalLeastRecentlyUsedDroppedFirst) {
  DrafterMemoryLimits limits;
  limits.vocab_size = 3000;  // the matrix (24 KB) outweighs a short text's index
  limits.k = 4;
  limits.recent_tokens_per_scope = 1000;
  const size_t one = DrafterMemory(limits.vocab_size, limits.k, 1000).bytes();
  limits.max_bytes = 4 * one - 1;  // three scopes fit, four do not
  DrafterMemoryScopes scopes(limits);
  const std::shared_ptr<DrafterMemory> a = scopes.For("a");
  a->recent.Remember(Ids{1, 2, 3, 4, 5});
  scopes.For("b");
  scopes.For("c");
  EXPECT_EQ(scopes.scopes(), 3u);
  scopes.For("a");  // a is now the most recently used: b goes next
  scopes.For("d");
  EXPECT_EQ(scopes.scopes(), 3u);
  EXPECT_EQ(scopes.dropped_scopes(), 1);
  EXPECT_LE(scopes.bytes(), limits.max_bytes);
  EXPECT_EQ(scopes.For("a"), a);
  EXPECT_EQ(scopes.For("b")->recent.tokens(), 0);  // b came back empty
  // a grows past what fits beside the others: they are dropped, a is kept.
  std::vector<int32_t> text(400);
  for (size_t i = 0; i < text.size(); ++i) text[i] = static_cast<int32_t>(i % 290);
  a->recent.Remember(text);
  scopes.Trim(a.get());
  EXPECT_LE(scopes.bytes(), std::max(limits.max_bytes, a->bytes()));
  EXPECT_EQ(scopes.For("a"), a);
  // A bound smaller than one scope keeps only the scope asked for; a
  // memory still held by its request stays usable after its entry goes.
  limits.max_bytes = 0;
  DrafterMemoryScopes tight(limits);
  const std::shared_ptr<DrafterMemory> held = tight.For("x");
  held->recent.Remember(Ids{1, 2, 3, 4});
  tight.For("y");
  EXPECT_EQ(tight.scopes(), 1u);
  EXPECT_GT(held->recent.tokens(), 0);
  EXPECT_NE(tight.For("x"), held);
}

}  // namespace
}  // namespace specline
