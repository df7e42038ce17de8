// Run-time check that the CPU has the instruction set the kernels were
// built for (cpu_features.cc says why).
#pragma once

#include <string>

namespace specline::kernels {

// Names of the features this build needs and the CPU lacks ("" when none).
std::string MissingCpuFeatures();

// Aborts with a message naming the missing features and the rebuild flag;
// checks once per process. Called by every ThreadPool.
void RequireCpuFeatures();

}  // namespace specline::kernels
