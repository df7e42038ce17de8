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

// Prefix sharing: block size 4, so positions [0, 8) are blocks 0 and 1.
TEST(PagedKvCachePrefix, AttachSharesPublishedBlocksWithoutCopy) {
  PagedKvCache kv(SmallShape(8));
  ASSERT_TRUE(kv.Reserve(1, 0, 10).ok());  // 3 blocks
  const uint64_t keys[] = {101, 102};
  ASSERT_TRUE(kv.Publish(1, 0, keys).ok());
  EXPECT_EQ(kv.cached_blocks(), 2);
  EXPECT_EQ(kv.evictable_blocks(), 0);
  ASSERT_TRUE(kv.Attach(2, keys).ok());
  EXPECT_EQ(kv.Length(2), 8);
  EXPECT_EQ(kv.BlockTable(2)[0], kv.BlockTable(1)[0]);
  EXPECT_EQ(kv.BlockTable(2)[1], kv.BlockTable(1)[1]);
  EXPECT_EQ(kv.free_blocks(), 5);  // nothing new taken
  // Sequence 2 writes on from its shared prefix into a block of its own.
  ASSERT_TRUE(kv.Reserve(2, 8, 3).ok());
  EXPECT_NE(kv.BlockTable(2)[2], kv.BlockTable(1)[2]);
  EXPECT_EQ(kv.free_blocks(), 4);
}

