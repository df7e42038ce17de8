// GGUF reader. Layout (all little-endian):
//   "GGUF" u32 version, u64 tensor_count, u64 kv_count,
//   kv_count x (string key, u32 type, value),
//   tensor_count x (string name, u32 n_dims, u64 ne[n_dims], u32 ggml_type,
//                   u64 offset),
//   padding to general.alignment (default 32), tensor data.
// Strings are u64 length + bytes; arrays are u32 element type, u64 count,
// elements. ne[0] is the innermost (contiguous) dimension, so the PyTorch
// shape is ne reversed.
#include "model/formats/gguf.h"

#include <cmath>
#include <set>

#include "model/formats/byte_reader.h"
#include "model/formats/mapped_file.h"
#include "model/formats/model_source.h"

namespace specline {

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as little-endian
constexpr uint64_t kDefaultAlignment = 32;
constexpr int kMaxArrayDepth = 8;   // nested arrays deeper than this are corrupt
constexpr uint32_t kMaxDims = 4;    // GGML_MAX_DIMS

// The fewest bytes one value of `type` can take, used to reject a corrupt
// array count before allocating for it. 0 for an unknown type.
uint64_t MinValueBytes(uint32_t type) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
    case GgufType::kString:
      return 8;
    case GgufType::kArray:
      return 12;
  }
  return 0;
}

std::string ReadString(ByteReader& r, const char* what) {
  uint64_t len = r.Read<uint64_t>(what);
  if (len > r.remaining()) {
    r.Fail(std::string("corrupt ") + what + ": length " + std::to_string(len) +
           " exceeds the " + std::to_string(r.remaining()) +
           " bytes left in the file");
  }
  return r.ReadBytes(len, what);
}

// `sig` collects the value's type and, for arrays, the element type of each
// level (as read from the array headers, so empty arrays keep theirs).
GgufValue ReadValue(ByteReader& r, uint32_t type, int depth,
                    const std::string& key, std::vector<GgufType>* sig) {
  GgufValue out;
  if (sig->size() == static_cast<size_t>(depth)) sig->push_back(static_cast<GgufType>(type));
  switch (static_cast<GgufType>(type)) {
    case GgufType::kUint8: out.v = uint64_t{r.Read<uint8_t>("u8 value")}; break;
    case GgufType::kInt8: out.v = int64_t{r.Read<int8_t>("i8 value")}; break;
    case GgufType::kUint16: out.v = uint64_t{r.Read<uint16_t>("u16 value")}; break;
    case GgufType::kInt16: out.v = int64_t{r.Read<int16_t>("i16 value")}; break;
    case GgufType::kUint32: out.v = uint64_t{r.Read<uint32_t>("u32 value")}; break;
    case GgufType::kInt32: out.v = int64_t{r.Read<int32_t>("i32 value")}; break;
    case GgufType::kUint64: out.v = r.Read<uint64_t>("u64 value"); break;
    case GgufType::kInt64: out.v = r.Read<int64_t>("i64 value"); break;
    case GgufType::kFloat32: out.v = double{r.Read<float>("f32 value")}; break;
    case GgufType::kFloat64: out.v = r.Read<double>("f64 value"); break;
    case GgufType::kBool: out.v = r.Read<uint8_t>("bool value") != 0; break;
    case GgufType::kString: out.v = ReadString(r, "string value"); break;
    case GgufType::kArray: {
      if (depth >= kMaxArrayDepth) {
        r.Fail("metadata key '" + key + "': arrays nested deeper than " +
               std::to_string(kMaxArrayDepth));
      }
      uint32_t elem_type = r.Read<uint32_t>("array element type");
      uint64_t min_bytes = MinValueBytes(elem_type);
      if (min_bytes == 0) {
        r.Fail("metadata key '" + key + "': unknown array element type " +
               std::to_string(elem_type));
      }
      if (sig->size() == static_cast<size_t>(depth) + 1) {
        sig->push_back(static_cast<GgufType>(elem_type));
      }
      uint64_t count = r.Read<uint64_t>("array length");
      if (count > r.remaining() / min_bytes) {
        r.Fail("metadata key '" + key + "': array length " +
               std::to_string(count) + " cannot fit in the " +
               std::to_string(r.remaining()) + " bytes left in the file");
      }
      auto arr = std::make_shared<GgufValue::Array>();
      arr->reserve(count);
      for (uint64_t i = 0; i < count; ++i) {
        arr->push_back(ReadValue(r, elem_type, depth + 1, key, sig));
      }
      out.v = std::move(arr);
      break;
    }
    default:
      r.Fail("metadata key '" + key + "': unknown value type " +
             std::to_string(type));
  }
  return out;
}

}  // namespace

