// Writes GGUF v3 (or v2) files: typed metadata and tensors in any supported
// dtype. Used by the random model writer and by tests that need GGUF files
// with particular metadata or damage.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/formats/gguf.h"

namespace specline {

class GgufWriter {
 public:
  // Metadata setters. Keys keep the order they were first set in; setting a
  // key again replaces its value.
  void SetU32(const std::string& key, uint32_t v);
  void SetI32(const std::string& key, int32_t v);
  void SetU64(const std::string& key, uint64_t v);
  void SetF32(const std::string& key, float v);
  void SetBool(const std::string& key, bool v);
  void SetString(const std::string& key, const std::string& v);
  void SetStringArray(const std::string& key, const std::vector<std::string>& v);
  void SetF32Array(const std::string& key, const std::vector<float>& v);
  void SetI32Array(const std::string& key, const std::vector<int32_t>& v);
  // Any value, nested arrays included. `types` is the value's type followed
  // by the element type of each array level: {kArray, kArray, kInt32} for an
  // array of arrays of int32. Throws std::invalid_argument on a mismatch.
  void Set(const std::string& key, const std::vector<GgufType>& types,
           const GgufValue& value);

  // Adds a tensor of already-encoded bytes; `shape` is in PyTorch order
  // (outermost first) and is written reversed as GGUF's ne[]. Throws
  // std::invalid_argument when `nbytes` disagrees with dtype and shape.
  void AddTensor(const std::string& name, DType dtype,
                 const std::vector<int64_t>& shape, const void* data,
                 int64_t nbytes);
  // The same, taking the bytes over without a copy.
  void AddTensor(const std::string& name, DType dtype,
                 const std::vector<int64_t>& shape, std::string bytes);
  // Adds fp32 values encoded (quantized) as `dtype`.
  void AddTensorFromF32(const std::string& name, DType dtype,
                        const std::vector<int64_t>& shape, const float* values);

  void set_version(uint32_t version) { version_ = version; }  // 2 or 3
  // Also written as general.alignment when it is not GGUF's default 32.
  void set_alignment(uint32_t alignment) { alignment_ = alignment; }

  // The whole file as bytes, or written to `path` (throws std::runtime_error
  // on I/O errors). Write streams the tensors: no copy of the whole file is
  // made in memory.
  std::string Serialize() const;
  void Write(const std::string& path) const;

 private:
  void SetEncoded(const std::string& key, GgufType type, std::string bytes);
  // Throws std::invalid_argument when `nbytes` disagrees with dtype and shape.
  static void CheckTensor(const std::string& name, DType dtype,
                          const std::vector<int64_t>& shape, int64_t nbytes);
  // Metadata and tensor infos, padded to the alignment: what precedes the data.
  std::string Header() const;
  uint64_t Padding(uint64_t n) const { return (alignment_ - n % alignment_) % alignment_; }

  struct Tensor {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::string bytes;
  };
  uint32_t version_ = 3;
  uint32_t alignment_ = 32;
  std::vector<std::pair<std::string, std::string>> kv_;  // key, type+value bytes
  std::vector<Tensor> tensors_;
};

}  // namespace specline
