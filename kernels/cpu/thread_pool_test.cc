// The CPU thread pool: how ParallelFor partitions a range (the same chunks
// every time: results never depend on timing), wake-ups, inline pools of
// one, exceptions.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/cpu_features.h"
#include "kernels/cpu/fp16_portable.h"
#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/cpu/weight_codec.h"
#include "kernels/dtype.h"

namespace specline::kernels {
namespace {

// Records the chunks of one ParallelFor call, sorted.
std::vector<std::pair<int64_t, int64_t>> Chunks(ThreadPool& pool, int64_t n, int64_t grain) {
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  pool.ParallelFor(n, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(mu);
    chunks.emplace_back(b, e);
  }, grain);
  std::sort(chunks.begin(), chunks.end());
  return chunks;
}

TEST(ThreadPoolTest, ChunksCoverRangeOnceOnGrainBoundaries) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {1, 2, 3, 7, 64, 100, 1001}) {
      for (int64_t grain : {1, 3, 8, 24, 5000}) {
        const auto chunks = Chunks(pool, n, grain);
        ASSERT_FALSE(chunks.empty());
        // A few chunks per thread (claimed dynamically), never more.
        EXPECT_LE(static_cast<int>(chunks.size()), 4 * threads);
        if (threads == 1) {
          EXPECT_EQ(chunks.size(), 1u);
        }
        int64_t next = 0;
        for (const auto& [b, e] : chunks) {
          EXPECT_EQ(b, next);
          EXPECT_LT(b, e);
          EXPECT_EQ(b % grain, 0);
          next = e;
        }
        EXPECT_EQ(next, n);
        EXPECT_EQ(Chunks(pool, n, grain), chunks);  // same partition every time
      }
    }
  }
}

TEST(ThreadPoolTest, ZeroLengthCallsNothing) {
  ThreadPool pool(2);
  bool called = false;
  pool.ParallelFor(0, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ThreadPoolTest, ManyTinyCalls) {
  ThreadPool pool(2);
  std::atomic<int64_t> sum{0};
  for (int i = 0; i < 20000; ++i) {
    pool.ParallelFor(2, [&](int64_t b, int64_t e) {
      for (int64_t j = b; j < e; ++j) sum += j + 1;
    });
  }
  EXPECT_EQ(sum.load(), 20000 * 3);
}

TEST(ThreadPoolTest, WakesSleepingWorkers) {
  ThreadPool pool(3);
  for (int round = 0; round < 3; ++round) {
    // Long enough for the workers to give up spinning and block.
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::atomic<int> chunks{0};
    pool.ParallelFor(3, [&](int64_t, int64_t) { ++chunks; });
    EXPECT_EQ(chunks.load(), 3);
  }
}

TEST(ThreadPoolTest, PoolOfOneRunsInline) {
  ThreadPool pool(1);
  const auto caller = std::this_thread::get_id();
  int calls = 0;
  pool.ParallelFor(100, [&](int64_t b, int64_t e) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 100);
    ++calls;
  });
  EXPECT_EQ(calls, 1);
}

TEST(ThreadPoolTest, PropagatesExceptions) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.ParallelFor(10, [&](int64_t b, int64_t) {
    if (b > 0) throw std::runtime_error("worker failed");
  }), std::runtime_error);
  // The pool stays usable.
  std::atomic<int64_t> n{0};
  pool.ParallelFor(10, [&](int64_t b, int64_t e) { n += e - b; });
  EXPECT_EQ(n.load(), 10);
}

}  // namespace
}  // namespace specline::kernels
