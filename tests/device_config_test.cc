// --device / --dtype parsing, shared by specline-stage, specline-scheduler
// and `specline serve`.
#include <gtest/gtest.h>

#include "model/runtime/device_config.h"

namespace specline {
namespace {

TEST(DeviceConfig, ParsesCpuAndCudaForms) {
  auto cpu = ParseDeviceSpec("cpu", "bf16");
  ASSERT_TRUE(cpu.ok());
  EXPECT_FALSE(cpu->cuda);
  EXPECT_EQ(cpu->ToString(), "cpu");
  if (!BuiltWithCuda()) GTEST_SKIP() << "built without the CUDA backend";
  auto any = ParseDeviceSpec("cuda", "f16");
  ASSERT_TRUE(any.ok());
  EXPECT_TRUE(any->cuda);
  EXPECT_EQ(any->ordinal, -1);
  EXPECT_EQ(any->dtype, DType::kF16);
  EXPECT_EQ(any->ToString(), "cuda");
  auto one = ParseDeviceSpec("cuda:3", "bf16");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->ordinal, 3);
  EXPECT_EQ(one->dtype, DType::kBF16);
  EXPECT_EQ(one->ToString(), "cuda:3");
}

TEST(DeviceConfig, RefusesWhatItCannotRun) {
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "tpu:0"}) {
    auto s = ParseDeviceSpec(bad, "bf16");
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.status().message().find("--device"), std::string::npos) << bad;
  }
  auto dtype = ParseDeviceSpec("cpu", "int8");
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.status().message().find("--dtype"), std::string::npos);
  if (BuiltWithCuda()) return;
  auto cuda = ParseDeviceSpec("cuda", "bf16");
  ASSERT_FALSE(cuda.ok());
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace specline
