// A Hugging Face model directory as a ModelSource: config.json plus
// model.safetensors, or shards listed by model.safetensors.index.json.
// Tensor names are already canonical; q/k are in rotate_half (kHalf) layout.
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "kernels/cpu/ops.h"
#include "model/formats/basic_source.h"
#include "model/formats/gemma_config.h"
#include "model/formats/safetensors.h"

namespace specline {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json ReadJson(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ModelFormatError(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    throw ModelFormatError(path + ": invalid JSON: " + e.what());
  }
}

class HfSource : public BasicModelSource {
 public:
  explicit HfSource(const std::string& dir)
      : BasicModelSource(ModelFormat::kHuggingFace, dir) {
    config_path_ = (fs::path(dir) / "config.json").string();
    const json j = ReadJson(config_path_);
    gemma_ = j.is_object() && j.contains("model_type") && j["model_type"].is_string() &&
             IsGemmaType(j["model_type"].get<std::string>());
    LoadTensors(dir);
    ReadConfig(j);
  }

 private:
  [[noreturn]] void Fail(const std::string& file, const std::string& what) const {
    throw ModelFormatError(file + ": " + what);
  }

  // An integer field; `fallback` when absent or null, error when required.
  int64_t Int(const json& j, const char* key, std::optional<int64_t> fallback) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) {
      if (fallback) return *fallback;
      Fail(config_path_, std::string("missing \"") + key + "\"");
    }
    if (!it->is_number_integer() || it->get<int64_t>() < 0 ||
        it->get<int64_t>() > INT32_MAX) {
      Fail(config_path_, std::string("\"") + key + "\" must be a non-negative integer");
    }
    return it->get<int64_t>();
  }

  double Float(const json& j, const char* key, double fallback) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_number()) Fail(config_path_, std::string("\"") + key + "\" must be a number");
    return it->get<double>();
  }

  bool Bool(const json& j, const char* key, bool fallback) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) Fail(config_path_, std::string("\"") + key + "\" must be true or false");
    return it->get<bool>();
  }

  void ReadConfig(const json& j) {
    if (!j.is_object()) Fail(config_path_, "not a JSON object");
    auto mt = j.find("model_type");
    if (mt == j.end() || !mt->is_string()) Fail(config_path_, "missing \"model_type\"");
    const std::string type = mt->get<std::string>();
    if (type != "llama" && type != "mistral" && type != "qwen2" && type != "qwen3" &&
        !IsGemmaType(type) && type != "phi3" && type != "qwen3_moe" && type != "mixtral" &&
        type != "olmoe") {
      Fail(config_path_, "unsupported model_type '" + type +
                             "' (supported: llama, mistral, qwen2, qwen3, gemma2, gemma3_text, "
                             "phi3, qwen3_moe, mixtral, olmoe)");
    }
    ModelConfig& c = config_;
    c.arch = type == "gemma3_text" ? "gemma3" : type;
    c.rope_style = RopeStyle::kHalf;  // transformers' rotate_half
    c.dim = static_cast<int>(Int(j, "hidden_size", std::nullopt));
    c.hidden_dim = static_cast<int>(Int(j, "intermediate_size", std::nullopt));
    c.n_layers = static_cast<int>(Int(j, "num_hidden_layers", std::nullopt));
    c.n_heads = static_cast<int>(Int(j, "num_attention_heads", std::nullopt));
    c.n_kv_heads = static_cast<int>(Int(j, "num_key_value_heads", c.n_heads));
    c.head_dim = static_cast<int>(
        Int(j, "head_dim", c.n_heads > 0 ? c.dim / c.n_heads : 0));
    c.vocab_size = static_cast<int>(Int(j, "vocab_size", std::nullopt));
    c.max_seq_len = static_cast<int>(Int(j, "max_position_embeddings", 2048));
    // transformers' defaults for these Llama-family configs.
    c.norm_eps = static_cast<float>(Float(j, "rms_norm_eps", 1e-6));
    // transformers >= 5 writes "rope_parameters" {rope_theta, rope_type,
    // scaling keys}; older configs have a top-level rope_theta and an
    // optional "rope_scaling" object. Accept both.
    auto rp = j.find("rope_parameters");
    const bool new_style = rp != j.end() && rp->is_object();
    c.rope_theta = static_cast<float>(
        new_style ? Float(*rp, "rope_theta", Float(j, "rope_theta", 10000.0))
                  : Float(j, "rope_theta", 10000.0));
    c.tied_embeddings = Bool(j, "tie_word_embeddings", false);

    // A sliding window no shorter than the context changes nothing; a shorter
    // one (Mistral 7B v0.1: 4096) is exactly full attention up to the window,
    // so the context is capped there rather than attending wrongly beyond it.
    bool sliding = type == "mistral" || Bool(j, "use_sliding_window", false);
    if (sliding) {
      int64_t window = Int(j, "sliding_window", c.max_seq_len);
      if (window > 0 && window < c.max_seq_len) c.max_seq_len = static_cast<int>(window);
    }

    auto rs = new_style ? rp : j.find("rope_scaling");
    if (rs != j.end() && !rs->is_null()) {
      if (!rs->is_object()) Fail(config_path_, "\"rope_scaling\" must be an object");
      std::string rtype;
      for (const char* k : {"rope_type", "type"}) {
        auto it = rs->find(k);
        if (it != rs->end() && it->is_string()) { rtype = it->get<std::string>(); break; }
      }
      if (rtype == "llama3") {
        Llama3RopeScaling s;
        s.factor = static_cast<float>(Float(*rs, "factor", s.factor));
        s.low_freq_factor = static_cast<float>(Float(*rs, "low_freq_factor", s.low_freq_factor));
        s.high_freq_factor = static_cast<float>(Float(*rs, "high_freq_factor", s.high_freq_factor));
        s.original_max_position = static_cast<int>(
            Int(*rs, "original_max_position_embeddings", s.original_max_position));
        c.llama3_scaling = s;
      } else if (rtype == "longrope" || rtype == "su") {
        ReadLongRope(j, *rs);
      } else if (rtype != "default" && !rtype.empty() && !(gemma_ && rtype == "linear")) {
        Fail(config_path_, "unsupported rope_scaling type '" + rtype + "'");
      }
    }

    // Qwen2 always has q/k/v biases and Qwen3 always q/k norms; Llama's
    // attention_bias adds them too. Validation then insists the tensors exist.
    c.qkv_bias = type == "qwen2" || Bool(j, "attention_bias", false) ||
                 Find("model.layers.0.self_attn.q_proj.bias") != nullptr;
    c.qk_norm = type == "qwen3" ||
                Find("model.layers.0.self_attn.q_norm.weight") != nullptr;
    if (gemma_) {
      // Gemma ties its head to the embedding unless told otherwise, and its
      // rope_scaling is linear (read below), not Llama 3's.
      c.tied_embeddings = Bool(j, "tie_word_embeddings", true);
      c.llama3_scaling.reset();
      ReadGemmaHfConfig(j, config_path_, c);
    }
    ReadPhi3AndMoe(j, type, new_style ? &*rp : nullptr);
    CanonicalizeTensors();
  }

  // Phi-3's partial rotary and sliding window; the experts of qwen3_moe,
  // mixtral and olmoe.
  void ReadPhi3AndMoe(const json& j, const std::string& type, const json* rope_params) {
    ModelConfig& c = config_;
    if (type == "qwen3_moe") c.arch = "qwen3moe";  // llama.cpp's name for it
    const double rotary = rope_params ? Float(*rope_params, "partial_rotary_factor",
                                              Float(j, "partial_rotary_factor", 1.0))
                                      : Float(j, "partial_rotary_factor", 1.0);
    if (!(rotary > 0.0 && rotary <= 1.0)) {
      Fail(config_path_, "\"partial_rotary_factor\" must be in (0, 1]");
    }
    // transformers: int(head_dim * partial_rotary_factor).
    const int rot = static_cast<int>(c.head_dim * rotary);
    if (rot != c.head_dim) c.rope_dim = rot;
    if (type == "phi3") {
      const int64_t window = Int(j, "sliding_window", 0);
      if (window > 0 && window < c.max_seq_len) c.max_seq_len = static_cast<int>(window);
    }
    if (type == "qwen3_moe" || type == "olmoe" || type == "mixtral") {
      const bool mixtral = type == "mixtral";
      // transformers 5 writes num_local_experts for every MoE class; the
      // hub's Qwen3-MoE and OLMoE configs say num_experts.
      const bool local = mixtral || (!j.contains("num_experts") && j.contains("num_local_experts"));
      c.n_experts =
          static_cast<int>(Int(j, local ? "num_local_experts" : "num_experts", std::nullopt));
      c.n_experts_used = static_cast<int>(Int(j, "num_experts_per_tok", std::nullopt));
      c.expert_hidden_dim = static_cast<int>(
          type == "qwen3_moe" ? Int(j, "moe_intermediate_size", std::nullopt) : c.hidden_dim);
      const bool renorm = mixtral || Bool(j, "norm_topk_prob", false);
      c.moe_routing = renorm ? MoeRouting::kSoftmaxTopKRenorm : MoeRouting::kSoftmaxTopK;
      if (type == "qwen3_moe") {
        // Dense layers between sparse ones are not supported.
        auto mlp_only = j.find("mlp_only_layers");
        if (Int(j, "decoder_sparse_step", 1) != 1 ||
            (mlp_only != j.end() && mlp_only->is_array() && !mlp_only->empty())) {
          Fail(config_path_, "qwen3_moe with dense layers (decoder_sparse_step != 1 or "
                             "mlp_only_layers) is not supported");
        }
      }
      if (type == "olmoe") {
        auto clip = j.find("clip_qkv");
        if (clip != j.end() && !clip->is_null()) {
          Fail(config_path_, "olmoe clip_qkv is not supported");
        }
        c.qk_norm = true;
        c.qk_norm_full = true;  // RMSNorm over the whole q (k) projection
      }
    }
  }

  // transformers' longrope: factor = max_position / original_max_position
  // when the config names the original, and the default attention factor
  // sqrt(1 + ln(factor) / ln(original)).
  void ReadLongRope(const json& j, const json& rs) {
    ModelConfig& c = config_;
    LongRopeScaling s;
    auto factors = [&](const char* key) {
      auto it = rs.find(key);
      if (it == rs.end() || !it->is_array()) {
        Fail(config_path_, std::string("longrope needs a \"") + key + "\" array");
      }
      std::vector<float> v;
      for (const auto& x : *it) {
        if (!x.is_number()) Fail(config_path_, std::string("\"") + key + "\" must hold numbers");
        v.push_back(x.get<float>());
      }
      return v;
    };
    s.short_factors = factors("short_factor");
    s.long_factors = factors("long_factor");
    const int64_t orig = Int(rs, "original_max_position_embeddings",
                             Int(j, "original_max_position_embeddings", c.max_seq_len));
    s.original_max_position = static_cast<int>(orig);
    const double factor =
        Float(rs, "factor", orig > 0 ? static_cast<double>(c.max_seq_len) / orig : 1.0);
    const double fallback =
        factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(double(orig)));
    s.attention_factor = static_cast<float>(Float(rs, "attention_factor", fallback));
    c.longrope = std::move(s);
  }

  static bool IsGemmaType(const std::string& type) {
    return type == "gemma2" || type == "gemma3_text";
  }

  void AddFile(const SafetensorsFile& f, const std::set<std::string>* only) {
    KeepMap(f.map());
    for (const auto& [name, t] : f.tensors()) {
      if (only && !only->count(name)) continue;
      AddTensor(gemma_ && IsNormWeight(name) ? ShiftedNorm(t) : t);
    }
  }

  static bool IsNormWeight(const std::string& name) {
    static const std::string kSuffix = "norm.weight";
    return name.size() >= kSuffix.size() &&
           name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
  }

  // Gemma's RMSNorms multiply by (1 + w); transformers stores w, GGUF (and
  // the runtime) 1 + w, added in fp32 as transformers does.
  TensorInfo ShiftedNorm(const TensorInfo& t) {
    std::vector<float> v(t.numel());
    kernels::DequantizeRow(t.dtype, t.data, t.numel(), v.data());
    for (float& x : v) x += 1.0f;
    TensorInfo out = t;
    out.dtype = DType::kF32;
    out.nbytes = static_cast<int64_t>(v.size() * sizeof(float));
    shifted_.push_back(std::move(v));
    out.data = shifted_.back().data();
    return out;
  }

  void LoadTensors(const std::string& dir) {
    const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
    const fs::path single = fs::path(dir) / "model.safetensors";
    std::error_code ec;
    if (fs::exists(index_path, ec)) {
      const std::string ip = index_path.string();
      json idx = ReadJson(ip);
      auto wm = idx.is_object() ? idx.find("weight_map") : idx.end();
      if (wm == idx.end() || !wm->is_object()) Fail(ip, "missing \"weight_map\" object");
      std::map<std::string, std::set<std::string>> by_shard;
      for (auto& [name, file] : wm->items()) {
        if (!file.is_string()) Fail(ip, "weight_map entry '" + name + "' is not a file name");
        std::string shard = file.get<std::string>();
        // Shards live beside the index; refuse paths that leave the directory.
        if (shard.empty() || shard.find('/') != std::string::npos ||
            shard.find('\\') != std::string::npos || shard == "." || shard == "..") {
          Fail(ip, "weight_map entry '" + name + "' names an invalid shard '" + shard + "'");
        }
        by_shard[shard].insert(name);
      }
      for (const auto& [shard, names] : by_shard) {
        auto f = SafetensorsFile::Open((fs::path(dir) / shard).string());
        for (const std::string& name : names) {
          if (!f->tensors().count(name)) {
            Fail(f->path(), "tensor '" + name + "' listed in " + ip + " is not in this shard");
          }
        }
        AddFile(*f, &names);
      }
    } else if (fs::exists(single, ec)) {
      AddFile(*SafetensorsFile::Open(single.string()), nullptr);
    } else {
      Fail(dir, "no model.safetensors or model.safetensors.index.json");
    }
  }

  std::string config_path_;
  bool gemma_ = false;
  std::deque<std::vector<float>> shifted_;  // Gemma's 1 + w norm weights
};

}  // namespace

std::unique_ptr<ModelSource> OpenHfModel(const std::string& dir) {
  return std::make_unique<HfSource>(dir);
}

}  // namespace specline
