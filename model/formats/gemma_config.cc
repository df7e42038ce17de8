#include "model/formats/gemma_config.h"

#include <cmath>
#include <optional>
#include <vector>

#include "model/formats/gguf_writer.h"
#include "model/formats/model_source.h"

namespace specline {

namespace {

[[noreturn]] void Fail(const std::string& path, const std::string& what) {
  throw ModelFormatError(path + ": " + what);
}

// The swa_pattern n with layer l sliding iff l % n < n - 1 that gives
// exactly `sliding` (n = 1 when no layer slides); nullopt when none does.
std::optional<int> PatternOf(const std::vector<bool>& sliding) {
  const int layers = static_cast<int>(sliding.size());
  for (int n = 1; n <= layers + 1; ++n) {
    bool ok = true;
    for (int l = 0; l < layers && ok; ++l) ok = sliding[l] == (l % n < n - 1);
    if (ok) return n;
  }
  return std::nullopt;
}

}  // namespace

float GemmaQueryPreAttnScalar(const ModelConfig& c) {
  const bool is_27b = (c.arch == "gemma2" && c.n_layers == 46) ||
                      (c.arch == "gemma3" && c.n_layers == 62);
  return is_27b && c.n_heads > 0 ? static_cast<float>(c.dim / c.n_heads) : 0.0f;
}

void ReadGemmaGgufConfig(const GgufFile& file, const std::string& path, ModelConfig& c) {
  const std::string k = c.arch + ".";
  auto int_key = [&](const std::string& key) -> std::optional<int64_t> {
    const GgufValue* v = file.Find(key);
    if (!v) return std::nullopt;
    auto i = v->AsInt();
    if (!i || *i < 0 || *i > INT32_MAX) {
      Fail(path, "metadata key '" + key + "' is not a non-negative 32-bit integer");
    }
    return i;
  };
  auto float_key = [&](const std::string& key) -> std::optional<double> {
    const GgufValue* v = file.Find(key);
    if (!v) return std::nullopt;
    auto f = v->AsFloat();
    if (!f || !std::isfinite(*f)) Fail(path, "metadata key '" + key + "' is not a number");
    return f;
  };
  const bool gemma2 = c.arch == "gemma2";
  ApplyGemmaArch(c);

  // Sliding windows. Gemma 2 always has them (4096 unless the file says);
  // a Gemma 3 file without the key has none (llama.cpp's rule).
  c.sliding_window = static_cast<int>(int_key(k + "attention.sliding_window").value_or(gemma2 ? 4096 : 0));
  c.swa_pattern = gemma2 ? 2 : 6;
  const std::string pattern_key = k + "attention.sliding_window_pattern";
  if (const GgufValue* p = file.Find(pattern_key)) {
    if (const GgufValue::Array* a = p->AsArray()) {
      // Per-layer flags (newer converters): accepted when periodic.
      if (static_cast<int>(a->size()) != c.n_layers) {
        Fail(path, "metadata key '" + pattern_key + "' has " + std::to_string(a->size()) +
                       " entries for " + std::to_string(c.n_layers) + " layers");
      }
      std::vector<bool> sliding;
      for (const GgufValue& e : *a) {
        auto b = e.AsBool();
        if (!b) Fail(path, "metadata key '" + pattern_key + "' is not an array of booleans");
        sliding.push_back(*b);
      }
      auto n = PatternOf(sliding);
      if (!n) {
        Fail(path, "metadata key '" + pattern_key +
                       "' is not a repeating local/global pattern (unsupported)");
      }
      c.swa_pattern = *n;
    } else {
      auto n = int_key(pattern_key);
      c.swa_pattern = static_cast<int>(*n);
    }
  }
  // Local layers' RoPE base: Gemma 3's is 10000, Gemma 2's that of the model.
  c.rope_theta_local = static_cast<float>(
      float_key(k + "rope.freq_base_swa").value_or(gemma2 ? c.rope_theta : 10000.0));

  // Soft caps: llama.cpp's defaults are 50 and 30 for Gemma 2; Gemma 3 has
  // only a final cap, and only when the file says so.
  if (gemma2) {
    c.attn_softcap = static_cast<float>(float_key(k + "attn_logit_softcapping").value_or(50.0));
  }
  c.final_softcap = static_cast<float>(
      float_key(k + "final_logit_softcapping").value_or(gemma2 ? 30.0 : 0.0));
  c.query_pre_attn_scalar = GemmaQueryPreAttnScalar(c);

  // Gemma 3 4B+ scale the global layers' RoPE linearly (factor 8).
  if (const GgufValue* st = file.Find(k + "rope.scaling.type")) {
    const std::string* type = st->AsString();
    if (type && *type == "linear") {
      auto f = float_key(k + "rope.scaling.factor");
      if (!f) f = float_key(k + "rope.scale_linear");
      if (f && *f != 0.0) c.rope_linear_factor = static_cast<float>(*f);
    }
  }
}

void WriteGemmaGgufConfig(const ModelConfig& c, GgufWriter& w) {
  if (!IsGemmaArch(c.arch)) return;
  const std::string a = c.arch + ".";
  w.SetU32(a + "attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
  w.SetU32(a + "attention.sliding_window_pattern", static_cast<uint32_t>(c.swa_pattern));
  if (c.rope_theta_local > 0.0f) w.SetF32(a + "rope.freq_base_swa", c.rope_theta_local);
  if (c.arch == "gemma2") w.SetF32(a + "attn_logit_softcapping", c.attn_softcap);
  if (c.arch == "gemma2" || c.final_softcap > 0.0f) {
    w.SetF32(a + "final_logit_softcapping", c.final_softcap);
  }
  if (c.rope_linear_factor != 1.0f) {
    w.SetString(a + "rope.scaling.type", "linear");
    w.SetF32(a + "rope.scaling.factor", c.rope_linear_factor);
  }
}

void ReadGemmaHfConfig(const nlohmann::json& j, const std::string& path, ModelConfig& c) {
  auto number = [&](const char* key) -> std::optional<double> {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) Fail(path, std::string("\"") + key + "\" must be a number");
    return it->get<double>();
  };
  const bool gemma2 = c.arch == "gemma2";
  ApplyGemmaArch(c);
  // The runtime's GeGLU is the tanh approximation every Gemma uses.
  for (const char* key : {"hidden_activation", "hidden_act"}) {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_string() || (it->get<std::string>() != "gelu_pytorch_tanh" &&
                             it->get<std::string>() != "gelu_tanh")) {
      Fail(path, std::string("\"") + key + "\" must be gelu_pytorch_tanh for " + c.arch);
    }
  }
  c.sliding_window = static_cast<int>(number("sliding_window").value_or(gemma2 ? 4096 : 0));
  c.swa_pattern = gemma2 ? 2 : 6;
  if (auto p = number("sliding_window_pattern")) c.swa_pattern = static_cast<int>(*p);
  auto lt = j.find("layer_types");
  if (lt != j.end() && lt->is_array()) {
    std::vector<bool> sliding;
    for (const auto& e : *lt) {
      if (!e.is_string()) Fail(path, "\"layer_types\" must be an array of strings");
      const std::string t = e.get<std::string>();
      if (t != "sliding_attention" && t != "full_attention") {
        Fail(path, "unsupported layer type '" + t + "'");
      }
      sliding.push_back(t == "sliding_attention");
    }
    if (static_cast<int>(sliding.size()) != c.n_layers) {
      Fail(path, "\"layer_types\" has " + std::to_string(sliding.size()) + " entries for " +
                     std::to_string(c.n_layers) + " layers");
    }
    auto n = PatternOf(sliding);
    if (!n) Fail(path, "\"layer_types\" is not a repeating local/global pattern (unsupported)");
    c.swa_pattern = *n;
  }
  c.rope_theta_local = static_cast<float>(
      number("rope_local_base_freq").value_or(gemma2 ? c.rope_theta : 10000.0));
  c.attn_softcap = static_cast<float>(number("attn_logit_softcapping").value_or(0.0));
  c.final_softcap = static_cast<float>(number("final_logit_softcapping").value_or(0.0));
  c.query_pre_attn_scalar =
      static_cast<float>(number("query_pre_attn_scalar").value_or(c.head_dim));
  // transformers >= 5: "rope_parameters" per layer type, each with its own
  // rope_theta and rope_type.
  auto rp = j.find("rope_parameters");
  if (rp != j.end() && rp->is_object() && rp->contains("full_attention")) {
    auto theta = [&](const char* kind) -> std::optional<double> {
      auto k = rp->find(kind);
      if (k == rp->end() || !k->is_object()) return std::nullopt;
      auto t = k->find("rope_theta");
      if (t == k->end() || !t->is_number()) {
        Fail(path, std::string("\"rope_parameters\".") + kind + " needs a numeric rope_theta");
      }
      return t->get<double>();
    };
    if (auto t = theta("full_attention")) c.rope_theta = static_cast<float>(*t);
    if (auto t = theta("sliding_attention")) c.rope_theta_local = static_cast<float>(*t);
    for (const char* kind : {"full_attention", "sliding_attention"}) {
      auto k = rp->find(kind);
      if (k == rp->end() || !k->is_object()) continue;
      auto type = k->find("rope_type");
      const std::string rtype = type != k->end() && type->is_string() ? type->get<std::string>() : "";
      if (rtype == "linear" && std::string(kind) == "full_attention") {
        auto f = k->find("factor");
        if (f == k->end() || !f->is_number()) Fail(path, "linear rope_parameters need a factor");
        c.rope_linear_factor = f->get<float>();
      } else if (!rtype.empty() && rtype != "default") {
        Fail(path, "unsupported rope_type '" + rtype + "' for " + kind + " layers of " + c.arch);
      }
    }
  }
  auto rs = j.find("rope_scaling");
  if (rs != j.end() && rs->is_object()) {
    std::string type;
    for (const char* key : {"rope_type", "type"}) {
      auto it = rs->find(key);
      if (it != rs->end() && it->is_string()) type = it->get<std::string>();
    }
    if (type == "linear") {
      auto f = rs->find("factor");
      if (f == rs->end() || !f->is_number()) Fail(path, "linear rope_scaling needs a factor");
      c.rope_linear_factor = f->get<float>();
    } else if (!type.empty() && type != "default") {
      Fail(path, "unsupported rope_scaling type '" + type + "' for " + c.arch);
    }
  }
}

}  // namespace specline
