#include "scheduler/prefix_cache.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace specline::scheduler {
namespace {

std::vector<int32_t> Tokens(int n, int32_t first = 1) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Caches every full block of `tokens` as one sequence that then finished.
void CacheAll(PrefixCache& c, const std::vector<uint64_t>& keys,
              const std::vector<int32_t>& tokens, uint64_t salt) {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!c.Contains(keys[i])) c.Insert(keys, static_cast<int>(i), tokens, salt, 0);
  }
  c.Unref(keys);
}

TEST(PrefixCache, KeysChainOverTheWholePrefix) {
  PrefixCache c(4);
  const uint64_t salt = PrefixCache::Salt("m.gguf", 0, 0, "");
  std::vector<int32_t> a = Tokens(12), b = Tokens(12);
  b[5] = 999;  // block 1 differs
  const auto ka = c.BlockKeys(a, 3, salt), kb = c.BlockKeys(b, 3, salt);
  ASSERT_EQ(ka.size(), 3u);
  EXPECT_EQ(ka[0], kb[0]);
  EXPECT_NE(ka[1], kb[1]);
  EXPECT_NE(ka[2], kb[2]);  // same tokens in block 2, different history
  EXPECT_EQ(c.BlockKeys(a, 10, salt).size(), 3u);  // only full blocks
  // Another weight set or adapter never shares a key with the base model.
  EXPECT_NE(c.BlockKeys(a, 1, PrefixCache::Salt("m.gguf", 1, 0, ""))[0], ka[0]);
  EXPECT_NE(c.BlockKeys(a, 1, PrefixCache::Salt("m.gguf", 0, 1, ""))[0], ka[0]);
  EXPECT_NE(c.BlockKeys(a, 1, PrefixCache::Salt("other.gguf", 0, 0, ""))[0], ka[0]);
}

// The cache scope (a principal's namespace and cache_salt, as the gateway
// encodes them) splits the cache: the same prompt cached under one scope is
// a miss under any other, a hit under the same one.
TEST(PrefixCache, ScopesNeverShareBlocks) {
  PrefixCache c(4);
  const std::vector<int32_t> prompt = Tokens(12);
  const uint64_t alice = PrefixCache::Salt("m.gguf", 0, 0, "alice-scope");
  const uint64_t bob = PrefixCache::Salt("m.gguf", 0, 0, "bob-scope");
  const uint64_t shared = PrefixCache::Salt("m.gguf", 0, 0, "");
  EXPECT_EQ(alice, PrefixCache::Salt("m.gguf", 0, 0, "alice-scope"));
  EXPECT_NE(alice, bob);
  EXPECT_NE(alice, shared);
  // The scope is hashed with its length: bytes cannot move between the
  // model's name and the scope.
  EXPECT_NE(PrefixCache::Salt("m.gguf", 0, 0, "x"), PrefixCache::Salt("m.ggufx", 0, 0, ""));
  const auto ka = c.BlockKeys(prompt, 3, alice);
  CacheAll(c, ka, prompt, alice);
  EXPECT_EQ(c.Match(ka, prompt, alice, 3), 3);
  const auto kb = c.BlockKeys(prompt, 3, bob);
  EXPECT_EQ(c.Match(kb, prompt, bob, 3), 0);
  EXPECT_EQ(c.Match(c.BlockKeys(prompt, 3, shared), prompt, shared, 3), 0);
}

TEST(PrefixCache, MatchFindsTheLongestCachedPrefixUpToTheCap) {
  PrefixCache c(4);
  const uint64_t salt = 7;
  const std::vector<int32_t> a = Tokens(16);
  const auto ka = c.BlockKeys(a, 4, salt);
  CacheAll(c, std::vector<uint64_t>(ka.begin(), ka.begin() + 3), a, salt);
  EXPECT_EQ(c.Match(ka, a, salt, 4), 3);
  EXPECT_EQ(c.Match(ka, a, salt, 2), 2);
  std::vector<int32_t> b = a;
  b[9] = 0;  // diverges in block 2
  EXPECT_EQ(c.Match(c.BlockKeys(b, 4, salt), b, salt, 4), 2);
  // A key that names other content (a collision) is a miss, not a hit.
  EXPECT_EQ(c.Match(ka, b, salt, 4), 2);
  EXPECT_EQ(c.Match(ka, a, salt + 1, 4), 0);
}

TEST(PrefixCache, EvictsUnreferencedBlocksDeepestAndOldestFirst) {
  PrefixCache c(2);
  const uint64_t salt = 1;
  const std::vector<int32_t> a = Tokens(6), b = Tokens(6, 100);
  const auto ka = c.BlockKeys(a, 3, salt), kb = c.BlockKeys(b, 3, salt);
  CacheAll(c, ka, a, salt);  // older
  CacheAll(c, kb, b, salt);
  EXPECT_EQ(c.cached_blocks(), 6);
  EXPECT_EQ(c.evictable_blocks(), 6);
  // A sequence holding b's first two blocks protects them.
  c.Ref(std::span(kb).first(2));
  EXPECT_EQ(c.evictable_blocks(), 4);
  const auto evicted = c.EvictLru(4);
  ASSERT_EQ(evicted.size(), 4u);
  EXPECT_EQ(evicted[0].key, ka[2]);  // a's chain from its deepest block
  EXPECT_EQ(evicted[1].key, ka[1]);
  EXPECT_EQ(evicted[2].key, ka[0]);
  EXPECT_EQ(evicted[3].key, kb[2]);
  EXPECT_TRUE(c.EvictLru(1).empty());  // the rest is held
  c.Unref(std::span(kb).first(2));
  EXPECT_EQ(c.evictable_blocks(), 2);
  c.Clear();
  EXPECT_EQ(c.cached_blocks(), 0);
  c.Unref(kb);  // after a reset: unknown keys are ignored
  EXPECT_EQ(c.evictable_blocks(), 0);
}

// After a stage disagreed on a sequence's keys: unreferenced ones are
// evicted at once, held ones stop matching and are evicted by their last
// holder's Unref; a forgotten key is not published again until then.
TEST(PrefixCache, ForgottenKeysMatchNothingAndLeaveWithTheirLastHolder) {
  PrefixCache c(2);
  const uint64_t salt = 3;
  const std::vector<int32_t> a = Tokens(6);
  const auto ka = c.BlockKeys(a, 3, salt);
  CacheAll(c, ka, a, salt);
  c.Ref(std::span(ka).first(1));  // another sequence holds block 0
  const auto now = c.Forget(ka);
  ASSERT_EQ(now.size(), 2u);  // blocks 1 and 2: nobody held them
  EXPECT_EQ(c.cached_blocks(), 1);
  EXPECT_EQ(c.evictable_blocks(), 0);
  EXPECT_EQ(c.Match(ka, a, salt, 3), 0);
  EXPECT_TRUE(c.Contains(ka[0]));  // still there: no one may publish it again yet
  EXPECT_TRUE(c.Forget(ka).empty());  // forgetting twice changes nothing
  const auto later = c.Unref(std::span(ka).first(1));
  ASSERT_EQ(later.size(), 1u);
  EXPECT_EQ(later[0].key, ka[0]);
  EXPECT_EQ(c.cached_blocks(), 0);
  EXPECT_TRUE(c.Unref(std::span(ka).first(1)).empty());
}

}  // namespace
}  // namespace specline::scheduler