TEST(PagedKvCachePrefix, SharedBlocksAreReadOnly) {
  PagedKvCache kv(SmallShape(8));
  ASSERT_TRUE(kv.Reserve(1, 0, 8).ok());
  const uint64_t keys[] = {7, 8};
  ASSERT_TRUE(kv.Publish(1, 0, keys).ok());
  ASSERT_TRUE(kv.Attach(2, keys).ok());
  // A write into the middle of a shared block (a rollback below the
  // prefix) is refused and changes nothing.
  EXPECT_EQ(kv.Reserve(2, 6, 1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(kv.Reserve(1, 5, 1).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(kv.Length(2), 8);
  // A rewrite from a block boundary drops only this sequence's reference:
  // the cached block stays, and the rewrite takes a block of its own.
  const int32_t shared = kv.BlockTable(2)[1];
  ASSERT_TRUE(kv.Reserve(2, 4, 2).ok());
  EXPECT_NE(kv.BlockTable(2)[1], shared);
  EXPECT_TRUE(kv.HasKey(8));
  EXPECT_EQ(kv.BlockTable(1)[1], shared);
}

TEST(PagedKvCachePrefix, ReleasedBlocksStayCachedUntilEvicted) {
  PagedKvCache kv(SmallShape(4));
  ASSERT_TRUE(kv.Reserve(1, 0, 9).ok());
  const uint64_t keys[] = {1, 2};
  ASSERT_TRUE(kv.Publish(1, 0, keys).ok());
  ASSERT_TRUE(kv.Attach(2, keys).ok());
  kv.Release(1);  // its third block was private: free again
  EXPECT_EQ(kv.free_blocks(), 2);
  EXPECT_EQ(kv.evictable_blocks(), 0);  // sequence 2 still holds both
  kv.Release(2);
  EXPECT_EQ(kv.evictable_blocks(), 2);
  EXPECT_EQ(kv.free_blocks(), 2);
  // A new sequence cannot take cached blocks before they are evicted.
  EXPECT_EQ(kv.Reserve(3, 0, 12).code(), absl::StatusCode::kResourceExhausted);
  const uint64_t first[] = {2};
  EXPECT_EQ(kv.Evict(first), 0);
  EXPECT_EQ(kv.free_blocks(), 3);
  EXPECT_TRUE(kv.HasKey(1));
  EXPECT_FALSE(kv.HasKey(2));
  ASSERT_TRUE(kv.Reserve(3, 0, 12).ok());
  kv.Release(3);
  kv.DropCachedBlocks();
  EXPECT_EQ(kv.free_blocks(), 4);
  EXPECT_EQ(kv.cached_blocks(), 0);
}

// Two sequences computed the same first block; the first published it.
// The second swaps its own copy for the cached block (freeing its copy)
// and can then publish its next block on the whole chain.
TEST(PagedKvCachePrefix, AdoptSwapsAnOwnCopyForTheCachedBlock) {
  PagedKvCache kv(SmallShape(8));
  ASSERT_TRUE(kv.Reserve(1, 0, 4).ok());
  ASSERT_TRUE(kv.Reserve(2, 0, 8).ok());
  EXPECT_EQ(kv.free_blocks(), 5);
  const uint64_t first[] = {11};
  ASSERT_TRUE(kv.Publish(1, 0, first).ok());
  const int32_t own = kv.BlockTable(2)[0];
  ASSERT_TRUE(kv.Adopt(2, 0, 11).ok());
  EXPECT_EQ(kv.BlockTable(2)[0], kv.BlockTable(1)[0]);
  EXPECT_NE(kv.BlockTable(2)[0], own);
  EXPECT_EQ(kv.free_blocks(), 6);  // its copy is back in the pool
  const uint64_t second[] = {12};
  ASSERT_TRUE(kv.Publish(2, 1, second).ok());
  kv.Release(1);
  kv.Release(2);
  EXPECT_EQ(kv.evictable_blocks(), 2);  // both keys stay cached, held by nobody
  EXPECT_EQ(kv.free_blocks(), 6);
  // Refused: an unknown key, a block not full, a block that is not its own.
  ASSERT_TRUE(kv.Reserve(3, 0, 6).ok());
  EXPECT_FALSE(kv.Adopt(3, 0, 99).ok());
  EXPECT_FALSE(kv.Adopt(3, 1, 11).ok());
  const uint64_t both[] = {11, 12};
  ASSERT_TRUE(kv.Attach(4, both).ok());
  const int32_t shared = kv.BlockTable(4)[1];
  EXPECT_FALSE(kv.Adopt(4, 1, 11).ok());
  EXPECT_EQ(kv.BlockTable(4)[1], shared);
}

TEST(PagedKvCachePrefix, DisagreementsAreRefusedAndChangeNothing) {
  PagedKvCache kv(SmallShape(8));
  ASSERT_TRUE(kv.Reserve(1, 0, 6).ok());
  const uint64_t two[] = {5, 6};
  // Block 1 is not full (positions 4, 5 of 8).
  EXPECT_EQ(kv.Publish(1, 0, two).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(kv.cached_blocks(), 0);
  const uint64_t one[] = {5};
  ASSERT_TRUE(kv.Publish(1, 0, one).ok());
  EXPECT_FALSE(kv.Publish(1, 0, one).ok());  // published already
  ASSERT_TRUE(kv.Reserve(2, 0, 4).ok());
  EXPECT_FALSE(kv.Publish(2, 0, one).ok());  // the key names another block
  const uint64_t unknown[] = {5, 99};
  EXPECT_FALSE(kv.Attach(3, unknown).ok());
  EXPECT_EQ(kv.Length(3), 0);
  EXPECT_FALSE(kv.Attach(2, one).ok());  // sequence 2 holds positions already
  EXPECT_TRUE(kv.HasKey(5));
}

// Eviction never fails (a batch must not fail on cache bookkeeping): an
// unknown key is skipped, and a block a sequence still holds loses its key
// at once and returns to the pool when its holders let go. Both count as
// unexpected, for the caller to report.
TEST(PagedKvCachePrefix, EvictionIsTotalAndHeldBlocksFreeOnRelease) {
  PagedKvCache kv(SmallShape(4));
  ASSERT_TRUE(kv.Reserve(1, 0, 8).ok());
  const uint64_t keys[] = {1, 2};
  ASSERT_TRUE(kv.Publish(1, 0, keys).ok());
  ASSERT_TRUE(kv.Attach(2, keys).ok());
  const uint64_t held_and_unknown[] = {2, 99};
  EXPECT_EQ(kv.Evict(held_and_unknown), 2);
  EXPECT_FALSE(kv.HasKey(2));
  EXPECT_TRUE(kv.HasKey(1));
  EXPECT_EQ(kv.free_blocks(), 2);
  kv.Release(1);
  EXPECT_EQ(kv.free_blocks(), 2);  // sequence 2 still holds both blocks
  kv.Release(2);
  EXPECT_EQ(kv.free_blocks(), 3);  // the unkeyed block is back, the keyed one cached
  EXPECT_EQ(kv.evictable_blocks(), 1);
  const uint64_t first[] = {1};
  EXPECT_EQ(kv.Evict(first), 0);
  EXPECT_EQ(kv.free_blocks(), 4);
  EXPECT_EQ(kv.cached_blocks(), 0);
  // The same key can be published again once evicted.
  ASSERT_TRUE(kv.Reserve(3, 0, 4).ok());
  EXPECT_TRUE(kv.Publish(3, 0, first).ok());
}

}  // namespace
}  // namespace specline