std::optional<DType> DTypeFromGgmlType(uint32_t t) {
  switch (t) {
    case 0: return DType::kF32;
    case 1: return DType::kF16;
    case 2: return DType::kQ4_0;
    case 3: return DType::kQ4_1;
    case 6: return DType::kQ5_0;
    case 7: return DType::kQ5_1;
    case 8: return DType::kQ8_0;
    case 10: return DType::kQ2_K;
    case 11: return DType::kQ3_K;
    case 12: return DType::kQ4_K;
    case 13: return DType::kQ5_K;
    case 14: return DType::kQ6_K;
    case 30: return DType::kBF16;
  }
  return std::nullopt;
}

uint32_t GgmlTypeOf(DType d) {
  switch (d) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ5_0: return 6;
    case DType::kQ5_1: return 7;
    case DType::kQ8_0: return 8;
    case DType::kQ2_K: return 10;
    case DType::kQ3_K: return 11;
    case DType::kQ4_K: return 12;
    case DType::kQ5_K: return 13;
    case DType::kQ6_K: return 14;
    case DType::kBF16: return 30;
  }
  return 0;
}

std::string GgmlTypeName(uint32_t t) {
  // ggml's type table; ids 4 and 5 (old Q4_2/Q4_3) were removed.
  static const char* const kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "type 4", "type 5",
      "Q5_0",    "Q5_1",   "Q8_0",    "Q8_1",  "Q2_K",   "Q3_K",
      "Q4_K",    "Q5_K",   "Q6_K",    "Q8_K",  "IQ2_XXS", "IQ2_XS",
      "IQ3_XXS", "IQ1_S",  "IQ4_NL",  "IQ3_S", "IQ2_S",  "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M",
      "BF16"};
  if (t < sizeof(kNames) / sizeof(kNames[0])) return kNames[t];
  return "type " + std::to_string(t);
}

