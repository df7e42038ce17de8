#include "model/formats/gguf_writer.h"

#include <cstring>
#include <fstream>
#include <stdexcept>

#include "model/formats/quantize.h"

namespace specline {

namespace {

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}

void PutString(std::string& out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out += s;
}

// Encodes `v` as types[0], recursing into arrays with types[1..].
void EncodeValue(std::string& out, const GgufType* types, size_t n_types,
                 const GgufValue& v) {
  if (n_types == 0) throw std::invalid_argument("GGUF value without a type");
  auto need_int = [&]() {
    auto i = v.AsInt();
    if (!i) {
      if (auto* u = std::get_if<uint64_t>(&v.v)) return static_cast<int64_t>(*u);
      throw std::invalid_argument("GGUF integer type given a non-integer value");
    }
    return *i;
  };
  auto need_float = [&]() {
    auto f = v.AsFloat();
    if (!f) throw std::invalid_argument("GGUF float type given a non-number");
    return *f;
  };
  switch (types[0]) {
    case GgufType::kUint8: Put<uint8_t>(out, need_int()); break;
    case GgufType::kInt8: Put<int8_t>(out, need_int()); break;
    case GgufType::kUint16: Put<uint16_t>(out, need_int()); break;
    case GgufType::kInt16: Put<int16_t>(out, need_int()); break;
    case GgufType::kUint32: Put<uint32_t>(out, need_int()); break;
    case GgufType::kInt32: Put<int32_t>(out, need_int()); break;
    case GgufType::kUint64: Put<uint64_t>(out, need_int()); break;
    case GgufType::kInt64: Put<int64_t>(out, need_int()); break;
    case GgufType::kFloat32: Put<float>(out, need_float()); break;
    case GgufType::kFloat64: Put<double>(out, need_float()); break;
    case GgufType::kBool: {
      auto b = v.AsBool();
      if (!b) throw std::invalid_argument("GGUF bool type given a non-bool");
      Put<uint8_t>(out, *b ? 1 : 0);
      break;
    }
    case GgufType::kString: {
      const std::string* s = v.AsString();
      if (!s) throw std::invalid_argument("GGUF string type given a non-string");
      PutString(out, *s);
      break;
    }
    case GgufType::kArray: {
      const GgufValue::Array* a = v.AsArray();
      if (!a || n_types < 2) {
        throw std::invalid_argument("GGUF array needs an array value and element type");
      }
      Put<uint32_t>(out, static_cast<uint32_t>(types[1]));
      Put<uint64_t>(out, a->size());
      for (const GgufValue& e : *a) EncodeValue(out, types + 1, n_types - 1, e);
      break;
    }
  }
}

template <typename T>
std::string EncodeArray(GgufType elem, const std::vector<T>& v) {
  std::string out;
  Put<uint32_t>(out, static_cast<uint32_t>(elem));
  Put<uint64_t>(out, v.size());
  for (const T& x : v) {
    if constexpr (std::is_same_v<T, std::string>) {
      PutString(out, x);
    } else {
      Put<T>(out, x);
    }
  }
  return out;
}

}  // namespace

void GgufWriter::SetEncoded(const std::string& key, GgufType type, std::string bytes) {
  std::string entry;
  Put<uint32_t>(entry, static_cast<uint32_t>(type));
  entry += bytes;
  for (auto& [k, v] : kv_) {
    if (k == key) {
      v = std::move(entry);
      return;
    }
  }
  kv_.emplace_back(key, std::move(entry));
}

void GgufWriter::SetU32(const std::string& key, uint32_t v) {
  std::string b;
  Put(b, v);
  SetEncoded(key, GgufType::kUint32, b);
}
void GgufWriter::SetI32(const std::string& key, int32_t v) {
  std::string b;
  Put(b, v);
  SetEncoded(key, GgufType::kInt32, b);
}
void GgufWriter::SetU64(const std::string& key, uint64_t v) {
  std::string b;
  Put(b, v);
  SetEncoded(key, GgufType::kUint64, b);
}
void GgufWriter::SetF32(const std::string& key, float v) {
  std::string b;
  Put(b, v);
  SetEncoded(key, GgufType::kFloat32, b);
}
void GgufWriter::SetBool(const std::string& key, bool v) {
  std::string b;
  Put<uint8_t>(b, v ? 1 : 0);
  SetEncoded(key, GgufType::kBool, b);
}
void GgufWriter::SetString(const std::string& key, const std::string& v) {
  std::string b;
  PutString(b, v);
  SetEncoded(key, GgufType::kString, b);
}
void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& v) {
  SetEncoded(key, GgufType::kArray, EncodeArray(GgufType::kString, v));
}
void GgufWriter::SetF32Array(const std::string& key, const std::vector<float>& v) {
  SetEncoded(key, GgufType::kArray, EncodeArray(GgufType::kFloat32, v));
}
void GgufWriter::SetI32Array(const std::string& key, const std::vector<int32_t>& v) {
  SetEncoded(key, GgufType::kArray, EncodeArray(GgufType::kInt32, v));
}

