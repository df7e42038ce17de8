// A tensor as found in a model file: its canonical name, type, shape and where
// its bytes are (inside a memory map owned by the ModelSource).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/dtype.h"

namespace specline {

struct TensorInfo {
  // Canonical (Hugging Face) name, e.g. "model.layers.3.self_attn.q_proj.weight".
  std::string name;
  // The name inside the file ("blk.3.attn_q.weight" in GGUF), for messages.
  std::string file_name;
  std::string file_path;  // the file it lives in, for messages
  DType dtype = DType::kF32;
  // PyTorch order: outermost first. A Linear weight is {out_features,
  // in_features}; GGUF's reversed ne[] is turned around by the loader.
  std::vector<int64_t> shape;
  const void* data = nullptr;
  int64_t nbytes = 0;

  int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

// "[out, in]": a shape as error messages print it.
inline std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace specline
