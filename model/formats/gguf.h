// GGUF v2/v3 reader: header, typed metadata and tensor directory over a
// read-only memory map. Every offset and length is bounds-checked, so a
// truncated or corrupt file raises ModelFormatError instead of reading out of
// bounds.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "model/formats/tensor_info.h"

namespace specline {

class MappedFile;

// Metadata value types, numbered as in the GGUF specification.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// GGML tensor type ids of the dtypes specline reads (F32 0, F16 1, Q4_0 2,
// Q4_1 3, Q5_0 6, Q5_1 7, Q8_0 8, Q2_K 10, Q3_K 11, Q4_K 12, Q5_K 13,
// Q6_K 14, BF16 30). The IQ types, Q8_1/Q8_K and the rest are refused.
std::optional<DType> DTypeFromGgmlType(uint32_t ggml_type);
uint32_t GgmlTypeOf(DType dtype);
// "Q6_K", "IQ2_XS", ... for messages; "type 123" when unknown.
std::string GgmlTypeName(uint32_t ggml_type);

// One metadata value. Arrays hold a vector of scalars or strings.
struct GgufValue {
  using Array = std::vector<GgufValue>;
  std::variant<uint64_t, int64_t, double, bool, std::string,
               std::shared_ptr<Array>>
      v;

  std::optional<int64_t> AsInt() const;  // any integer type
  std::optional<double> AsFloat() const;  // any numeric type
  std::optional<bool> AsBool() const;
  const std::string* AsString() const;
  const Array* AsArray() const;
};

class GgufFile {
 public:
  // Throws ModelFormatError on anything malformed.
  static std::unique_ptr<GgufFile> Open(const std::string& path);
  ~GgufFile();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const GgufValue* Find(const std::string& key) const;
  // A key's stored type: the value's GgufType followed by the element type of
  // each array level ({kArray, kString} for tokenizer.ggml.tokens; nested
  // arrays as their first element has them), the form GgufWriter::Set
  // takes, so metadata can be copied with its exact types. Null for a
  // missing key.
  const std::vector<GgufType>* TypeOf(const std::string& key) const;
  // Tensors under their in-file GGUF names ("blk.0.attn_q.weight"), shape in
  // PyTorch order. Only supported dtypes appear; an unsupported one raises
  // ModelFormatError naming the tensor and its type when opened.
  const std::map<std::string, TensorInfo>& tensors() const { return tensors_; }

 private:
  GgufFile() = default;
  std::string path_;
  uint32_t version_ = 0;
  std::shared_ptr<MappedFile> map_;
  std::map<std::string, GgufValue> kv_;
  std::map<std::string, std::vector<GgufType>> kv_types_;
  std::map<std::string, TensorInfo> tensors_;
};

}  // namespace specline
