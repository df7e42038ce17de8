// Batch planning (PlanBatch): decoders first, prefill chunks within the
// token budget, last chunks asking for logits, known inputs sent while a
// sequence is in flight. Needs no pipeline.
#include <gtest/gtest.h>

#include "scheduler/batch_builder.h"
#include "scheduler/no_engine_for_test.h"
#include "scheduler/policies/autoregressive.h"

namespace specline::scheduler {
namespace {

std::shared_ptr<Sequence> Seq(uint64_t id, int prompt, int generated, int32_t cached) {
  static NoEngine host;
  static AutoregressivePolicy plain(host);
  RequestOptions spec;
  spec.prompt.assign(prompt, 1);
  auto s = std::make_shared<Sequence>(id, spec);
  plain.Attach(*s, nullptr);
  for (int i = 0; i < generated; ++i) s->tokens.push_back(2);
  s->cached = cached;
  s->state = generated > 0 ? SeqState::kDecode : SeqState::kPrefill;
  return s;
}

TEST(PlanBatchTest, DecodeFirstThenPrefillChunksWithinTheBudget) {
  // Admission order: a long prompt first, then two decoders, then a prompt.
  std::vector<std::shared_ptr<Sequence>> running = {
      Seq(1, 100, 0, 0), Seq(2, 5, 3, 7), Seq(3, 9, 1, 9), Seq(4, 20, 0, 0)};
  std::vector<SlotRun> runs = PlanBatch(running, {.max_batch_tokens = 30, .prefill_chunk = 16});
  ASSERT_EQ(runs.size(), 4u);
  EXPECT_EQ(runs[0].seq->id, 2u);  // decoders first
  EXPECT_EQ(runs[0].first_pos, 7);
  EXPECT_EQ(runs[0].count, 1);
  EXPECT_TRUE(runs[0].needs_logits);
  EXPECT_EQ(runs[1].seq->id, 3u);
  EXPECT_EQ(runs[2].seq->id, 1u);  // then a 16-token chunk of the long prompt
  EXPECT_EQ(runs[2].count, 16);
  EXPECT_FALSE(runs[2].needs_logits) << "a middle chunk yields no token";
  EXPECT_EQ(runs[3].seq->id, 4u);  // and what is left of the budget
  EXPECT_EQ(runs[3].count, 30 - 2 - 16);
  EXPECT_FALSE(runs[3].needs_logits);
}

TEST(PlanBatchTest, LastChunkNeedsLogitsFinishedAreSkippedKnownInputsGoWhileInFlight) {
  auto a = Seq(1, 20, 0, 16);  // 4 prompt tokens left
  // A known input goes even while the sequence rides in another batch (a
  // speculative draft, the next prompt chunk): FIFO stages keep the order.
  auto b = Seq(2, 5, 2, 6);
  b->in_flight = 1;
  auto c = Seq(3, 5, 2, 6);
  c->state = SeqState::kFinished;
  auto d = Seq(4, 5, 2, 7);  // nothing pending: its token is in flight
  d->in_flight = 1;
  std::vector<SlotRun> runs =
      PlanBatch({a, b, c, d}, {.max_batch_tokens = 64, .prefill_chunk = 16});
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].seq, b);  // decoders first
  EXPECT_EQ(runs[0].first_pos, 6);
  EXPECT_EQ(runs[1].first_pos, 16);
  EXPECT_EQ(runs[1].count, 4);
  EXPECT_TRUE(runs[1].needs_logits);
}

TEST(PlanBatchTest, BudgetLimitsDecodersToo) {
  std::vector<std::shared_ptr<Sequence>> running;
  for (int i = 0; i < 10; ++i) running.push_back(Seq(i, 3, 1, 3));
  EXPECT_EQ(PlanBatch(running, {.max_batch_tokens = 4, .prefill_chunk = 16}).size(), 4u);
}

}  // namespace
}  // namespace specline::scheduler
