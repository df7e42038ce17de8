// Stage slices: chaining any split of the layers reproduces the whole model,
// KV rollback (explicit and implicit) reproduces a fresh run, mixed batches
// equal separate runs, and bad input fails cleanly without touching caches.
// Comparisons are exact: the kernels reduce every output in a fixed order
// whatever the batch size or thread count, so any difference is a bug.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>

#include "model/formats/random_model.h"
#include "model/runtime/local_pipeline.h"
#include "tests/test_util.h"

namespace specline {
namespace {

ModelConfig SmallConfig() {
  ModelConfig c = LlamaShape(48, 96, 5, 4, 2, 96, 128);
  c.rope_style = RopeStyle::kInterleaved;
  return c;
}

class StageSliceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    path_ = testing::TempDir() + "/small.gguf";
    WriteRandomModel(SmallConfig(), ModelFormat::kGguf, path_, /*seed=*/3, DType::kF32);
  }
  static std::string path_;

  // Logits of every position after running `tokens` from position `start`.
  static std::vector<float> Run(LocalPipeline& p, uint64_t seq, int32_t start,
                                const std::vector<int32_t>& tokens) {
    std::vector<SlotRef> slots;
    for (size_t i = 0; i < tokens.size(); ++i) slots.push_back({seq, start + int32_t(i)});
    SliceOutput out;
    absl::Status st = p.Forward(slots, tokens, {}, &out);
    EXPECT_TRUE(st.ok()) << st;
    return p.head().Logits(out.hidden.data(), tokens.size());
  }
};
std::string StageSliceTest::path_;

const std::vector<int32_t> kPrompt = {1, 17, 42, 5, 88, 23, 61, 9, 70, 33, 2, 14};

// Every way of cutting 5 layers into contiguous slices (2^4 of them).
std::vector<std::vector<int>> AllSplits(int layers) {
  std::vector<std::vector<int>> out;
  for (int mask = 0; mask < (1 << (layers - 1)); ++mask) {
    std::vector<int> b{0};
    for (int cut = 1; cut < layers; ++cut) {
      if (mask & (1 << (cut - 1))) b.push_back(cut);
    }
    b.push_back(layers);
    out.push_back(b);
  }
  return out;
}

TEST_F(StageSliceTest, EverySplitGivesTheWholeModelsLogits) {
  auto model = OpenModel(path_);
  LocalPipeline whole(*model, {0, 5}, {}, 2);
  const std::vector<float> ref = Run(whole, 1, 0, kPrompt);
  auto splits = AllSplits(5);
  ASSERT_EQ(splits.size(), 16u);
  for (const auto& bounds : splits) {
    LocalPipeline chained(*model, bounds, {}, 2);
    // Prefill in one call, then decode one token: both paths must agree.
    std::vector<int32_t> head(kPrompt.begin(), kPrompt.end() - 1);
    std::vector<float> got = Run(chained, 1, 0, head);
    std::vector<float> last = Run(chained, 1, head.size(), {kPrompt.back()});
    got.insert(got.end(), last.begin(), last.end());
    ASSERT_EQ(got.size(), ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      ASSERT_EQ(got[i], ref[i]) << "split of " << bounds.size() - 1 << " slices, i " << i;
    }
  }
}

TEST_F(StageSliceTest, TruncateThenDecodeEqualsFreshRun) {
  auto model = OpenModel(path_);
  LocalPipeline p(*model, {0, 2, 5}, {.kv_block_size = 4, .kv_capacity_tokens = 64}, 2);
  Run(p, 1, 0, kPrompt);  // 12 positions cached
  p.Truncate(1, 7);
  EXPECT_EQ(p.slice(0).Length(1), 7);
  EXPECT_EQ(p.slice(1).Length(1), 7);
  std::vector<float> after = Run(p, 1, 7, {50, 51, 52});

  std::vector<int32_t> fresh(kPrompt.begin(), kPrompt.begin() + 7);
  fresh.insert(fresh.end(), {50, 51, 52});
  std::vector<float> ref = Run(p, 2, 0, fresh);
  std::vector<float> ref_tail(ref.end() - after.size(), ref.end());
  for (size_t i = 0; i < after.size(); ++i) ASSERT_EQ(after[i], ref_tail[i]);
}

