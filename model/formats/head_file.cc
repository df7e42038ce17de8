// The head file format shared by every method (head_file.h): head.json's
// header (format, method, base fingerprint, declared tensors, metadata),
// the checks of head.safetensors against it, the canonical-name view and
// the writer. Each method's own parameters and tensors are read by its
// reader (head_ppsd.cc, head_spd.cc, head_ptp.cc, head_pipo.cc).
#include "model/formats/head_file.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "kernels/cpu/ops.h"
#include "model/formats/head_format.h"
#include "model/formats/renamed_source.h"
#include "model/formats/safetensors.h"

namespace specline {
namespace head_format {

void Fail(const std::string& file, const std::string& what) {
  throw ModelFormatError(file + ": " + what);
}

json BaseFingerprint(const ModelConfig& c) {
  return json{{"arch", c.arch},           {"dim", c.dim},
              {"hidden_dim", c.hidden_dim}, {"n_layers", c.n_layers},
              {"n_heads", c.n_heads},     {"n_kv_heads", c.n_kv_heads},
              {"head_dim", c.head_dim},   {"vocab_size", c.vocab_size},
              {"norm_eps", c.norm_eps},   {"rope_theta", c.rope_theta},
              {"qkv_bias", c.qkv_bias},   {"qk_norm", c.qk_norm}};
}

void AddLayerTensors(const ModelConfig& c, const std::string& prefix, TensorList* out) {
  const int64_t dim = c.dim, q_dim = int64_t{c.n_heads} * c.head_dim,
                kv_dim = int64_t{c.n_kv_heads} * c.head_dim, hid = c.hidden_dim;
  out->push_back({prefix + "input_layernorm.weight", {dim}});
  out->push_back({prefix + "self_attn.q_proj.weight", {q_dim, dim}});
  out->push_back({prefix + "self_attn.k_proj.weight", {kv_dim, dim}});
  out->push_back({prefix + "self_attn.v_proj.weight", {kv_dim, dim}});
  if (c.qkv_bias) {
    out->push_back({prefix + "self_attn.q_proj.bias", {q_dim}});
    out->push_back({prefix + "self_attn.k_proj.bias", {kv_dim}});
    out->push_back({prefix + "self_attn.v_proj.bias", {kv_dim}});
  }
  if (c.qk_norm) {
    out->push_back({prefix + "self_attn.q_norm.weight", {c.head_dim}});
    out->push_back({prefix + "self_attn.k_norm.weight", {c.head_dim}});
  }
  out->push_back({prefix + "self_attn.o_proj.weight", {dim, q_dim}});
  out->push_back({prefix + "post_attention_layernorm.weight", {dim}});
  out->push_back({prefix + "mlp.gate_proj.weight", {hid, dim}});
  out->push_back({prefix + "mlp.up_proj.weight", {hid, dim}});
  out->push_back({prefix + "mlp.down_proj.weight", {dim, hid}});
}

}  // namespace head_format

// This file is the format's shared part: its helpers read unqualified.
using namespace head_format;  // NOLINT(google-build-using-namespace)

namespace {

namespace fs = std::filesystem;

// The canonical-name view of a head file (see DraftHead::source()).
std::unique_ptr<ModelSource> HeadSource(const SafetensorsFile& file, ModelConfig config,
                                        int first_layer) {
  auto source = std::make_unique<RenamedSource>(std::move(config), file.path());
  for (const auto& [name, t] : file.tensors()) {
    std::string canon = name;
    if (name.rfind("layers.", 0) == 0) {
      const size_t dot = name.find('.', 7);
      const int j = std::stoi(name.substr(7, dot - 7));
      canon = "model.layers." + std::to_string(first_layer + j) + "." + name.substr(dot + 1);
    } else if (name == "norm.weight") {
      canon = "model.norm.weight";
    }
    source->Add(canon, t);
  }
  return source;
}

}  // namespace

const char* DraftMethodName(DraftMethod m) {
  switch (m) {
    case DraftMethod::kPpsdNorm: return "ppsd-norm";
    case DraftMethod::kPpsdLayer: return "ppsd-layer";
    case DraftMethod::kSpd: return "spd";
    case DraftMethod::kPtp: return "ptp";
    case DraftMethod::kPipo: return "pipo";
  }
  return "?";
}

TensorList ExpectedDraftHeadTensors(const HeadConfig& s, const ModelConfig& c) {
  if (std::string err = c.Validate(); !err.empty()) {
    throw std::invalid_argument("base config: " + err);
  }
  TensorList out;
  switch (s.method) {
    case DraftMethod::kPpsdNorm:
    case DraftMethod::kPpsdLayer: PpsdTensors(s, c, &out); break;
    case DraftMethod::kSpd: SpdTensors(s, c, &out); break;
    case DraftMethod::kPtp: PtpTensors(s, c, &out); break;
    case DraftMethod::kPipo: PipoTensors(s, c, &out); break;
  }
  return out;
}

DraftHead::~DraftHead() = default;

const TensorInfo* DraftHead::FileTensor(const std::string& name) const {
  auto it = file_->tensors().find(name);
  return it == file_->tensors().end() ? nullptr : &it->second;
}

uint64_t DraftHead::Fingerprint() const {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const void* data, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (int64_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  };
  for (const auto& [name, t] : file_->tensors()) {
    mix(name.data(), static_cast<int64_t>(name.size()));
    mix(t.data, t.nbytes);
  }
  return h;
}

std::unique_ptr<DraftHead> LoadDraftHead(const std::string& dir, const ModelConfig& base) {
  const std::string jpath = (fs::path(dir) / "head.json").string();
  const std::string spath = (fs::path(dir) / "head.safetensors").string();
  std::ifstream in(jpath, std::ios::binary);
  if (!in) Fail(jpath, "cannot open");
  std::stringstream buf;
  buf << in.rdbuf();
  json j;
  try {
    j = json::parse(buf.str());
  } catch (const json::exception& e) {
    Fail(jpath, std::string("malformed JSON: ") + e.what());
  }
  if (!j.is_object()) Fail(jpath, "top level is not a JSON object");
  if (Field<std::string>(j, "format", jpath, "") != kFormat) {
    Fail(jpath, "field 'format' is " + j["format"].dump() + ", expected \"" + kFormat + "\"");
  }

  auto head = std::unique_ptr<DraftHead>(new DraftHead());
  head->dir_ = dir;
  head->base_ = base;
  HeadConfig& s = head->config_;
  const std::string method = Field<std::string>(j, "method", jpath, "");
  if (method == "ppsd-norm") s.method = DraftMethod::kPpsdNorm;
  else if (method == "ppsd-layer") s.method = DraftMethod::kPpsdLayer;
  else if (method == "spd") s.method = DraftMethod::kSpd;
  else if (method == "ptp") s.method = DraftMethod::kPtp;
  else if (method == "pipo") s.method = DraftMethod::kPipo;
  else Fail(jpath, "field 'method' is \"" + method + "\", expected ppsd-norm, ppsd-layer, spd, ptp or pipo");

  // Base fingerprint: every number must match the model the head runs with.
  if (!j.contains("base") || !j["base"].is_object()) Fail(jpath, "missing object 'base'");
  const json& b = j["base"];
  const json want = BaseFingerprint(base);
  for (const auto& [key, expected] : want.items()) {
    if (!b.contains(key)) Fail(jpath, "missing field 'base." + key + "'");
    const json& got = b[key];
    bool same;
    if (expected.is_number_float()) {
      same = got.is_number() &&
             std::fabs(got.get<double>() - expected.get<double>()) <=
                 1e-6 * std::fabs(expected.get<double>());
    } else {
      same = got == expected;
    }
    if (!same) {
      Fail(jpath, "field 'base." + key + "' is " + got.dump() + " but the base model has " +
                      expected.dump() + ": the head was made for another model");
    }
  }

  const ReadContext ctx{jpath, dir, base};
  HeadLayers layers;
  switch (s.method) {
    case DraftMethod::kPpsdNorm:
    case DraftMethod::kPpsdLayer: layers = ReadPpsd(j, ctx, &s); break;
    case DraftMethod::kSpd: layers = ReadSpd(j, ctx, &s); break;
    case DraftMethod::kPtp: layers = ReadPtp(j, ctx, &s); break;
    case DraftMethod::kPipo: layers = ReadPipo(j, ctx, &s); break;
  }
  if (j.contains("metadata")) {
    if (!j["metadata"].is_object()) Fail(jpath, "field 'metadata' is not an object");
    s.metadata_json = j["metadata"].dump();
  }

  TensorList expected;
  try {
    expected = ExpectedDraftHeadTensors(s, base);
  } catch (const std::invalid_argument& e) {
    Fail(jpath, e.what());
  }

  // Declared shapes must be exactly the expected ones.
  if (!j.contains("tensors") || !j["tensors"].is_object()) Fail(jpath, "missing object 'tensors'");
  const json& declared = j["tensors"];
  for (const auto& [name, shape] : expected) {
    if (!declared.contains(name)) Fail(jpath, "field 'tensors' does not declare '" + name + "'");
    const json& d = declared[name];
    std::vector<int64_t> got;
    if (d.is_array()) {
      for (const json& x : d) got.push_back(x.is_number_integer() ? x.get<int64_t>() : -1);
    }
    if (got != shape) {
      Fail(jpath, "field 'tensors." + name + "' is " + d.dump() + ", expected " +
                      ShapeString(shape));
    }
  }
  if (declared.size() != expected.size()) {
    for (const auto& [name, _] : declared.items()) {
      bool known = false;
      for (const auto& e : expected) known |= e.first == name;
      if (!known) Fail(jpath, "field 'tensors' declares unexpected tensor '" + name + "'");
    }
  }

  head->file_ = SafetensorsFile::Open(spath);  // names spath on format errors
  const auto& ft = head->file_->tensors();
  for (const auto& [name, shape] : expected) {
    auto it = ft.find(name);
    if (it == ft.end()) Fail(spath, "missing tensor '" + name + "'");
    if (it->second.shape != shape) {
      Fail(spath, "tensor '" + name + "' has shape " + ShapeString(it->second.shape) +
                      ", expected " + ShapeString(shape));
    }
  }
  if (ft.size() != expected.size()) {
    for (const auto& [name, _] : ft) {
      bool known = false;
      for (const auto& e : expected) known |= e.first == name;
      if (!known) Fail(spath, "unexpected tensor '" + name + "'");
    }
  }

  ModelConfig hc = base;
  hc.n_layers = layers.first + layers.count;
  if (hc.n_layers == 0) hc.n_layers = 1;  // keeps Validate() happy for layer-less heads
  hc.rope_style = RopeStyle::kHalf;
  hc.tied_embeddings = false;
  head->source_ = HeadSource(*head->file_, hc, layers.first);
  return head;
}

void WriteDraftHead(const std::string& dir, const HeadConfig& spec, const ModelConfig& base,
                    const std::vector<std::pair<std::string, std::vector<float>>>& tensors,
                    DType dtype) {
  const TensorList expected = ExpectedDraftHeadTensors(spec, base);
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    throw std::invalid_argument("head tensors must be F32, F16 or BF16");
  }
  if (tensors.size() != expected.size()) {
    throw std::invalid_argument("WriteDraftHead: " + std::to_string(tensors.size()) +
                                " tensors given, the spec needs " +
                                std::to_string(expected.size()));
  }
  const int64_t esize = dtype == DType::kF32 ? 4 : 2;
  std::vector<std::vector<uint8_t>> bytes(tensors.size());
  std::vector<TensorInfo> infos;
  json shapes = json::object();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, shape] = expected[i];
    const auto& values = tensors[i].second;
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    if (tensors[i].first != name || static_cast<int64_t>(values.size()) != numel) {
      throw std::invalid_argument("WriteDraftHead: tensor " + std::to_string(i) + " is '" +
                                  tensors[i].first + "' with " +
                                  std::to_string(values.size()) + " values, expected '" + name +
                                  "' " + ShapeString(shape));
    }
    bytes[i].resize(numel * esize);
    for (int64_t k = 0; k < numel; ++k) {
      if (dtype == DType::kF32) {
        std::memcpy(bytes[i].data() + 4 * k, &values[k], 4);
      } else {
        const uint16_t h = dtype == DType::kF16 ? kernels::F32ToF16(values[k])
                                                : kernels::F32ToBF16(values[k]);
        std::memcpy(bytes[i].data() + 2 * k, &h, 2);
      }
    }
    TensorInfo t;
    t.name = t.file_name = name;
    t.dtype = dtype;
    t.shape = shape;
    t.data = bytes[i].data();
    t.nbytes = static_cast<int64_t>(bytes[i].size());
    infos.push_back(std::move(t));
    shapes[name] = shape;
  }

  json j;
  j["format"] = kFormat;
  j["method"] = DraftMethodName(spec.method);
  j["base"] = BaseFingerprint(base);
  switch (spec.method) {
    case DraftMethod::kPpsdNorm:
    case DraftMethod::kPpsdLayer: WritePpsd(spec, base, &j); break;
    case DraftMethod::kSpd: WriteSpd(spec, base, &j); break;
    case DraftMethod::kPtp: WritePtp(spec, base, &j); break;
    case DraftMethod::kPipo: WritePipo(spec, base, &j); break;
  }
  j["dtype"] = dtype == DType::kF32 ? "F32" : dtype == DType::kF16 ? "F16" : "BF16";
  j["tensors"] = shapes;
  json meta = json::parse(spec.metadata_json.empty() ? "{}" : spec.metadata_json);
  if (!meta.is_object()) throw std::invalid_argument("metadata_json is not a JSON object");
  j["metadata"] = meta;

  fs::create_directories(dir);
  WriteSafetensors((fs::path(dir) / "head.safetensors").string(), infos,
                   {{"format", kFormat}});
  std::ofstream out(fs::path(dir) / "head.json", std::ios::binary | std::ios::trunc);
  out << j.dump(2) << "\n";
  if (!out) throw std::runtime_error("cannot write " + (fs::path(dir) / "head.json").string());
}

}  // namespace specline
