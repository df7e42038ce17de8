// The recycling matrix is written by the scheduler's receiver thread while
// the driver thread drafts from it (model/drafters/token_recycling.h says
// why per-entry relaxed atomics). These tests run both at once: under
// ThreadSanitizer they prove there is no data race, and everywhere they
// check a reader only ever sees values some writer stored.
//
// Links only specline_drafters and GoogleTest, so a TSan build of it is one
// compiler call (docs/drafters.md "Tests").
#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "model/drafters/token_recycling.h"
#include "model/drafters/training_free_drafter.h"

namespace specline {
namespace {

constexpr int32_t kVocab = 4096;  // a multiple of kStride
constexpr int32_t kStride = 16;

// Every candidate the writers store for token t is t + 1 + kStride * g
// (mod kVocab) for some g: a reader can check any entry it sees.
bool Plausible(int32_t t, int32_t c) {
  if (c < 0 || c >= kVocab) return false;
  return ((c - t - 1) % kStride + kVocab) % kStride == 0;
}

std::vector<int32_t> Row(int32_t t, int g, int k) {
  std::vector<int32_t> row;
  for (int j = 0; j < k; ++j) row.push_back((t + 1 + kStride * (g + j)) % kVocab);
  return row;
}

TEST(DraftersConcurrency, UpdateWhileDrafting) {
  TokenRecycling tr(kVocab, 4);
  std::atomic<bool> done{false};
  std::atomic<int64_t> drafted{0};
  std::thread writer([&] {
    for (int g = 0; g < 60; ++g) {
      for (int32_t t = 0; t < kVocab; ++t) tr.Update(t, Row(t, g, 1 + (t + g) % 4));
      if (g % 20 == 19) tr.Clear();
    }
    done.store(true);
  });
  std::vector<std::thread> readers;
  std::atomic<int> bad{0};
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      int32_t start = r;
      while (!done.load()) {
        const std::vector<int32_t> ctx = {start};
        const std::vector<int32_t> chain = tr.Draft(ctx, 8);
        int32_t prev = start;
        for (int32_t c : chain) {
          if (!Plausible(prev, c)) bad.fetch_add(1);
          prev = c;
        }
        for (int32_t c : tr.Candidates(start)) {
          if (!Plausible(start, c)) bad.fetch_add(1);
        }
        drafted.fetch_add(static_cast<int64_t>(chain.size()));
        start = (start + 97) % kVocab;
      }
    });
  }
  writer.join();
  for (auto& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_GT(drafted.load(), 0);
}

TEST(DraftersConcurrency, CombinedDrafterObserveWhileProposing) {
  TrainingFreeDrafterOptions o;
  o.vocab_size = kVocab;
  o.k = 4;
  o.num_drafts = 5;
  TrainingFreeDrafter d(o);
  const std::shared_ptr<DrafterMemory> mem = d.MemoryFor("");
  std::atomic<bool> done{false};
  std::thread receiver([&] {
    std::vector<float> logits(kVocab);
    for (int g = 0; g < 20; ++g) {
      for (int32_t t = 0; t < kVocab; t += 3) {
        // Logits whose best id is t + 1 + kStride * g.
        std::fill(logits.begin(), logits.end(), 0.0f);
        logits[(t + 1 + kStride * g) % kVocab] = 1.0f;
        d.Observe(*mem, t, logits);
      }
    }
    done.store(true);
  });
  int64_t proposals = 0;
  int bad = 0;
  std::vector<int32_t> ctx = {1, 2, 3, 1, 2};
  while (!done.load()) {
    const DraftProposal got = d.Propose(*mem, ctx);
    if (got.tokens.size() > 5) ++bad;
    ++proposals;
    ctx.push_back(static_cast<int32_t>(proposals % 7));
    if (ctx.size() > 2000) ctx.resize(5);
  }
  receiver.join();
  EXPECT_EQ(bad, 0);
  const DrafterCounters c = d.counters();
  EXPECT_EQ(c.prompt_lookup_drafts + c.token_recycling_drafts + c.empty_drafts, proposals);
}

}  // namespace
}  // namespace specline
