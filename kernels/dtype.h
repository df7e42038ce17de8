// Element types of weight tensors, and the block layouts of the quantized
// ones. Shared by the model loaders (to validate sizes) and the CPU kernels
// (to decode). Block layouts follow GGML so GGUF tensors are used in place,
// straight from the memory map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace specline {

enum class DType : uint8_t {
  kF32,
  kF16,
  kBF16,
  kQ8_0,  // blocks of 32: fp16 scale d, int8 q[32]; x = d * q
  kQ4_0,  // blocks of 32: fp16 scale d, 16 bytes of nibbles; x = d * (q - 8)
  kQ4_1,  // blocks of 32: fp16 scale d, fp16 min m, 16 bytes; x = d * q + m
  kQ5_0,  // blocks of 32: fp16 d, u32 qh (5th bits), 16 bytes of nibbles;
          // x = d * (q - 16)
  kQ5_1,  // blocks of 32: fp16 d, fp16 m, u32 qh, 16 bytes; x = d * q + m
  // K-quants: super-blocks of 256 with per-sub-block 4..8-bit scales.
  kQ2_K,  // scales[16] (4-bit scale | 4-bit min), qs[64], fp16 d, fp16 dmin
  kQ3_K,  // hmask[32], qs[64], scales[12] (16 x 6-bit), fp16 d
  kQ4_K,  // fp16 d, fp16 dmin, scales[12] (8 x 6-bit scale, min), qs[128]
  kQ5_K,  // fp16 d, fp16 dmin, scales[12], qh[32], qs[128]
  kQ6_K,  // ql[128], qh[64], int8 scales[16], fp16 d
};

// GGML's super-block size (QK_K).
constexpr int64_t kSuperBlockElems = 256;

// Elements per block (1 for the plain float types).
constexpr int64_t BlockElems(DType t) {
  switch (t) {
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
      return 32;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return kSuperBlockElems;
    default:
      return 1;
  }
}

// Bytes per block.
constexpr int64_t BlockBytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kQ8_0: return 2 + 32;
    case DType::kQ4_0: return 2 + 16;
    case DType::kQ4_1: return 2 + 2 + 16;
    case DType::kQ5_0: return 2 + 4 + 16;
    case DType::kQ5_1: return 2 + 2 + 4 + 16;
    case DType::kQ2_K: return 16 + 64 + 2 + 2;        // 84
    case DType::kQ3_K: return 32 + 64 + 12 + 2;       // 110
    case DType::kQ4_K: return 2 + 2 + 12 + 128;       // 144
    case DType::kQ5_K: return 2 + 2 + 12 + 32 + 128;  // 176
    case DType::kQ6_K: return 128 + 64 + 16 + 2;      // 210
  }
  return 0;
}

// Bytes taken by one row of `cols` elements, or nullopt when `cols` is not a
// whole number of blocks.
constexpr std::optional<int64_t> RowBytes(DType t, int64_t cols) {
  if (cols < 0 || cols % BlockElems(t) != 0) return std::nullopt;
  const int64_t blocks = cols / BlockElems(t);
  // Shapes come from untrusted files: refuse sizes that overflow int64.
  if (blocks > INT64_MAX / BlockBytes(t)) return std::nullopt;
  return blocks * BlockBytes(t);
}

constexpr std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kQ8_0: return "Q8_0";
    case DType::kQ4_0: return "Q4_0";
    case DType::kQ4_1: return "Q4_1";
    case DType::kQ5_0: return "Q5_0";
    case DType::kQ5_1: return "Q5_1";
    case DType::kQ2_K: return "Q2_K";
    case DType::kQ3_K: return "Q3_K";
    case DType::kQ4_K: return "Q4_K";
    case DType::kQ5_K: return "Q5_K";
    case DType::kQ6_K: return "Q6_K";
  }
  return "?";
}

}  // namespace specline
