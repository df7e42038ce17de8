#include "model/runtime/kv_cache.h"

#include <gtest/gtest.h>

namespace specline {
namespace {

KvCacheShape SmallShape(int blocks) { return {2, 2, 4, /*block_size=*/4, blocks}; }

TEST(PagedKvCache, ReserveGrowsByBlocks) {
  PagedKvCache kv(SmallShape(8));
  ASSERT_TRUE(kv.Reserve(7, 0, 5).ok());
  EXPECT_EQ(kv.Length(7), 5);
  EXPECT_EQ(kv.BlockTable(7).size(), 2u);
  EXPECT_EQ(kv.free_blocks(), 6);
  ASSERT_TRUE(kv.Reserve(7, 5, 3).ok());
  EXPECT_EQ(kv.Length(7), 8);
  EXPECT_EQ(kv.BlockTable(7).size(), 2u);
}

TEST(PagedKvCache, WriteBeforeEndTruncates) {
  PagedKvCache kv(SmallShape(8));
  ASSERT_TRUE(kv.Reserve(1, 0, 12).ok());
  EXPECT_EQ(kv.free_blocks(), 5);
  ASSERT_TRUE(kv.Reserve(1, 3, 1).ok());  // rollback to 3, then write 3
  EXPECT_EQ(kv.Length(1), 4);
  EXPECT_EQ(kv.free_blocks(), 7);
}

TEST(PagedKvCache, GapIsRejectedAndChangesNothing) {
  PagedKvCache kv(SmallShape(8));
  ASSERT_TRUE(kv.Reserve(1, 0, 3).ok());
  absl::Status st = kv.Reserve(1, 4, 1);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kv.Length(1), 3);
}

TEST(PagedKvCache, FullCacheIsResourceExhaustedAndChangesNothing) {
  PagedKvCache kv(SmallShape(3));
  ASSERT_TRUE(kv.Reserve(1, 0, 8).ok());
  absl::Status st = kv.Reserve(2, 0, 5);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(kv.Length(2), 0);
  EXPECT_EQ(kv.free_blocks(), 1);
  // A rollback of sequence 1 frees blocks its own rewrite can reuse.
  EXPECT_TRUE(kv.Reserve(1, 2, 6).ok());
  EXPECT_EQ(kv.Length(1), 8);
}

TEST(PagedKvCache, TruncateAndReleaseReturnBlocks) {
  PagedKvCache kv(SmallShape(6));
  ASSERT_TRUE(kv.Reserve(1, 0, 9).ok());
  ASSERT_TRUE(kv.Reserve(2, 0, 4).ok());
  EXPECT_EQ(kv.free_blocks(), 2);
  kv.Truncate(1, 4);
  EXPECT_EQ(kv.Length(1), 4);
  EXPECT_EQ(kv.free_blocks(), 4);
  kv.Truncate(1, 100);  // longer than held: no-op
  EXPECT_EQ(kv.Length(1), 4);
  kv.Release(2);
  kv.Release(2);  // twice is harmless
  EXPECT_EQ(kv.free_blocks(), 5);
  EXPECT_EQ(kv.Length(2), 0);
}

TEST(PagedKvCache, RowsOfDifferentSequencesDoNotAlias) {
  PagedKvCache kv(SmallShape(4));
  ASSERT_TRUE(kv.Reserve(1, 0, 4).ok());
  ASSERT_TRUE(kv.Reserve(2, 0, 4).ok());
  for (int layer = 0; layer < 2; ++layer) {
    for (int p = 0; p < 4; ++p) {
      std::fill_n(kv.K(layer, 1, p), kv.row_elems(), 1.0f + layer);
      std::fill_n(kv.K(layer, 2, p), kv.row_elems(), -1.0f - layer);
    }
  }
  for (int layer = 0; layer < 2; ++layer) {
    for (int p = 0; p < 4; ++p) {
      EXPECT_EQ(kv.K(layer, 1, p)[0], 1.0f + layer);
      EXPECT_EQ(kv.K(layer, 2, p)[kv.row_elems() - 1], -1.0f - layer);
    }
  }
}

}  // namespace
}  // namespace specline
