// MatMul benchmark: the machine's memory bandwidth (memcpy and a read-only
// streaming sum), then specline's GEMV (m = 1) and GEMM (m > 1) per weight
// dtype at stories110M-like shapes, with OpenBLAS's sgemv/sgemm alongside for
// fp32 when it was found at configure time. Prints a table and writes JSON.
//
// GEMV numbers are "cold": the bench rotates through enough copies of W to
// exceed the last-level cache several times over, as decode does (a model's
// weights do not fit in cache), so GB/s is DRAM bandwidth and comparable
// with the copy bandwidth. GB/s counts the weight bytes only.
//
// Usage: matmul_bench [--json PATH] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/ops.h"
#include "kernels/cpu/thread_pool.h"
#include "kernels/dtype.h"

#if SPECLINE_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace {

using specline::DType;
using specline::kernels::MatMul;
using specline::kernels::ThreadPool;
using specline::kernels::WeightMatrix;

using Clock = std::chrono::steady_clock;

// Median wall time of fn over repeats: at least min_reps and ~min_seconds.
double MedianSeconds(const std::function<void()>& fn, double min_seconds,
                     int min_reps = 5) {
  fn();  // warm up (page faults, thread wake-up, lazy init)
  std::vector<double> times;
  const auto start = Clock::now();
  while (static_cast<int>(times.size()) < min_reps ||
         (std::chrono::duration<double>(Clock::now() - start).count() < min_seconds &&
          times.size() < 2000)) {
    const auto t0 = Clock::now();
    fn();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

struct Row {
  std::string op;    // gemv, gemm, memcpy, read
  std::string impl;  // specline, openblas, libc
  std::string dtype;
  int64_t rows = 0, cols = 0, m = 0;
  int threads = 1;
  double seconds = 0, gbps = 0, gflops = 0, frac_copy = 0, frac_read = 0;
};

std::vector<Row> g_rows;

void Print(const Row& r) {
  std::printf("%-6s %-8s %-5s %6lld %6lld %4lld %2d  %10.1f us  %7.2f GB/s  %6.1f%% copy  %6.1f%% read  %7.2f GFLOP/s\n",
              r.op.c_str(), r.impl.c_str(), r.dtype.c_str(),
              static_cast<long long>(r.rows), static_cast<long long>(r.cols),
              static_cast<long long>(r.m), r.threads, r.seconds * 1e6, r.gbps,
              100 * r.frac_copy, 100 * r.frac_read, r.gflops);
  std::fflush(stdout);
  g_rows.push_back(r);
}

// Copy bandwidth counted as bytes read + bytes written (STREAM convention),
// and read-only bandwidth of a streaming sum, both with `threads` threads.
struct Bandwidth {
  double copy = 0, read = 0;
};

Bandwidth MeasureBandwidth(ThreadPool& pool, double min_seconds) {
  const size_t bytes = size_t{256} << 20;
  std::vector<uint64_t> src(bytes / 8, 1), dst(bytes / 8, 0);  // touched: no page faults timed
  const int64_t n = static_cast<int64_t>(src.size());
  const double copy_s = MedianSeconds([&] {
    pool.ParallelFor(n, [&](int64_t b, int64_t e) {
      std::memcpy(dst.data() + b, src.data() + b, (e - b) * 8);
    }, 4096);
  }, min_seconds);
  // Read-only: sum with four independent 8-wide float accumulators (GCC
  // vector extension, so it is SIMD on any target) and the same 32 KiB
  // software prefetch distance as the GEMV kernel: the best streaming read
  // this machine does, which GEMV cannot beat.
  typedef float V8 __attribute__((vector_size(32)));
  const auto* vsrc = reinterpret_cast<const V8*>(src.data());
  const int64_t nv = static_cast<int64_t>(bytes / sizeof(V8));
  std::vector<float> partial(pool.size() * 16, 0.0f);
  const double read_s = MedianSeconds([&] {
    pool.ParallelFor(nv, [&](int64_t b, int64_t e) {
      V8 a0{}, a1{}, a2{}, a3{};
      for (int64_t i = b; i + 4 <= e; i += 4) {
        __builtin_prefetch(vsrc + i + 1024);
        V8 v0, v1, v2, v3;
        std::memcpy(&v0, vsrc + i, 32);
        std::memcpy(&v1, vsrc + i + 1, 32);
        std::memcpy(&v2, vsrc + i + 2, 32);
        std::memcpy(&v3, vsrc + i + 3, 32);
        a0 += v0; a1 += v1; a2 += v2; a3 += v3;
      }
      const V8 t = a0 + a1 + a2 + a3;
      partial[(b * pool.size() / nv) * 16] = t[0] + t[7];
    }, 1024);
  }, min_seconds);
  float sink = 0;
  for (float v : partial) sink += v;
  if (sink == 42.0f) std::puts("");  // keep the sum alive
  return {2.0 * bytes / copy_s / 1e9, bytes / read_s / 1e9};
}

// Random weights of the given dtype, `copies` independent matrices laid out
// back to back. Quant blocks get random codes and a small fp16 scale.
std::vector<uint8_t> RandomWeights(DType t, int64_t rows, int64_t cols,
                                   int copies, std::mt19937& rng) {
  const int64_t row_bytes = *specline::RowBytes(t, cols);
  std::vector<uint8_t> buf(static_cast<size_t>(row_bytes * rows * copies));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto* p = buf.data();
  const int64_t elems = rows * cols * copies;
  using namespace specline::kernels;
  switch (t) {
    case DType::kF32:
      for (int64_t i = 0; i < elems; ++i) reinterpret_cast<float*>(p)[i] = u(rng);
      break;
    case DType::kF16:
    case DType::kBF16:
      for (int64_t i = 0; i < elems; ++i) {
        uint16_t h = t == DType::kF16 ? F32ToF16(u(rng)) : F32ToBF16(u(rng));
        std::memcpy(p + 2 * i, &h, 2);
      }
      break;
    default: {
      for (auto& b : buf) b = static_cast<uint8_t>(rng());
      const int64_t bb = specline::BlockBytes(t);
      const uint16_t d = F32ToF16(0.01f);
      // Offsets of the fp16 scales: d, and m / dmin where there is one.
      int d_off = 0, m_off = -1;
      switch (t) {
        case DType::kQ4_1: case DType::kQ5_1: case DType::kQ4_K: case DType::kQ5_K:
          m_off = 2;
          break;
        case DType::kQ2_K: d_off = 80; m_off = 82; break;
        case DType::kQ3_K: d_off = 108; break;
        case DType::kQ6_K: d_off = 208; break;
        default: break;
      }
      for (size_t off = 0; off + bb <= buf.size(); off += bb) {
        std::memcpy(p + off + d_off, &d, 2);
        if (m_off >= 0) std::memcpy(p + off + m_off, &d, 2);
      }
    }
  }
  return buf;
}

constexpr int64_t kColdBytes = int64_t{192} << 20;  // 6x a 32 MiB L3

struct Shape {
  int64_t rows, cols;
};

void BenchGemv(DType t, Shape s, ThreadPool& pool, const Bandwidth& bw,
               double min_seconds, std::mt19937& rng) {
  const int64_t row_bytes = *specline::RowBytes(t, s.cols);
  const int64_t mat_bytes = row_bytes * s.rows;
  const int copies = static_cast<int>(std::max<int64_t>(1, kColdBytes / mat_bytes));
  auto w = RandomWeights(t, s.rows, s.cols, copies, rng);
  std::vector<float> x(s.cols, 0.5f), y(s.rows);
  int next = 0;
  const double sec = MedianSeconds([&] {
    WeightMatrix wm{t, s.rows, s.cols, w.data() + mat_bytes * next, row_bytes};
    next = (next + 1) % copies;
    MatMul(wm, x.data(), 1, y.data(), pool);
  }, min_seconds, 20);
  Row r{"gemv", "specline", std::string(specline::DTypeName(t)), s.rows, s.cols, 1, pool.size()};
  r.seconds = sec;
  r.gbps = mat_bytes / sec / 1e9;
  r.gflops = 2.0 * s.rows * s.cols / sec / 1e9;
  r.frac_copy = r.gbps / bw.copy;
  r.frac_read = r.gbps / bw.read;
  Print(r);

#if SPECLINE_HAVE_OPENBLAS
  if (t == DType::kF32) {
    openblas_set_num_threads(pool.size());
    next = 0;
    const double bsec = MedianSeconds([&] {
      const float* wp = reinterpret_cast<const float*>(w.data() + mat_bytes * next);
      next = (next + 1) % copies;
      cblas_sgemv(CblasRowMajor, CblasNoTrans, s.rows, s.cols, 1.0f, wp, s.cols,
                  x.data(), 1, 0.0f, y.data(), 1);
    }, min_seconds, 20);
    Row b = r;
    b.impl = "openblas";
    b.seconds = bsec;
    b.gbps = mat_bytes / bsec / 1e9;
    b.gflops = 2.0 * s.rows * s.cols / bsec / 1e9;
    b.frac_copy = b.gbps / bw.copy;
    b.frac_read = b.gbps / bw.read;
    Print(b);
  }
#endif
}

void BenchGemm(DType t, Shape s, int64_t m, ThreadPool& pool,
               double min_seconds, std::mt19937& rng) {
  const int64_t row_bytes = *specline::RowBytes(t, s.cols);
  auto w = RandomWeights(t, s.rows, s.cols, 1, rng);
  std::vector<float> x(m * s.cols), y(m * s.rows);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (auto& v : x) v = u(rng);
  const double flops = 2.0 * m * s.rows * s.cols;
  const double sec = MedianSeconds([&] {
    WeightMatrix wm{t, s.rows, s.cols, w.data(), row_bytes};
    MatMul(wm, x.data(), m, y.data(), pool);
  }, min_seconds, 3);
  Row r{"gemm", "specline", std::string(specline::DTypeName(t)), s.rows, s.cols, m, pool.size()};
  r.seconds = sec;
  r.gflops = flops / sec / 1e9;
  Print(r);
#if SPECLINE_HAVE_OPENBLAS
  if (t == DType::kF32) {
    openblas_set_num_threads(pool.size());
    const double bsec = MedianSeconds([&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, s.rows, s.cols,
                  1.0f, x.data(), s.cols, reinterpret_cast<const float*>(w.data()),
                  s.cols, 0.0f, y.data(), s.rows);
    }, min_seconds, 3);
    Row b = r;
    b.impl = "openblas";
    b.seconds = bsec;
    b.gflops = flops / bsec / 1e9;
    Print(b);
  }
#endif
}

void WriteJson(const std::string& path, const std::vector<Bandwidth>& bws,
               double load1) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) {
    std::perror(path.c_str());
    return;
  }
  std::fprintf(f, "{\n  \"loadavg_1min_at_start\": %.2f,\n  \"bandwidth\": [\n", load1);
  for (size_t i = 0; i < bws.size(); ++i) {
    std::fprintf(f, "    {\"threads\": %zu, \"copy_gbps\": %.3f, \"read_gbps\": %.3f}%s\n",
                 i + 1, bws[i].copy, bws[i].read, i + 1 < bws.size() ? "," : "");
  }
  std::fprintf(f, "  ],\n  \"results\": [\n");
  for (size_t i = 0; i < g_rows.size(); ++i) {
    const Row& r = g_rows[i];
    std::fprintf(f,
                 "    {\"op\": \"%s\", \"impl\": \"%s\", \"dtype\": \"%s\", \"rows\": %lld, "
                 "\"cols\": %lld, \"m\": %lld, \"threads\": %d, \"median_s\": %.9f, "
                 "\"gbps\": %.3f, \"frac_copy\": %.4f, \"frac_read\": %.4f, \"gflops\": %.3f}%s\n",
                 r.op.c_str(), r.impl.c_str(), r.dtype.c_str(),
                 static_cast<long long>(r.rows), static_cast<long long>(r.cols),
                 static_cast<long long>(r.m), r.threads, r.seconds, r.gbps,
                 r.frac_copy, r.frac_read, r.gflops, i + 1 < g_rows.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  std::fclose(f);
  std::printf("wrote %s\n", path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string json = "bench_matmul.json";
  bool quick = false;
  int max_threads = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else if (a == "--quick") {
      quick = true;
    } else if (a == "--threads" && i + 1 < argc) {
      max_threads = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: %s [--json PATH] [--quick] [--threads N]\n", argv[0]);
      return 2;
    }
  }
  const double min_s = quick ? 0.05 : 0.4;
  std::mt19937 rng(1234);
  const std::vector<Shape> shapes = {{768, 768}, {2048, 768}, {768, 2048}, {32000, 768}};
  const DType all[] = {DType::kF32,  DType::kF16,  DType::kBF16, DType::kQ8_0,
                       DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1,
                       DType::kQ2_K, DType::kQ3_K, DType::kQ4_K, DType::kQ5_K,
                       DType::kQ6_K};

  // The machine may be shared: record how busy it was, for reading the numbers.
  double load1 = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load1) != 1) load1 = -1;
    std::fclose(f);
  }
  std::printf("load average at start: %.2f\n", load1);
  std::vector<Bandwidth> bws;
  std::printf("%-6s %-8s %-5s %6s %6s %4s %2s  %13s  %12s  %11s  %11s  %15s\n", "op",
              "impl", "dtype", "rows", "cols", "m", "th", "median", "weights",
              "of copy", "of read", "compute");
  for (int threads = 1; threads <= max_threads; ++threads) {
    ThreadPool pool(threads);
    const Bandwidth bw = MeasureBandwidth(pool, min_s);
    bws.push_back(bw);
    std::printf("bandwidth, %d thread(s): memcpy %.2f GB/s (read+write), streaming read %.2f GB/s\n",
                threads, bw.copy, bw.read);
    for (const Shape& s : shapes) BenchGemv(DType::kF32, s, pool, bw, min_s, rng);
    for (DType t : all) {
      if (t != DType::kF32) BenchGemv(t, {32000, 768}, pool, bw, min_s, rng);
    }
    for (int64_t m : {64, 256}) {
      for (const Shape& s : shapes) BenchGemm(DType::kF32, s, m, pool, min_s, rng);
    }
    for (DType t : all) {
      if (t != DType::kF32) BenchGemm(t, {2048, 768}, 64, pool, min_s, rng);
    }
  }
  WriteJson(json, bws, load1);
  return 0;
}
