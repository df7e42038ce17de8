// A fixed pool of worker threads for data-parallel loops. One pool per stage
// slice, so stages sharing a process do not contend for one global pool
// (which OpenMP's would be).
#pragma once

#include <cstdint>
#include <functional>

namespace specline::kernels {

class ThreadPool {
 public:
  // num_threads <= 0 means "all hardware threads". The calling thread takes
  // part in every ParallelFor, so a pool of 1 runs everything inline.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;

  // Splits [0, n) into contiguous chunks and calls fn(begin, end) for each,
  // returning when all are done. Chunk boundaries depend only on n, grain and
  // size(), never on timing. Not re-entrant: fn must not call ParallelFor on
  // the same pool.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                   int64_t grain = 1);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace specline::kernels
