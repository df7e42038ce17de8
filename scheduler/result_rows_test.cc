// The receiver's routing (scheduler/result_rows.h): each run gets back
// exactly its own rows, by the way its request needs them, and nothing
// when its slots were dropped, it only prefilled, or it was flushed.
// Needs no pipeline: the batch is written as the last stage returns it.
#include <gtest/gtest.h>

#include "scheduler/no_engine_for_test.h"
#include "scheduler/policies/autoregressive.h"
#include "scheduler/result_rows.h"

namespace specline::scheduler {
namespace {

constexpr int kDim = 2;

class ResultRowsTest : public ::testing::Test {
 protected:
  std::shared_ptr<Sequence> Seq(uint64_t id, int prompt, float temperature) {
    RequestOptions spec;
    spec.prompt.assign(prompt, 1);
    spec.sampling.temperature = temperature;
    auto s = std::make_shared<Sequence>(id, spec);
    plain_.Attach(*s, nullptr);
    s->state = SeqState::kDecode;
    return s;
  }
  // One returned slot whose hidden row is (v, v + 0.5).
  void Slot(uint64_t seq, int32_t pos, float v) {
    batch_.add_seq_ids(seq);
    batch_.add_positions(pos);
    hidden_.push_back(v);
    hidden_.push_back(v + 0.5f);
    batch_.set_hidden(std::string(reinterpret_cast<const char*>(hidden_.data()),
                                  hidden_.size() * sizeof(float)));
  }

  NoEngine host_;
  AutoregressivePolicy plain_{host_};
  internal::MicroBatch batch_;
  std::vector<float> hidden_;
};

TEST_F(ResultRowsTest, GreedyRowsGoToTheArgmaxAndSampledOnesToTheLogits) {
  auto greedy = Seq(1, 4, 0.0f), sampled = Seq(2, 4, 0.8f);
  std::vector<SlotRun> runs = {{greedy, 3, 1, true, 0}, {sampled, 3, 1, true, 0}};
  Slot(1, 3, 10.0f);
  Slot(2, 3, 20.0f);
  const ResultRows rows = RouteResultRows(batch_, runs, kDim);
  ASSERT_EQ(rows.runs.size(), 2u);
  EXPECT_EQ(rows.greedy_rows, (std::vector<float>{10.0f, 10.5f}));
  EXPECT_EQ(rows.logit_rows, (std::vector<float>{20.0f, 20.5f}));
  EXPECT_TRUE(rows.hidden_rows.empty());

  // As a head would answer: a vocabulary of 3, one argmax per greedy row.
  const HeadOutputs head{.vocab = 3, .logits = {0.1f, 0.2f, 0.3f}, .greedy = {7}};
  std::optional<RunOutput> a = RunOutputOf(rows, head, 0, runs[0], kDim);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(std::vector<int32_t>(a->greedy.begin(), a->greedy.end()), std::vector<int32_t>{7});
  EXPECT_TRUE(a->logits.empty());
  std::optional<RunOutput> b = RunOutputOf(rows, head, 1, runs[1], kDim);
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->logits.size(), 3u);
  EXPECT_TRUE(b->greedy.empty());
}

TEST_F(ResultRowsTest, DroppedSlotsAndPrefillChunksYieldNothing) {
  auto dropped = Seq(1, 4, 0.0f), chunk = Seq(2, 40, 0.0f), kept = Seq(3, 4, 0.0f);
  std::vector<SlotRun> runs = {
      {dropped, 3, 1, true, 0}, {chunk, 0, 2, false, 0}, {kept, 3, 1, true, 0}};
  // A stage dropped sequence 1's slot as stale; the chunk's rows came back.
  Slot(2, 0, 1.0f);
  Slot(2, 1, 2.0f);
  Slot(3, 3, 30.0f);
  const ResultRows rows = RouteResultRows(batch_, runs, kDim);
  EXPECT_EQ(rows.greedy_rows, (std::vector<float>{30.0f, 30.5f})) << "only the decoder's row";
  const HeadOutputs head{.vocab = 3, .logits = {}, .greedy = {5}};
  EXPECT_FALSE(RunOutputOf(rows, head, 0, runs[0], kDim).has_value());
  EXPECT_FALSE(RunOutputOf(rows, head, 1, runs[1], kDim).has_value());
  EXPECT_TRUE(RunOutputOf(rows, head, 2, runs[2], kDim).has_value());
}

TEST_F(ResultRowsTest, AFlushWhileTheHeadRanVoidsTheRun) {
  auto s = Seq(1, 4, 0.0f);
  std::vector<SlotRun> runs = {{s, 3, 1, true, 0}};
  Slot(1, 3, 10.0f);
  const ResultRows rows = RouteResultRows(batch_, runs, kDim);
  const HeadOutputs head{.vocab = 3, .logits = {}, .greedy = {7}};
  ++s->epoch;  // a rejected draft flushed it meanwhile
  EXPECT_FALSE(RunOutputOf(rows, head, 0, runs[0], kDim).has_value());
}

}  // namespace
}  // namespace specline::scheduler