TEST_F(StageSliceTest, WritingAnEarlierPositionRollsBackImplicitly) {
  auto model = OpenModel(path_);
  LocalPipeline p(*model, {0, 3, 5}, {.kv_block_size = 4, .kv_capacity_tokens = 64}, 1);
  Run(p, 1, 0, kPrompt);
  std::vector<float> after = Run(p, 1, 5, {60, 61});  // no Truncate call
  EXPECT_EQ(p.slice(1).Length(1), 7);
  std::vector<int32_t> fresh(kPrompt.begin(), kPrompt.begin() + 5);
  fresh.insert(fresh.end(), {60, 61});
  std::vector<float> ref = Run(p, 2, 0, fresh);
  for (size_t i = 0; i < after.size(); ++i) {
    ASSERT_EQ(after[i], ref[ref.size() - after.size() + i]);
  }
}

TEST_F(StageSliceTest, MixedBatchEqualsSeparateRuns) {
  auto model = OpenModel(path_);
  LocalPipeline p(*model, {0, 5}, {}, 2);
  // Sequence 1 has 6 cached positions and decodes one token; sequence 2
  // prefills a 4-token chunk, all in one call.
  std::vector<int32_t> a(kPrompt.begin(), kPrompt.begin() + 6);
  Run(p, 1, 0, a);
  std::vector<SlotRef> slots = {{2, 0}, {1, 6}, {2, 1}, {2, 2}, {2, 3}};
  std::vector<int32_t> tokens = {7, kPrompt[6], 8, 9, 10};
  SliceOutput out;
  ASSERT_TRUE(p.Forward(slots, tokens, {}, &out).ok());
  std::vector<float> mixed = p.head().Logits(out.hidden.data(), slots.size());

  LocalPipeline q(*model, {0, 5}, {}, 2);
  std::vector<int32_t> a7(kPrompt.begin(), kPrompt.begin() + 7);
  std::vector<float> ref1 = Run(q, 1, 0, a7);
  std::vector<float> ref2 = Run(q, 2, 0, {7, 8, 9, 10});
  const int v = SmallConfig().vocab_size;
  for (int i = 0; i < v; ++i) {
    ASSERT_EQ(mixed[1 * v + i], ref1[6 * v + i]);
    ASSERT_EQ(mixed[0 * v + i], ref2[0 * v + i]);
    ASSERT_EQ(mixed[4 * v + i], ref2[3 * v + i]);
  }
}

TEST_F(StageSliceTest, TapsAreTakenAtGlobalLayerIndices) {
  auto model = OpenModel(path_);
  LocalPipeline whole(*model, {0, 5}, {}, 1);
  LocalPipeline split(*model, {0, 2, 4, 5}, {}, 1);
  const std::vector<int> taps = {5, 0, 2, 3};
  std::vector<SlotRef> slots = {{1, 0}, {1, 1}, {1, 2}};
  std::vector<int32_t> tokens = {1, 2, 3};
  SliceOutput a, b;
  ASSERT_TRUE(whole.Forward(slots, tokens, taps, &a).ok());
  ASSERT_TRUE(split.Forward(slots, tokens, taps, &b).ok());
  ASSERT_EQ(a.taps.size(), 4u);
  ASSERT_EQ(b.taps.size(), 4u);
  for (size_t k = 0; k < taps.size(); ++k) {
    EXPECT_EQ(a.taps[k].index, taps[k]);
    EXPECT_EQ(b.taps[k].index, taps[k]);
    ASSERT_EQ(a.taps[k].hidden.size(), 3u * SmallConfig().dim);
    for (size_t i = 0; i < a.taps[k].hidden.size(); ++i) {
      ASSERT_EQ(a.taps[k].hidden[i], b.taps[k].hidden[i]);
    }
  }
  // Tap L is the last layer's (pre-norm) output.
  EXPECT_EQ(a.taps[0].hidden, a.hidden);
  // A slice refuses taps outside its range.
  SliceOutput c;
  std::vector<int> bad = {4};
  EXPECT_FALSE(split.slice(0).Forward({slots, tokens, {}}, bad, &c).ok());
}

