// The instruction set the kernels were compiled for, checked against the
// CPU they run on. The build targets x86-64-v3 (AVX2, FMA, F16C) by default
// (SPECLINE_ARCH_FLAGS); on an older x86 CPU the first AVX2 instruction
// would kill the process with SIGILL and no word of why, so the first
// thread pool checks once and stops with a message naming the fix instead.
// Other targets (or SPECLINE_ARCH_FLAGS="") build the portable path.
#include "kernels/cpu/cpu_features.h"

#include <cstdio>
#include <cstdlib>

#include "kernels/cpu/simd.h"

namespace specline::kernels {

std::string MissingCpuFeatures() {
  std::string missing;
#if SPECLINE_KERNELS_AVX2 && (defined(__x86_64__) || defined(__i386__))
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx2")) missing += " avx2";
  if (!__builtin_cpu_supports("fma")) missing += " fma";
  // F16C has no __builtin_cpu_supports name in every GCC; AVX2 CPUs have it.
#endif
  return missing;
}

void RequireCpuFeatures() {
  static const bool checked = [] {
    const std::string missing = MissingCpuFeatures();
    if (!missing.empty()) {
      std::fprintf(stderr,
                   "specline: this build's CPU kernels need x86-64-v3 (AVX2, FMA, F16C); this "
                   "CPU lacks:%s. Rebuild with -DSPECLINE_ARCH_FLAGS=\"\" (portable kernels) "
                   "or -DSPECLINE_ARCH_FLAGS=-march=native.\n",
                   missing.c_str());
      std::abort();
    }
    return true;
  }();
  (void)checked;
}

}  // namespace specline::kernels
