// Persistent workers with a spin-then-sleep wait. Decode issues ~10
// ParallelFor calls per layer a few microseconds apart, so a worker that has
// just finished keeps spinning for a short while (waking a sleeping thread
// through the kernel costs tens of microseconds) and only then blocks on a
// futex (std::atomic::wait), so an idle pool burns no CPU.
//
// Partitioning is static, assignment is dynamic: [0, n) is cut into up to
// kChunksPerThread * size() chunks whose bounds depend only on (n, grain,
// size()), and participants (the caller included) claim chunks from a shared
// counter. A worker that is descheduled (other processes on the core, or
// several pipeline stages sharing cores) then delays nobody: the caller just
// claims its chunks. Which thread runs a chunk varies, what a chunk computes
// does not, so kernels whose outputs depend only on their index range (all
// of ops.h) are bit-identical run to run.
#include "kernels/cpu/thread_pool.h"

#include "kernels/cpu/cpu_features.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace specline::kernels {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long an idle worker spins before sleeping. Long enough to bridge the
// gap between consecutive kernels of one decode step, short enough that an
// idle server does not keep cores busy.
constexpr auto kSpinTime = std::chrono::microseconds(200);

}  // namespace

// Chunks per participant: enough slack to rebalance around a late worker,
// few enough that per-chunk costs (GEMM panel set-up) stay negligible.
constexpr int64_t kChunksPerThread = 4;

struct ThreadPool::Impl {
  int size = 1;
  std::vector<std::thread> workers;

  // Serializes ParallelFor callers (the pool has one job slot).
  std::mutex call_mutex;

  // The current job. Written by the caller before it publishes `state`
  // (release); read by a participant only after it has claimed a chunk of
  // this job, and the caller does not return (and so cannot rewrite them)
  // before every claimed chunk is done.
  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t chunk = 0;  // elements per chunk, a multiple of grain

  // (job id << 32) | (chunk count << 16) | next unclaimed chunk. Claiming is
  // a CAS on the whole word, so a participant still looking at a finished
  // job cannot claim a chunk of the next one.
  alignas(64) std::atomic<uint64_t> state{0};
  alignas(64) std::atomic<uint32_t> done{0};  // chunks finished in this job
  alignas(64) std::atomic<uint32_t> wake{0};  // futex word, bumped per job
  alignas(64) std::atomic<int> sleepers{0};
  std::atomic<bool> stop{false};
  uint32_t job = 0;

  std::mutex error_mutex;
  std::exception_ptr error;

  void RunChunk(int64_t c) {
    const int64_t begin = c * chunk;
    const int64_t end = std::min(n, begin + chunk);
    try {
      (*fn)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  }

  // Claims and runs chunks of the current job until none are left.
  void Participate() {
    uint64_t s = state.load(std::memory_order_acquire);
    for (;;) {
      const uint64_t next = s & 0xffff;
      const uint64_t total = (s >> 16) & 0xffff;
      if (next >= total) return;
      if (state.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        RunChunk(static_cast<int64_t>(next));
        done.fetch_add(1, std::memory_order_release);
        s = state.load(std::memory_order_acquire);
      }
    }
  }

  void WorkerLoop() {
    uint32_t seen = 0;
    for (;;) {
      // Spin, checking the clock only every few hundred iterations.
      auto deadline = std::chrono::steady_clock::now() + kSpinTime;
      uint32_t cur;
      for (int i = 1;; ++i) {
        cur = wake.load(std::memory_order_acquire);
        if (cur != seen) break;
        CpuRelax();
        if (i % 256 == 0 && std::chrono::steady_clock::now() > deadline) {
          // Dekker-style handshake with ParallelFor: announce the sleep, then
          // re-check inside wait(); the caller bumps `wake` before reading
          // `sleepers`, both seq_cst, so one side always sees the other.
          sleepers.fetch_add(1, std::memory_order_seq_cst);
          wake.wait(seen, std::memory_order_seq_cst);
          sleepers.fetch_sub(1, std::memory_order_relaxed);
          deadline = std::chrono::steady_clock::now() + kSpinTime;
        }
      }
      seen = cur;
      if (stop.load(std::memory_order_acquire)) return;
      Participate();
    }
  }
};

ThreadPool::ThreadPool(int num_threads) : impl_(new Impl) {
  RequireCpuFeatures();
  if (num_threads <= 0) {
    num_threads = static_cast<int>(std::thread::hardware_concurrency());
  }
  impl_->size = std::max(1, num_threads);
  impl_->workers.reserve(impl_->size - 1);
  for (int i = 1; i < impl_->size; ++i) {
    impl_->workers.emplace_back([this] { impl_->WorkerLoop(); });
  }
}

ThreadPool::~ThreadPool() {
  impl_->stop.store(true, std::memory_order_release);
  impl_->wake.fetch_add(1, std::memory_order_seq_cst);
  impl_->wake.notify_all();
  for (auto& t : impl_->workers) t.join();
  delete impl_;
}

int ThreadPool::size() const { return impl_->size; }

void ThreadPool::ParallelFor(int64_t n,
                             const std::function<void(int64_t, int64_t)>& fn,
                             int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  Impl& p = *impl_;
  const int64_t grains = (n + grain - 1) / grain;
  if (p.size == 1 || grains == 1) {
    fn(0, n);
    return;
  }

  std::lock_guard<std::mutex> call_lock(p.call_mutex);
  // Equal chunks of whole grains (the last may be short), at most 65535.
  const int64_t max_chunks = std::min<int64_t>(0xffff, kChunksPerThread * p.size);
  const int64_t target = std::min(grains, max_chunks);
  p.chunk = (grains + target - 1) / target * grain;
  const int64_t chunks = (n + p.chunk - 1) / p.chunk;
  p.fn = &fn;
  p.n = n;
  p.error = nullptr;
  p.done.store(0, std::memory_order_relaxed);
  ++p.job;
  p.state.store((static_cast<uint64_t>(p.job) << 32) |
                    (static_cast<uint64_t>(chunks) << 16),
                std::memory_order_release);
  p.wake.fetch_add(1, std::memory_order_seq_cst);
  if (p.sleepers.load(std::memory_order_seq_cst) > 0) p.wake.notify_all();

  p.Participate();

  for (int i = 1; p.done.load(std::memory_order_acquire) != chunks; ++i) {
    CpuRelax();
    // A worker holding a chunk may be descheduled; give it the core rather
    // than spinning through our whole time slice.
    if (i % 1024 == 0) std::this_thread::yield();
  }
  p.fn = nullptr;
  if (p.error) std::rethrow_exception(p.error);
}

}  // namespace specline::kernels
