// KV admission arithmetic: worst-case blocks per request, reservations.
#include <gtest/gtest.h>

#include "scheduler/kv_budget.h"

namespace specline::scheduler {
namespace {

TEST(KvBudgetTest, WorstCaseRoundsUpToBlocksAndCapsAtTheContext) {
  KvBudget b(100, 16);  // 6 whole blocks
  EXPECT_EQ(b.capacity_tokens(), 96);
  EXPECT_EQ(b.WorstCaseBlocks(10, 6, 2048), 1);
  EXPECT_EQ(b.WorstCaseBlocks(10, 7, 2048), 2);
  EXPECT_EQ(b.WorstCaseBlocks(60, 1000, 64), 4);
  EXPECT_TRUE(b.TryReserve(4));
  EXPECT_FALSE(b.TryReserve(3));
  EXPECT_EQ(b.free_tokens(), 32);
  b.Return(4);
  EXPECT_EQ(b.free_tokens(), 96);
}

}  // namespace
}  // namespace specline::scheduler
