// A stage hosts weight sets and adapters by id and knows no decoding
// method (docs/architecture.md, "Weight sets and adapters"): heads load
// under the flag of what they bring, a batch mixing weight sets runs each
// group on its own weights with the outputs back in slot order, and bad
// tags are refused with the field or flag to fix.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.h"
#include "model/runtime/stage_slice.h"
#include "stage_worker/hosted_models.h"
#include "stage_worker/stage_runner.h"
#include "tests/test_util.h"

namespace specline::testing {
namespace {

std::string Stories() { return SharedModelPath("stories260K/stories260K.bin"); }
std::string Head(const std::string& name) { return SourcePath("training/heads/stories260K/" + name); }

TEST(StageAddOns, HeadsLoadUnderWhatTheyBringWithIdsInOrder) {
  if (Stories().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  const ModelConfig config = OpenModel(Stories())->config();
  auto addons = LoadAddOns({Head("ptp")}, {Head("pipo")}, config);
  ASSERT_TRUE(addons.ok()) << addons.status();
  ASSERT_EQ(addons->info.adapters.size(), 1u);
  EXPECT_EQ(addons->info.adapters[0].id(), 1u);
  EXPECT_EQ(addons->info.adapters[0].kind(), "ptp");
  EXPECT_EQ(addons->info.adapters[0].fingerprint(), addons->adapters[0]->fingerprint());
  EXPECT_NE(addons->info.adapters[0].fingerprint(), 0u);
  ASSERT_EQ(addons->info.weight_sets.size(), 1u);
  EXPECT_EQ(addons->info.weight_sets[0].id(), 1u);
  EXPECT_EQ(addons->info.weight_sets[0].kind(), "pipo");
  EXPECT_TRUE(addons->info.weight_sets[0].hidden_input());
  ASSERT_EQ(addons->weight_sets.size(), 1u);
  EXPECT_EQ(addons->weight_sets[0]->config().dim, config.dim);

  // Each head under the other's flag: refused, naming the right one.
  auto swapped = LoadAddOns({Head("pipo")}, {}, config);
  ASSERT_FALSE(swapped.ok());
  EXPECT_NE(swapped.status().message().find("--weight-set"), std::string::npos) << swapped.status();
  swapped = LoadAddOns({}, {Head("ptp")}, config);
  ASSERT_FALSE(swapped.ok());
  EXPECT_NE(swapped.status().message().find("--adapter"), std::string::npos) << swapped.status();
  // A head that brings neither, and a directory that is no head.
  EXPECT_FALSE(LoadAddOns({Head("ppsd-norm-e1")}, {}, config).ok());
  EXPECT_FALSE(LoadAddOns({}, {TempDir()}, config).ok());
}

// One batch on stage 0 with base slots (tokens) and weight-set slots
// (hidden rows), one of them made stale by a flush: the survivors' outputs
// equal what each weight set gives on its own, bit for bit.
TEST(StageAddOns, MixedBatchRunsEachWeightSetOnItsOwnWeights) {
  if (Stories().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  auto model = OpenModel(Stories());
  const ModelConfig& c = model->config();
  auto addons = LoadAddOns({}, {Head("pipo")}, c);
  ASSERT_TRUE(addons.ok()) << addons.status();
  auto pool = std::make_shared<kernels::ThreadPool>(1);
  SliceOptions base_options{16, 1024};
  SliceOptions set_options{16, 1024};
  set_options.hidden_input = true;
  StageSlice base(*model, 0, c.n_layers, base_options, pool);
  StageSlice backbone(*addons->weight_sets[0], 0, c.n_layers, set_options, pool);
  StageRunner runner(base, 0, /*is_last=*/true, {{&backbone, true}});

  const int dim = c.dim;
  auto row = [&](int k) {
    std::vector<float> r(dim);
    for (int d = 0; d < dim; ++d) r[d] = 0.01f * static_cast<float>((k * 37 + d * 11) % 23) - 0.1f;
    return r;
  };
  // Slots: seq 1 base (2 tokens), seq 2 on the backbone (2 rows), seq 3 on
  // the backbone but stale (epoch 0 after a flush to 1).
  internal::MicroBatch flush;
  flush.set_kind(internal::MicroBatch::EPOCH);
  flush.add_seq_ids(3);
  flush.add_epochs(1);
  EXPECT_FALSE(runner.Process(flush));

  internal::MicroBatch batch;
  struct Slot {
    uint64_t seq;
    int32_t pos;
    uint32_t epoch, set;
    int32_t token;
  };
  const std::vector<Slot> slots = {
      {1, 0, 0, 0, 1}, {2, 0, 0, 1, 0}, {3, 0, 0, 1, 0}, {1, 1, 0, 0, 400}, {2, 1, 0, 1, 0}};
  std::string hidden;
  int k = 0;
  for (const Slot& s : slots) {
    batch.add_seq_ids(s.seq);
    batch.add_positions(s.pos);
    batch.add_epochs(s.epoch);
    batch.add_tokens(s.token);
    batch.add_weight_set(s.set);
    if (s.set == 1) {
      const std::vector<float> r = row(k++);
      hidden.append(reinterpret_cast<const char*>(r.data()), r.size() * sizeof(float));
    }
  }
  batch.set_hidden(hidden);
  ASSERT_TRUE(runner.Process(batch));
  ASSERT_TRUE(batch.error().empty()) << batch.error();
  ASSERT_EQ(batch.seq_ids_size(), 4);  // the stale slot is gone
  ASSERT_EQ(batch.hidden().size(), size_t{4} * dim * sizeof(float));
  std::vector<float> got(4 * dim);
  std::memcpy(got.data(), batch.hidden().data(), batch.hidden().size());

  // The same slots on fresh slices, one weight set at a time.
  StageSlice base_ref(*model, 0, c.n_layers, base_options, pool);
  StageSlice backbone_ref(*addons->weight_sets[0], 0, c.n_layers, set_options, pool);
  const std::vector<SlotRef> base_slots = {{1, 0}, {1, 1}};
  const std::vector<int32_t> tokens = {1, 400};
  SliceOutput base_out, set_out;
  ASSERT_TRUE(base_ref.Forward({base_slots, tokens, {}}, {}, &base_out).ok());
  const std::vector<SlotRef> set_slots = {{2, 0}, {2, 1}};
  std::vector<float> set_rows = row(0);
  const std::vector<float> second = row(2);  // row 1 was the stale slot's
  set_rows.insert(set_rows.end(), second.begin(), second.end());
  ASSERT_TRUE(backbone_ref.Forward({set_slots, {}, set_rows}, {}, &set_out).ok());

  auto out_row = [&](const std::vector<float>& v, int r) {
    return std::vector<float>(v.begin() + r * dim, v.begin() + (r + 1) * dim);
  };
  // Survivors in slot order: seq 1 pos 0, seq 2 pos 0, seq 1 pos 1, seq 2 pos 1.
  EXPECT_EQ(out_row(got, 0), out_row(base_out.hidden, 0));
  EXPECT_EQ(out_row(got, 1), out_row(set_out.hidden, 0));
  EXPECT_EQ(out_row(got, 2), out_row(base_out.hidden, 1));
  EXPECT_EQ(out_row(got, 3), out_row(set_out.hidden, 1));
  // Each weight set keeps its own cache.
  EXPECT_EQ(base.Length(1), 2);
  EXPECT_EQ(base.Length(2), 0);
  EXPECT_EQ(backbone.Length(2), 2);
  EXPECT_EQ(backbone.Length(3), 0);

  // A release frees the sequence in every weight set.
  internal::MicroBatch release;
  release.add_kv_ops()->set_release(2);
  release.add_kv_ops()->set_release(1);
  ASSERT_TRUE(runner.Process(release));
  EXPECT_EQ(backbone.Length(2), 0);
  EXPECT_EQ(base.Length(1), 0);
}

TEST(StageAddOns, BadTagsAreRefusedNamingWhatToFix) {
  if (Stories().empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  auto model = OpenModel(Stories());
  auto pool = std::make_shared<kernels::ThreadPool>(1);
  StageSlice base(*model, 0, model->config().n_layers, SliceOptions{16, 256}, pool);
  StageRunner runner(base, 0, /*is_last=*/true);
  auto batch = [] {
    internal::MicroBatch b;
    for (int i = 0; i < 2; ++i) {
      b.add_seq_ids(1);
      b.add_positions(i);
      b.add_epochs(0);
      b.add_tokens(1);
    }
    return b;
  };
  internal::MicroBatch unknown_set = batch();
  unknown_set.add_weight_set(0);
  unknown_set.add_weight_set(1);
  runner.Process(unknown_set);
  EXPECT_NE(unknown_set.error().find("--weight-set"), std::string::npos) << unknown_set.error();

  internal::MicroBatch short_adapter = batch();
  short_adapter.add_adapter(1);
  runner.Process(short_adapter);
  EXPECT_NE(short_adapter.error().find("adapter has 1 entries for 2 slots"), std::string::npos)
      << short_adapter.error();

  internal::MicroBatch unknown_adapter = batch();
  unknown_adapter.add_adapter(0);
  unknown_adapter.add_adapter(1);
  runner.Process(unknown_adapter);
  EXPECT_NE(unknown_adapter.error().find("--adapter"), std::string::npos) << unknown_adapter.error();
  // Nothing was cached by the refused batches.
  EXPECT_EQ(base.Length(1), 0);
}

}  // namespace
}  // namespace specline::testing