void GgufWriter::Set(const std::string& key, const std::vector<GgufType>& types,
                     const GgufValue& value) {
  std::string b;
  EncodeValue(b, types.data(), types.size(), value);
  // EncodeValue wrote the payload only; SetEncoded prefixes the type.
  SetEncoded(key, types.at(0), std::move(b));
}

void GgufWriter::AddTensor(const std::string& name, DType dtype,
                           const std::vector<int64_t>& shape, const void* data,
                           int64_t nbytes) {
  CheckTensor(name, dtype, shape, nbytes);
  tensors_.push_back({name, dtype, shape,
                      std::string(static_cast<const char*>(data), nbytes)});
}

void GgufWriter::AddTensor(const std::string& name, DType dtype,
                           const std::vector<int64_t>& shape, std::string bytes) {
  CheckTensor(name, dtype, shape, static_cast<int64_t>(bytes.size()));
  tensors_.push_back({name, dtype, shape, std::move(bytes)});
}

void GgufWriter::CheckTensor(const std::string& name, DType dtype,
                             const std::vector<int64_t>& shape, int64_t nbytes) {
  if (shape.empty() || shape.size() > 4) {
    throw std::invalid_argument("GGUF tensor " + name + " needs 1 to 4 dimensions");
  }
  auto row = RowBytes(dtype, shape.back());
  int64_t expect = row ? *row : -1;
  for (size_t i = 0; i + 1 < shape.size() && expect >= 0; ++i) expect *= shape[i];
  if (expect != nbytes) {
    throw std::invalid_argument("GGUF tensor " + name + ": " + std::to_string(nbytes) +
                                " bytes do not match its dtype and shape");
  }
}

void GgufWriter::AddTensorFromF32(const std::string& name, DType dtype,
                                  const std::vector<int64_t>& shape, const float* values) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  auto nbytes = RowBytes(dtype, n);
  if (!nbytes) {
    throw std::invalid_argument("GGUF tensor " + name + ": " + std::to_string(n) +
                                " values are not a whole number of " +
                                std::string(DTypeName(dtype)) + " blocks");
  }
  std::string bytes(*nbytes, '\0');
  EncodeValuesInto(dtype, values, n, reinterpret_cast<uint8_t*>(bytes.data()));
  AddTensor(name, dtype, shape, std::move(bytes));
}

std::string GgufWriter::Serialize() const {
  std::string out = Header();
  for (const Tensor& t : tensors_) {
    out += t.bytes;
    out.append(Padding(t.bytes.size()), '\0');
  }
  return out;
}

std::string GgufWriter::Header() const {
  if (alignment_ == 0 || (alignment_ & (alignment_ - 1)) != 0) {
    throw std::invalid_argument("GGUF alignment must be a power of two");
  }
  auto kv = kv_;
  if (alignment_ != 32) {
    std::string b;
    Put<uint32_t>(b, static_cast<uint32_t>(GgufType::kUint32));
    Put<uint32_t>(b, alignment_);
    kv.emplace_back("general.alignment", b);
  }
  std::string out;
  Put<uint32_t>(out, 0x46554747);  // "GGUF"
  Put<uint32_t>(out, version_);
  Put<uint64_t>(out, tensors_.size());
  Put<uint64_t>(out, kv.size());
  for (const auto& [k, v] : kv) {
    PutString(out, k);
    out += v;
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    PutString(out, t.name);
    Put<uint32_t>(out, t.shape.size());
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) Put<uint64_t>(out, *it);
    Put<uint32_t>(out, GgmlTypeOf(t.dtype));
    Put<uint64_t>(out, offset);
    offset += t.bytes.size() + Padding(t.bytes.size());
  }
  out.append(Padding(out.size()), '\0');
  return out;
}

void GgufWriter::Write(const std::string& path) const {
  const std::string header = Header();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path);
  out.write(header.data(), header.size());
  const std::string zeros(alignment_, '\0');
  for (const Tensor& t : tensors_) {
    out.write(t.bytes.data(), t.bytes.size());
    out.write(zeros.data(), Padding(t.bytes.size()));
  }
  if (!out.flush()) throw std::runtime_error("error writing " + path);
}

}  // namespace specline
