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

// The fixed-size preamble, read before anything else: the counts bound the
// loops that follow, and the version decides whether we can read on at all.
struct GgufHeader {
  uint32_t version;
  uint64_t n_tensors;
  uint64_t n_kv;
};

// Reads and checks magic and version, so a non-GGUF or big-endian file gets
// a message saying so instead of a confusing failure further in.
GgufHeader ReadHeader(ByteReader& r) {
  uint32_t magic = r.Read<uint32_t>("GGUF magic");
  if (magic != kGgufMagic) r.Fail("not a GGUF file (bad magic)");
  GgufHeader h;
  h.version = r.Read<uint32_t>("GGUF version");
  if (h.version != 2 && h.version != 3) {
    // A byte-swapped small number means a big-endian file.
    if (h.version > 0xffff && (h.version & 0xffff) == 0) {
      r.Fail("big-endian GGUF files are not supported");
    }
    r.Fail("unsupported GGUF version " + std::to_string(h.version) +
           " (only 2 and 3 are read)");
  }
  h.n_tensors = r.Read<uint64_t>("tensor count");
  h.n_kv = r.Read<uint64_t>("metadata count");
  return h;
}

// Reads the key/value section into `kv`, keeping each key's exact type
// signature in `kv_types` so metadata can be rewritten with the same types.
void ReadMetadata(ByteReader& r, uint64_t n_kv,
                  std::map<std::string, GgufValue>* kv,
                  std::map<std::string, std::vector<GgufType>>* kv_types) {
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
    if (!kv->emplace(key, std::move(value)).second) {
      r.Fail("duplicate metadata key '" + key + "'");
    }
    kv_types->emplace(key, std::move(sig));
  }
}

// The data alignment the metadata asks for (general.alignment), checked to be
// a sane power of two because tensor offsets are validated against it.
uint64_t AlignmentOf(const ByteReader& r,
                     const std::map<std::string, GgufValue>& kv) {
  auto it = kv.find("general.alignment");
  if (it == kv.end()) return kDefaultAlignment;
  auto v = it->second.AsInt();
  if (!v || *v <= 0 || (*v & (*v - 1)) != 0 || *v > (1 << 20)) {
    r.Fail("general.alignment must be a power of two");
  }
  return static_cast<uint64_t>(*v);
}

// One tensor directory entry as read, before its data offset is checked
// against the file (which needs the end of the directory, so comes later).
struct TensorEntry {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype;
  uint64_t offset;
  int64_t nbytes;
};

// Reads a tensor's dimension list (ne[0] innermost), refusing counts and
// sizes no real tensor has, so later size arithmetic cannot be fooled.
std::vector<int64_t> ReadTensorDims(ByteReader& r, const std::string& name) {
  uint32_t n_dims = r.Read<uint32_t>("tensor dimension count");
  if (n_dims == 0 || n_dims > kMaxDims) {
    r.Fail("tensor '" + name + "' has " + std::to_string(n_dims) +
           " dimensions (1 to 4 allowed)");
  }
  std::vector<int64_t> ne(n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t n = r.Read<uint64_t>("tensor dimension");
    if (n > static_cast<uint64_t>(INT64_MAX)) {
      r.Fail("tensor '" + name + "' has a corrupt dimension");
    }
    ne[d] = static_cast<int64_t>(n);
  }
  return ne;
}

// Maps the GGML type id to a dtype, naming the tensor and the supported list
// when it is one we cannot compute with (a user-facing "convert it" hint).
DType SupportedDType(uint32_t ggml_type, const std::string& name,
                     const std::string& path) {
  auto dtype = DTypeFromGgmlType(ggml_type);
  if (!dtype) {
    throw ModelFormatError(path + ": tensor '" + name + "' has type " +
                           GgmlTypeName(ggml_type) +
                           ", which specline does not support (supported: "
                           "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, "
                           "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)");
  }
  return *dtype;
}

// The tensor's byte size from its dtype's row size, with overflow checks, so
// the bounds check against the file uses a size that cannot wrap.
int64_t TensorBytes(const ByteReader& r, const std::string& name, DType dtype,
                    const std::vector<int64_t>& ne) {
  auto row = RowBytes(dtype, ne[0]);
  if (!row) {
    r.Fail("tensor '" + name + "': row length " + std::to_string(ne[0]) +
           " is not a multiple of the " + std::string(DTypeName(dtype)) +
           " block size, or is too large");
  }
  int64_t nbytes = *row;
  for (size_t d = 1; d < ne.size(); ++d) {
    if (!CheckedMul(nbytes, ne[d], &nbytes)) {
      r.Fail("tensor '" + name + "': size overflows");
    }
  }
  return nbytes;
}

// Reads one directory entry: name, dims, type and offset, in file order.
TensorEntry ReadTensorEntry(ByteReader& r, const std::string& path) {
  TensorEntry e;
  e.name = ReadString(r, "tensor name");
  std::vector<int64_t> ne = ReadTensorDims(r, e.name);
  uint32_t ggml_type = r.Read<uint32_t>("tensor type");
  e.offset = r.Read<uint64_t>("tensor data offset");
  e.dtype = SupportedDType(ggml_type, e.name, path);
  e.nbytes = TensorBytes(r, e.name, e.dtype, ne);
  e.shape.assign(ne.rbegin(), ne.rend());
  return e;
}

// Reads the whole tensor directory; the count is checked first so a corrupt
// one cannot make us reserve an absurd amount.
std::vector<TensorEntry> ReadTensorDirectory(ByteReader& r, uint64_t n_tensors,
                                             const std::string& path) {
  if (n_tensors > r.remaining() / 32) {
    r.Fail("corrupt tensor count " + std::to_string(n_tensors));
  }
  std::vector<TensorEntry> entries;
  entries.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    entries.push_back(ReadTensorEntry(r, path));
  }
  return entries;
}

// Checks each entry's data lies aligned and inside the file, then records it
// as a TensorInfo pointing into the map: the last point where a corrupt
// offset can be caught before someone reads through it.
void PlaceTensors(std::vector<TensorEntry>& entries, uint64_t data_start,
                  uint64_t alignment, const MappedFile& map,
                  const std::string& path,
                  std::map<std::string, TensorInfo>* tensors) {
  std::set<std::string> seen;
  for (TensorEntry& e : entries) {
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
    tensors->emplace(e.name, std::move(t));
  }
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

  GgufHeader header = ReadHeader(r);
  f->version_ = header.version;
  ReadMetadata(r, header.n_kv, &f->kv_, &f->kv_types_);
  uint64_t alignment = AlignmentOf(r, f->kv_);
  std::vector<TensorEntry> entries =
      ReadTensorDirectory(r, header.n_tensors, path);

  // Tensor data starts at the next multiple of the alignment.
  uint64_t data_start = r.pos();
  if (data_start % alignment) data_start += alignment - data_start % alignment;
  PlaceTensors(entries, data_start, alignment, map, path, &f->tensors_);
  return f;
}

}  // namespace specline
