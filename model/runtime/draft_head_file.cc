#include "model/runtime/draft_head_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "kernels/cpu/ops.h"
#include "model/formats/renamed_source.h"
#include "model/formats/safetensors.h"
#include "model/runtime/weights.h"
#include "nlohmann/json.hpp"

namespace specline {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using TensorList = std::vector<std::pair<std::string, std::vector<int64_t>>>;

constexpr const char* kFormat = "specline.head.v1";

// Hugging Face suffixes of one decoder layer with their shapes.
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

// Number of FC feature-aggregation matrices and their input widths (in
// multiples of dim).
std::vector<int> SpdFcWidths(const HeadConfig& s) {
  std::vector<int> w;
  if (s.spd_layout == SpdFeatureLayout::kV10) {
    // fc.0: g^0 = FC(H^0); fc.k (k = 1..n): concat(H^0, H^{lmax/2}, H^{lmax}).
    w.push_back(1);
    for (int k = 1; k <= s.spd_stages; ++k) w.push_back(3);
  } else {
    for (size_t i = 0; i < s.spd_taps.size(); ++i) w.push_back(static_cast<int>(i) + 1);
  }
  return w;
}

json BaseFingerprint(const ModelConfig& c) {
  return json{{"arch", c.arch},           {"dim", c.dim},
              {"hidden_dim", c.hidden_dim}, {"n_layers", c.n_layers},
              {"n_heads", c.n_heads},     {"n_kv_heads", c.n_kv_heads},
              {"head_dim", c.head_dim},   {"vocab_size", c.vocab_size},
              {"norm_eps", c.norm_eps},   {"rope_theta", c.rope_theta},
              {"qkv_bias", c.qkv_bias},   {"qk_norm", c.qk_norm}};
}

// The canonical-name view of a head file (see DraftHead::source()).
std::unique_ptr<ModelSource> HeadSource(const SafetensorsFile& file, ModelConfig config,
                                        int first_layer) {
  auto source = std::make_unique<RenamedSource>(std::move(config), file.path());
  for (const auto& [name, t] : file.tensors()) {
    std::string canon = name;
    if (name.rfind("layers.", 0) == 0) {
      const size_t dot = name.find('.', 7);
      const int j = std::stoi(name.substr(7, dot - 7));
      canon = LayerTensorName(first_layer + j, name.substr(dot + 1));
    } else if (name == "norm.weight") {
      canon = "model.norm.weight";
    }
    source->Add(canon, t);
  }
  return source;
}

[[noreturn]] void Fail(const std::string& file, const std::string& what) {
  throw ModelFormatError(file + ": " + what);
}

// Reads a required field of a JSON object with the type T, naming the
// field on error.
template <typename T>
T Field(const json& obj, const std::string& key, const std::string& file,
        const std::string& where) {
  if (!obj.is_object() || !obj.contains(key)) Fail(file, "missing field '" + where + key + "'");
  const json& v = obj.at(key);
  bool ok;
  if constexpr (std::is_same_v<T, bool>) ok = v.is_boolean();
  else if constexpr (std::is_integral_v<T>) ok = v.is_number_integer();
  else if constexpr (std::is_floating_point_v<T>) ok = v.is_number();
  else ok = v.is_string();
  if (!ok) Fail(file, "field '" + where + key + "' has the wrong type (" + v.dump() + ")");
  return v.get<T>();
}

// The "ptp" object: the parameters the runtime needs, and the choices this
// runtime implements (anything else is refused, not guessed at).
void ReadPtpParameters(const json& j, const std::string& jpath, const ModelConfig& base,
                       HeadConfig* s) {
  if (!j.contains("ptp") || !j["ptp"].is_object()) Fail(jpath, "missing object 'ptp'");
  const json& p = j["ptp"];
  s->ptp_n_aux = Field<int>(p, "n_aux", jpath, "ptp.");
  s->ptp_lora_rank = Field<int>(p, "lora_rank", jpath, "ptp.");
  s->ptp_lora_alpha = Field<double>(p, "lora_alpha", jpath, "ptp.");
  const double scale = Field<double>(p, "lora_scale", jpath, "ptp.");
  if (s->ptp_lora_rank > 0 && std::fabs(scale - s->ptp_lora_alpha / s->ptp_lora_rank) > 1e-9 * std::fabs(scale)) {
    Fail(jpath, "field 'ptp.lora_scale' is not lora_alpha / lora_rank");
  }
  auto expect_string = [&](const char* key, const char* want) {
    const std::string got = Field<std::string>(p, key, jpath, "ptp.");
    if (got != want) Fail(jpath, std::string("field 'ptp.") + key + "' is \"" + got + "\", expected \"" + want + "\"");
  };
  expect_string("u_embed", "piecewise_linear_3");
  expect_string("variant", "one-hot");
  expect_string("u_generator", "splitmix64");
  const std::vector<std::string> targets(std::begin(kPtpLoraTargets), std::end(kPtpLoraTargets));
  if (!p.contains("lora_targets") || p["lora_targets"] != json(targets)) {
    Fail(jpath, "field 'ptp.lora_targets' must be " + json(targets).dump());
  }
  std::vector<int> layers(base.n_layers);
  for (int i = 0; i < base.n_layers; ++i) layers[i] = i;
  if (!p.contains("lora_layers") || p["lora_layers"] != json(layers)) {
    Fail(jpath, "field 'ptp.lora_layers' must list every layer 0.." + std::to_string(base.n_layers - 1));
  }
}

// The "pipo" object. The backbone must exist and be the base's shape (its
// sha256 is checked by the Python loader; this runtime has no hash yet).
void ReadPipoParameters(const json& j, const std::string& jpath, const std::string& dir,
                        const ModelConfig& base, HeadConfig* s) {
  if (!j.contains("pipo") || !j["pipo"].is_object()) Fail(jpath, "missing object 'pipo'");
  const json& p = j["pipo"];
  s->pipo_pad_id = Field<int>(p, "pad_id", jpath, "pipo.");
  s->pipo_tau_default = Field<double>(p, "tau_default", jpath, "pipo.");
  if (!(s->pipo_tau_default >= 0.0)) Fail(jpath, "field 'pipo.tau_default' must be >= 0");
  if (Field<int>(p, "pair_size", jpath, "pipo.") != 2) Fail(jpath, "field 'pipo.pair_size' must be 2");
  if (!p.contains("backbone") || !p["backbone"].is_object()) Fail(jpath, "missing object 'pipo.backbone'");
  s->pipo_backbone_file = Field<std::string>(p["backbone"], "file", jpath, "pipo.backbone.");
  const std::string path = (fs::path(dir) / s->pipo_backbone_file).string();
  if (!fs::exists(path)) Fail(jpath, "field 'pipo.backbone.file': " + path + " does not exist");
  const ModelConfig bc = OpenModel(path)->config();  // throws ModelFormatError naming the file
  if (BaseFingerprint(bc) != BaseFingerprint(base)) {
    Fail(path, "the backbone's shape " + BaseFingerprint(bc).dump() + " differs from the base's");
  }
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

const char* SpdFeatureLayoutName(SpdFeatureLayout l) {
  return l == SpdFeatureLayout::kV10 ? "v10" : "v11";
}

std::vector<int> SpdDefaultTaps(int n_layers, int n_stages) {
  std::set<int> s;
  const int per = n_stages > 0 ? n_layers / n_stages : 0;
  for (int b : {0, per, 3 * per, 6 * per, n_layers - 1}) s.insert(std::clamp(b, 0, n_layers - 1));
  return {s.begin(), s.end()};
}

std::vector<int> SpdV10Taps(int n_layers, int n_stages) {
  std::set<int> s = {0};
  for (int k = 1; k <= n_stages; ++k) {
    const int l_max = k * n_layers / n_stages;
    s.insert(l_max / 2);
    s.insert(l_max);
  }
  return {s.begin(), s.end()};
}

TensorList ExpectedDraftHeadTensors(const HeadConfig& s, const ModelConfig& c) {
  auto bad = [](const std::string& what) { throw std::invalid_argument(what); };
  if (std::string err = c.Validate(); !err.empty()) bad("base config: " + err);
  TensorList out;
  const int64_t dim = c.dim;
  switch (s.method) {
    case DraftMethod::kPpsdNorm:
    case DraftMethod::kPpsdLayer:
      if (s.exit_layer < 1 || s.exit_layer >= c.n_layers) {
        bad("exit_layer " + std::to_string(s.exit_layer) + " is not in [1, " +
            std::to_string(c.n_layers) + ")");
      }
      if (s.method == DraftMethod::kPpsdLayer) AddLayerTensors(c, "layers.0.", &out);
      out.push_back({"norm.weight", {dim}});
      out.push_back({"lm_head.weight", {c.vocab_size, dim}});
      break;
    case DraftMethod::kSpd: {
      if (s.spd_stages < 2 || s.spd_stages > c.n_layers) {
        bad("spd.n_stages " + std::to_string(s.spd_stages) + " is not in [2, " +
            std::to_string(c.n_layers) + "]");
      }
      if (s.spd_layers < 1) bad("spd.n_layers must be at least 1");
      if (s.spd_taps.empty()) bad("spd.taps is empty");
      for (size_t i = 0; i < s.spd_taps.size(); ++i) {
        if (s.spd_taps[i] < 0 || s.spd_taps[i] > c.n_layers ||
            (i > 0 && s.spd_taps[i] <= s.spd_taps[i - 1])) {
          bad("spd.taps must be strictly increasing indices in [0, " +
              std::to_string(c.n_layers) + "]");
        }
      }
      if (s.spd_taps[0] != 0) bad("spd.taps must start with 0 (the embedding)");
      const std::vector<int> widths = SpdFcWidths(s);
      for (size_t i = 0; i < widths.size(); ++i) {
        out.push_back({"fc." + std::to_string(i) + ".weight", {dim, widths[i] * dim}});
      }
      for (int j = 0; j < s.spd_layers; ++j) {
        AddLayerTensors(c, "layers." + std::to_string(j) + ".", &out);
      }
      out.push_back({"lm_head.weight", {c.vocab_size, dim}});
      break;
    }
    case DraftMethod::kPtp: {
      if (s.ptp_n_aux < 1) bad("ptp.n_aux must be at least 1");
      if (s.ptp_lora_rank < 1) bad("ptp.lora_rank must be at least 1");
      const int64_t q = int64_t{c.n_heads} * c.head_dim, kv = int64_t{c.n_kv_heads} * c.head_dim;
      const std::map<std::string, std::pair<int64_t, int64_t>> in_out = {
          {"self_attn.q_proj", {dim, q}},     {"self_attn.k_proj", {dim, kv}},
          {"self_attn.v_proj", {dim, kv}},    {"self_attn.o_proj", {q, dim}},
          {"mlp.gate_proj", {dim, c.hidden_dim}}, {"mlp.up_proj", {dim, c.hidden_dim}},
          {"mlp.down_proj", {c.hidden_dim, dim}}};
      out.push_back({"u_embed.weight", {3, dim}});
      for (int j = 0; j < c.n_layers; ++j) {
        for (const char* target : kPtpLoraTargets) {
          const auto [d_in, d_out] = in_out.at(target);
          const std::string prefix = "layers." + std::to_string(j) + "." + target;
          out.push_back({prefix + ".lora_A", {s.ptp_lora_rank, d_in}});
          out.push_back({prefix + ".lora_B", {d_out, s.ptp_lora_rank}});
        }
      }
      break;
    }
    case DraftMethod::kPipo: {
      if (s.pipo_pad_id < 0 || s.pipo_pad_id >= c.vocab_size) {
        bad("pipo.pad_id " + std::to_string(s.pipo_pad_id) + " is not a token id");
      }
      out.push_back({"compressor.fc1.weight", {2 * dim, 2 * dim}});
      out.push_back({"compressor.fc1.bias", {2 * dim}});
      out.push_back({"compressor.fc2.weight", {dim, 2 * dim}});
      out.push_back({"compressor.fc2.bias", {dim}});
      out.push_back({"mtp.norm_e.weight", {dim}});
      out.push_back({"mtp.norm_h.weight", {dim}});
      out.push_back({"mtp.fc.weight", {dim, 2 * dim}});
      AddLayerTensors(c, "mtp.layers.0.", &out);
      out.push_back({"mtp.norm.weight", {dim}});
      out.push_back({"confidence.norm.weight", {2 * dim}});
      out.push_back({"confidence.fc1.weight", {dim, 2 * dim}});
      out.push_back({"confidence.fc2.weight", {1, dim}});
      break;
    }
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

  int first_layer = 0, n_head_layers = 0;
  if (s.method == DraftMethod::kSpd) {
    if (!j.contains("spd") || !j["spd"].is_object()) Fail(jpath, "missing object 'spd'");
    const json& sp = j["spd"];
    s.spd_stages = Field<int>(sp, "n_stages", jpath, "spd.");
    s.spd_layers = Field<int>(sp, "n_layers", jpath, "spd.");
    const std::string layout = Field<std::string>(sp, "feature_layout", jpath, "spd.");
    if (layout == "v10") s.spd_layout = SpdFeatureLayout::kV10;
    else if (layout == "v11") s.spd_layout = SpdFeatureLayout::kV11;
    else Fail(jpath, "field 'spd.feature_layout' is \"" + layout + "\", expected v10 or v11");
    if (!sp.contains("taps") || !sp["taps"].is_array()) Fail(jpath, "missing array 'spd.taps'");
    for (const json& t : sp["taps"]) {
      if (!t.is_number_integer()) Fail(jpath, "field 'spd.taps' holds a non-integer");
      s.spd_taps.push_back(t.get<int>());
    }
    n_head_layers = s.spd_layers;
  } else if (s.method == DraftMethod::kPtp) {
    ReadPtpParameters(j, jpath, base, &s);
    n_head_layers = base.n_layers;  // LoRA tensors for every base layer
  } else if (s.method == DraftMethod::kPipo) {
    ReadPipoParameters(j, jpath, dir, base, &s);
  } else {
    s.exit_layer = Field<int>(j, "exit_layer", jpath, "");
    first_layer = s.exit_layer;
    n_head_layers = s.method == DraftMethod::kPpsdLayer ? 1 : 0;
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
  hc.n_layers = first_layer + n_head_layers;
  if (hc.n_layers == 0) hc.n_layers = 1;  // keeps Validate() happy for layer-less heads
  hc.rope_style = RopeStyle::kHalf;
  hc.tied_embeddings = false;
  head->source_ = HeadSource(*head->file_, hc, first_layer);
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
  if (spec.method == DraftMethod::kPipo) {
    throw std::invalid_argument("WriteDraftHead: pipo heads are written by training/train_pipo.py");
  }
  if (spec.method == DraftMethod::kPtp) {
    std::vector<std::string> targets(std::begin(kPtpLoraTargets), std::end(kPtpLoraTargets));
    std::vector<int> layers(base.n_layers);
    for (int i = 0; i < base.n_layers; ++i) layers[i] = i;
    j["ptp"] = {{"n_aux", spec.ptp_n_aux}, {"lora_rank", spec.ptp_lora_rank},
                {"lora_alpha", spec.ptp_lora_alpha},
                {"lora_scale", spec.ptp_lora_alpha / spec.ptp_lora_rank},
                {"lora_targets", targets}, {"lora_layers", layers},
                {"u_embed", "piecewise_linear_3"}, {"u_embed_knots", {0.0, 0.5, 1.0}},
                {"variant", "one-hot"}, {"u_generator", "splitmix64"},
                {"layout", "verify rows then auxiliary rows"}};
  } else if (spec.method == DraftMethod::kSpd) {
    j["spd"] = {{"n_stages", spec.spd_stages},
                {"taps", spec.spd_taps},
                {"n_layers", spec.spd_layers},
                {"feature_layout", SpdFeatureLayoutName(spec.spd_layout)}};
  } else {
    j["exit_layer"] = spec.exit_layer;
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

void WriteRandomDraftHead(const std::string& dir, const HeadConfig& spec,
                          const ModelConfig& base, uint64_t seed, const ModelSource* init_from,
                          DType dtype) {
  const TensorList expected = ExpectedDraftHeadTensors(spec, base);
  std::vector<std::pair<std::string, std::vector<float>>> tensors;
  for (const auto& [name, shape] : expected) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    std::vector<float> v(numel);
    const TensorInfo* from = nullptr;
    if (init_from != nullptr) {
      if (name == "norm.weight") from = &init_from->Require("model.norm.weight", shape);
      if (name == "lm_head.weight") {
        from = init_from->Find("lm_head.weight");
        if (from == nullptr || init_from->config().tied_embeddings) {
          from = &init_from->Require("model.embed_tokens.weight");
        }
        from = &init_from->Require(from->name, shape);
      }
    }
    if (from != nullptr) {
      kernels::DequantizeRow(from->dtype, from->data, numel, v.data());
    } else {
      // splitmix64 stream seeded by (seed, name).
      uint64_t state = seed;
      for (unsigned char ch : name) state = (state ^ ch) * 0x100000001b3ull;
      auto next = [&state] {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        return static_cast<float>(z >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f;
      };
      const bool is_norm = name.find("norm.weight") != std::string::npos;
      const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
      const float sqrt3 = std::sqrt(3.0f);
      float center = 0.0f, half = 0.1f;
      if (is_norm) {
        center = 1.0f;
      } else if (!is_bias) {
        const float std = name == "lm_head.weight" ? 2.0f / std::sqrt(float(shape[1]))
                                                   : 1.0f / std::sqrt(float(shape[1]));
        half = std * sqrt3;
      }
      for (float& x : v) x = center + next() * half;
    }
    tensors.push_back({name, std::move(v)});
  }
  WriteDraftHead(dir, spec, base, tensors, dtype);
}

}  // namespace specline