TEST_F(StageSliceTest, BadInputFailsWithoutChangingTheCache) {
  auto model = OpenModel(path_);
  LocalPipeline p(*model, {0, 5}, {.kv_block_size = 4, .kv_capacity_tokens = 16}, 1);
  Run(p, 1, 0, {1, 2, 3});
  SliceOutput out;
  auto expect_error = [&](std::vector<SlotRef> slots, std::vector<int32_t> tokens,
                          absl::StatusCode code, const std::string& what) {
    absl::Status st = p.Forward(slots, tokens, {}, &out);
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_NE(st.message().find(what), std::string::npos) << st;
    EXPECT_EQ(p.slice(0).Length(1), 3);
  };
  expect_error({{1, 3}}, {9999}, absl::StatusCode::kInvalidArgument, "vocabulary");
  expect_error({{1, 5}}, {4}, absl::StatusCode::kInvalidArgument, "gap");
  expect_error({{1, 3}, {1, 5}}, {4, 5}, absl::StatusCode::kInvalidArgument, "follow");
  expect_error({{1, 3}}, {}, absl::StatusCode::kInvalidArgument, "one token per slot");
  std::vector<SlotRef> many;
  std::vector<int32_t> toks;
  for (int i = 0; i < 20; ++i) {
    many.push_back({2, i});
    toks.push_back(i % 90);
  }
  expect_error(many, toks, absl::StatusCode::kResourceExhausted, "full");
  EXPECT_EQ(p.slice(0).Length(2), 0);
  expect_error({{1, -1}}, {4}, absl::StatusCode::kInvalidArgument, "position");
}


// Past one attention segment (256 positions), with GQA: the rows of a
// speculative verification batch (8 positions in one call) give exactly the
// bits of 8 single-token decodes and of the same positions inside one long
// prefill chunk, whatever the thread count and KV block size. This is what
// greedy speculative decoding relies on to equal plain decoding.
TEST(StageSliceLongContextTest, VerifyBatchEqualsSingleDecodes) {
  ModelConfig c = LlamaShape(96, 128, 2, 6, 2, 64, 1024);  // head_dim 16, 3 heads per KV head
  c.rope_style = RopeStyle::kInterleaved;
  const std::string path = testing::TempDir() + "/long_context.gguf";
  WriteRandomModel(c, ModelFormat::kGguf, path, /*seed=*/5, DType::kF32);
  auto model = OpenModel(path);
  const int prompt_len = 600, draft = 8;
  std::vector<int32_t> tokens(prompt_len + draft);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = (i * 37 + 11) % c.vocab_size;

  // Forward of positions [start, start + n) of sequence 1 in one call.
  auto forward = [&](LocalPipeline& p, int32_t start, int32_t n) {
    std::vector<SlotRef> slots;
    for (int32_t i = 0; i < n; ++i) slots.push_back({1, start + i});
    SliceOutput out;
    absl::Status st = p.Forward(slots, std::span(tokens).subspan(start, n), {}, &out);
    EXPECT_TRUE(st.ok()) << st;
    return p.head().Logits(out.hidden.data(), n);
  };
  const SliceOptions opts{.kv_capacity_tokens = 1024};
  // Reference: prefill in chunks of 256, then the verification batch.
  LocalPipeline ref_p(*model, {0, 2}, opts, 2);
  for (int32_t at = 0; at < prompt_len; at += 256) {
    forward(ref_p, at, std::min(256, prompt_len - at));
  }
  const std::vector<float> ref = forward(ref_p, prompt_len, draft);
  const size_t v = c.vocab_size;

  for (int threads : {1, 2, 3}) {
    // The same prompt in one chunk, then the draft positions one at a time.
    LocalPipeline p(*model, {0, 1, 2}, {.kv_block_size = 8, .kv_capacity_tokens = 1024}, threads);
    forward(p, 0, prompt_len);
    for (int i = 0; i < draft; ++i) {
      const std::vector<float> one = forward(p, prompt_len + i, 1);
      ASSERT_EQ(0, std::memcmp(one.data(), ref.data() + i * v, v * sizeof(float)))
          << "decode of draft position " << i << ", " << threads << " threads";
    }
    // Everything in one prefill chunk: the draft positions' tiles differ.
    LocalPipeline whole(*model, {0, 2}, opts, threads);
    const std::vector<float> all = forward(whole, 0, prompt_len + draft);
    ASSERT_EQ(0, std::memcmp(all.data() + prompt_len * v, ref.data(), draft * v * sizeof(float)))
        << threads << " threads";
  }
}

}  // namespace
}  // namespace specline