std::optional<int64_t> GgufValue::AsInt() const {
  if (auto* u = std::get_if<uint64_t>(&v)) {
    if (*u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  if (auto* i = std::get_if<int64_t>(&v)) return *i;
  return std::nullopt;
}

std::optional<double> GgufValue::AsFloat() const {
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto* u = std::get_if<uint64_t>(&v)) return static_cast<double>(*u);
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> GgufValue::AsBool() const {
  if (auto* b = std::get_if<bool>(&v)) return *b;
  return std::nullopt;
}

const std::string* GgufValue::AsString() const {
  return std::get_if<std::string>(&v);
}

const GgufValue::Array* GgufValue::AsArray() const {
  auto* a = std::get_if<std::shared_ptr<Array>>(&v);
  return a ? a->get() : nullptr;
}

GgufFile::~GgufFile() = default;

const std::vector<GgufType>* GgufFile::TypeOf(const std::string& key) const {
  auto it = kv_types_.find(key);
  return it == kv_types_.end() ? nullptr : &it->second;
}

const GgufValue* GgufFile::Find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

std::unique_ptr<GgufFile> GgufFile::Open(const std::string& path) {
  std::unique_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  f->map_ = MappedFile::Open(path);
  const MappedFile& map = *f->map_;
  ByteReader r(path, map.data(), map.size());

  uint32_t magic = r.Read<uint32_t>("GGUF magic");
  if (magic != kGgufMagic) r.Fail("not a GGUF file (bad magic)");
  f->version_ = r.Read<uint32_t>("GGUF version");
  if (f->version_ != 2 && f->version_ != 3) {
    // A byte-swapped small number means a big-endian file.
    if (f->version_ > 0xffff && (f->version_ & 0xffff) == 0) {
      r.Fail("big-endian GGUF files are not supported");
    }
    r.Fail("unsupported GGUF version " + std::to_string(f->version_) +
           " (only 2 and 3 are read)");
  }
  uint64_t n_tensors = r.Read<uint64_t>("tensor count");
  uint64_t n_kv = r.Read<uint64_t>("metadata count");
  // Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes, each
  // tensor entry at least 8 + 4 + 8 + 4 + 8.
  if (n_kv > r.remaining() / 13) {
    r.Fail("corrupt metadata count " + std::to_string(n_kv));
  }
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = ReadString(r, "metadata key");
    uint32_t type = r.Read<uint32_t>("metadata value type");
    std::vector<GgufType> sig;
    GgufValue value = ReadValue(r, type, 0, key, &sig);
    if (!f->kv_.emplace(key, std::move(value)).second) {
      r.Fail("duplicate metadata key '" + key + "'");
    }
    f->kv_types_.emplace(key, std::move(sig));
  }

  uint64_t alignment = kDefaultAlignment;
  if (const GgufValue* a = f->Find("general.alignment")) {
    auto v = a->AsInt();
    if (!v || *v <= 0 || (*v & (*v - 1)) != 0 || *v > (1 << 20)) {
      r.Fail("general.alignment must be a power of two");
    }
    alignment = static_cast<uint64_t>(*v);
  }

  if (n_tensors > r.remaining() / 32) {
    r.Fail("corrupt tensor count " + std::to_string(n_tensors));
  }
  struct Entry {
    std::string name;
    std::vector<int64_t> shape;
    DType dtype;
    uint64_t offset;
    int64_t nbytes;
  };
  std::vector<Entry> entries;
  entries.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    Entry e;
    e.name = ReadString(r, "tensor name");
    uint32_t n_dims = r.Read<uint32_t>("tensor dimension count");
    if (n_dims == 0 || n_dims > kMaxDims) {
      r.Fail("tensor '" + e.name + "' has " + std::to_string(n_dims) +
             " dimensions (1 to 4 allowed)");
    }
    std::vector<int64_t> ne(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t n = r.Read<uint64_t>("tensor dimension");
      if (n > static_cast<uint64_t>(INT64_MAX)) {
        r.Fail("tensor '" + e.name + "' has a corrupt dimension");
      }
      ne[d] = static_cast<int64_t>(n);
    }
    uint32_t ggml_type = r.Read<uint32_t>("tensor type");
    e.offset = r.Read<uint64_t>("tensor data offset");
    auto dtype = DTypeFromGgmlType(ggml_type);
    if (!dtype) {
      throw ModelFormatError(path + ": tensor '" + e.name + "' has type " +
                             GgmlTypeName(ggml_type) +
                             ", which specline does not support (supported: "
                             "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
                             "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)");
    }
    e.dtype = *dtype;
    auto row = RowBytes(e.dtype, ne[0]);
    if (!row) {
      r.Fail("tensor '" + e.name + "': row length " + std::to_string(ne[0]) +
             " is not a multiple of the " + std::string(DTypeName(e.dtype)) +
             " block size, or is too large");
    }
    int64_t nbytes = *row;
    for (uint32_t d = 1; d < n_dims; ++d) {
      if (!CheckedMul(nbytes, ne[d], &nbytes)) {
        r.Fail("tensor '" + e.name + "': size overflows");
      }
    }
    e.nbytes = nbytes;
    e.shape.assign(ne.rbegin(), ne.rend());
    entries.push_back(std::move(e));
  }

  // Tensor data starts at the next multiple of the alignment.
  uint64_t data_start = r.pos();
  if (data_start % alignment) data_start += alignment - data_start % alignment;
  std::set<std::string> seen;
  for (Entry& e : entries) {
    if (!seen.insert(e.name).second) {
      throw ModelFormatError(path + ": duplicate tensor '" + e.name + "'");
    }
    if (e.offset % alignment != 0) {
      throw ModelFormatError(path + ": tensor '" + e.name + "' data offset " +
                             std::to_string(e.offset) +
                             " is not a multiple of the alignment " +
                             std::to_string(alignment));
    }
    if (e.offset > UINT64_MAX - data_start ||
        !map.Contains(data_start + e.offset, static_cast<uint64_t>(e.nbytes))) {
      throw ModelFormatError(
          path + ": tensor '" + e.name + "' (" + std::to_string(e.nbytes) +
          " bytes at data offset " + std::to_string(e.offset) +
          ") extends past the end of the file (" + std::to_string(map.size()) +
          " bytes); the file is truncated or corrupt");
    }
    TensorInfo t;
    t.name = e.name;
    t.file_name = e.name;
    t.file_path = path;
    t.dtype = e.dtype;
    t.shape = std::move(e.shape);
    t.data = map.data() + data_start + e.offset;
    t.nbytes = e.nbytes;
    f->tensors_.emplace(e.name, std::move(t));
  }
  return f;
}

}  // namespace specline
