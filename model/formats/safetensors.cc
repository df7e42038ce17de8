#include "model/formats/safetensors.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>

#include "model/formats/byte_reader.h"
#include "model/formats/mapped_file.h"
#include "model/formats/model_source.h"

namespace specline {

namespace {

using nlohmann::json;

std::optional<DType> ParseDType(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  return std::nullopt;
}

[[noreturn]] void Fail(const std::string& path, const std::string& what) {
  throw ModelFormatError(path + ": " + what);
}

}  // namespace

std::unique_ptr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  auto f = std::make_unique<SafetensorsFile>();
  f->path_ = path;
  f->map_ = MappedFile::Open(path);
  const MappedFile& map = *f->map_;
  ByteReader r(path, map.data(), map.size());
  const uint64_t header_len = r.Read<uint64_t>("safetensors header length");
  if (header_len > r.remaining()) {
    r.Fail("safetensors header length " + std::to_string(header_len) +
           " exceeds the file size " + std::to_string(map.size()));
  }
  const char* header = reinterpret_cast<const char*>(r.here());
  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = map.size() - data_start;

  json j;
  try {
    j = json::parse(header, header + header_len);
  } catch (const json::exception& e) {
    Fail(path, std::string("safetensors header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) Fail(path, "safetensors header is not a JSON object");

  for (auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) Fail(path, "__metadata__ is not an object");
      for (auto& [k, v] : entry.items()) {
        if (v.is_string()) f->metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string where = "tensor '" + name + "'";
    if (!entry.is_object()) Fail(path, where + ": entry is not an object");
    auto dt = entry.find("dtype");
    auto sh = entry.find("shape");
    auto off = entry.find("data_offsets");
    if (dt == entry.end() || !dt->is_string() || sh == entry.end() ||
        !sh->is_array() || off == entry.end() || !off->is_array() ||
        off->size() != 2) {
      Fail(path, where + ": needs dtype, shape and data_offsets [begin, end]");
    }
    auto dtype = ParseDType(dt->get<std::string>());
    if (!dtype) {
      Fail(path, where + " has dtype " + dt->get<std::string>() +
           ", which specline does not support (supported: F32, F16, BF16)");
    }
    TensorInfo t;
    t.name = name;
    t.file_name = name;
    t.file_path = path;
    t.dtype = *dtype;
    int64_t nbytes = BlockBytes(*dtype);
    for (const json& d : *sh) {
      if (!d.is_number_unsigned()) Fail(path, where + ": shape has a non-integer entry");
      uint64_t n = d.get<uint64_t>();
      if (n > static_cast<uint64_t>(INT64_MAX) ||
          !CheckedMul(nbytes, static_cast<int64_t>(n), &nbytes)) {
        Fail(path, where + ": shape is too large");
      }
      t.shape.push_back(static_cast<int64_t>(n));
    }
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) {
      Fail(path, where + ": data_offsets must be non-negative integers");
    }
    const uint64_t begin = (*off)[0].get<uint64_t>();
    const uint64_t end = (*off)[1].get<uint64_t>();
    if (begin > end || end > data_size) {
      Fail(path, where + ": data_offsets [" + std::to_string(begin) + ", " +
           std::to_string(end) + "] lie outside the " +
           std::to_string(data_size) + "-byte data area");
    }
    if (end - begin != static_cast<uint64_t>(nbytes)) {
      Fail(path, where + ": data_offsets span " + std::to_string(end - begin) +
           " bytes but shape and dtype need " + std::to_string(nbytes));
    }
    t.data = map.data() + data_start + begin;
    t.nbytes = nbytes;
    f->tensors_.emplace(name, std::move(t));
  }
  return f;
}

void WriteSafetensors(const std::string& path,
                      const std::vector<TensorInfo>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  // nlohmann's ordered_json keeps tensors in the order given.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorInfo& t : tensors) {
    if (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16) {
      throw std::invalid_argument("safetensors cannot hold " +
                                  std::string(DTypeName(t.dtype)) + " tensor " + t.name);
    }
    if (t.numel() * BlockBytes(t.dtype) != t.nbytes) {
      throw std::invalid_argument("tensor " + t.name + ": nbytes does not match shape");
    }
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string text = header.dump();
  // Pad with spaces (valid JSON whitespace) so the data area starts 8-aligned
  // and fp32 tensors are naturally aligned in the map.
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path);
  uint64_t n = text.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(text.data(), text.size());
  for (const TensorInfo& t : tensors) {
    out.write(static_cast<const char*>(t.data), t.nbytes);
  }
  if (!out.flush()) throw std::runtime_error("error writing " + path);
}

}  // namespace specline
