#include "model/formats/random_model_arch.h"

#include <cmath>
#include <map>
#include <stdexcept>

#include "model/formats/arch_tensors.h"
#include "model/formats/gguf_writer.h"

namespace specline {

namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Row-concatenation of same-width tensors (fusing, or stacking with a new
// leading dimension when `stack`).
RandomTensor Concat(const std::string& name, const std::vector<const RandomTensor*>& parts,
                    bool stack) {
  RandomTensor out;
  out.name = name;
  int64_t rows = 0;
  for (const RandomTensor* p : parts) {
    rows += p->shape[0];
    out.values.insert(out.values.end(), p->values.begin(), p->values.end());
  }
  const int64_t cols = parts[0]->shape[1];
  out.shape = stack ? std::vector<int64_t>{int64_t(parts.size()), parts[0]->shape[0], cols}
                    : std::vector<int64_t>{rows, cols};
  return out;
}

}  // namespace

bool IsPhi3OrMoeArch(const std::string& arch) {
  return arch == "phi3" || arch == "qwen3moe" || arch == "mixtral" || arch == "olmoe";
}

void CheckPhi3OrMoeConfig(const ModelConfig& c) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument("arch " + c.arch + ": " + what);
  };
  if (c.qkv_bias) fail("has no qkv bias");
  const bool moe = c.arch != "phi3";
  if (moe != c.IsMoe()) fail(moe ? "needs experts (n_experts > 0)" : "has no experts");
  if (c.arch != "phi3" && (c.rope_dim != 0 || c.longrope)) {
    fail("partial rotary and longrope are Phi-3 features");
  }
  if (c.qk_norm != (c.arch == "qwen3moe" || c.arch == "olmoe")) {
    fail("qk_norm must be set exactly for qwen3moe and olmoe");
  }
  if (c.qk_norm_full != (c.arch == "olmoe")) fail("qk_norm_full must be set exactly for olmoe");
  if (moe) {
    // Routing as each arch's GGUF reader assumes it, so all formats agree.
    const MoeRouting want =
        c.arch == "olmoe" ? MoeRouting::kSoftmaxTopK : MoeRouting::kSoftmaxTopKRenorm;
    if (c.moe_routing != want) fail("takes the routing its llama.cpp graph uses");
    // Mixtral and OLMoE have one intermediate size (GGUF feed_forward_length).
    if (c.arch != "qwen3moe" && c.hidden_dim != c.expert_hidden_dim) {
      fail("hidden_dim must equal expert_hidden_dim");
    }
  }
}

std::string GgufArchName(const ModelConfig& c) {
  return c.arch == "mixtral" ? "llama" : c.arch;
}

LongRopeScaling RandomLongRope(int rope_dim, int original, int max_seq_len) {
  LongRopeScaling s;
  const int half = rope_dim / 2;
  for (int i = 0; i < half; ++i) {
    const double t = half > 1 ? double(i) / (half - 1) : 0.0;
    s.short_factors.push_back(static_cast<float>(1.0 + 0.05 * t));
    s.long_factors.push_back(static_cast<float>(1.0 + 3.0 * t * t));
  }
  s.original_max_position = original;
  const double factor = double(max_seq_len) / original;
  s.attention_factor = static_cast<float>(
      factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(factor) / std::log(double(original))));
  return s;
}

std::vector<RandomTensor> PackForFile(const ModelConfig& c, std::vector<RandomTensor> tensors,
                                      ModelFormat format) {
  if (!IsPhi3OrMoeArch(c.arch) || format == ModelFormat::kLlama2c) return tensors;
  std::map<std::string, const RandomTensor*> by_name;
  for (const RandomTensor& t : tensors) by_name[t.name] = &t;
  auto get = [&](const std::string& n) { return by_name.at(n); };
  std::vector<RandomTensor> out;
  for (const RandomTensor& t : tensors) {
    const std::string& n = t.name;
    if (c.arch == "phi3") {
      // Emitted at the position of q_proj / gate_proj; k, v, up dropped.
      if (EndsWith(n, "self_attn.q_proj.weight")) {
        const std::string p = n.substr(0, n.size() - std::string("q_proj.weight").size());
        out.push_back(Concat(p + "qkv_proj.weight",
                             {&t, get(p + "k_proj.weight"), get(p + "v_proj.weight")}, false));
        continue;
      }
      if (EndsWith(n, "mlp.gate_proj.weight")) {
        const std::string p = n.substr(0, n.size() - std::string("gate_proj.weight").size());
        out.push_back(Concat(p + "gate_up_proj.weight", {&t, get(p + "up_proj.weight")}, false));
        continue;
      }
      if (EndsWith(n, "self_attn.k_proj.weight") || EndsWith(n, "self_attn.v_proj.weight") ||
          EndsWith(n, "mlp.up_proj.weight")) {
        continue;
      }
      out.push_back(t);
      continue;
    }
    // MoE: expert tensors are "model.layers.L.mlp.experts.E.P.weight".
    const size_t at = n.find(".mlp.experts.");
    if (at == std::string::npos) {
      if (c.arch == "mixtral" && format == ModelFormat::kHuggingFace &&
          EndsWith(n, ".mlp.gate.weight")) {
        out.push_back(t);
        out.back().name = n.substr(0, n.size() - std::string("mlp.gate.weight").size()) +
                          "block_sparse_moe.gate.weight";
        continue;
      }
      out.push_back(t);
      continue;
    }
    const std::string layer_prefix = n.substr(0, at + 1);  // "model.layers.L."
    const std::string after = n.substr(at + std::string(".mlp.experts.").size());
    const size_t dot = after.find('.');
    const int expert = std::stoi(after.substr(0, dot));
    const std::string proj = after.substr(dot + 1, after.size() - dot - 1 - 7);  // no .weight
    if (format == ModelFormat::kGguf) {
      if (expert != 0) continue;  // the stack is emitted at expert 0
      const int layer = std::stoi(layer_prefix.substr(std::string("model.layers.").size()));
      std::vector<const RandomTensor*> parts;
      for (int e = 0; e < c.n_experts; ++e) parts.push_back(get(ExpertTensorName(layer, e, proj)));
      out.push_back(Concat(layer_prefix + "mlp.experts." + proj + ".weight", parts, true));
      continue;
    }
    out.push_back(t);
    if (c.arch == "mixtral") {
      static const std::map<std::string, std::string> kW = {
          {"gate_proj", "w1"}, {"down_proj", "w2"}, {"up_proj", "w3"}};
      out.back().name = layer_prefix + "block_sparse_moe.experts." + std::to_string(expert) +
                        "." + kW.at(proj) + ".weight";
    }
  }
  return out;
}

void AddPhi3OrMoeHfConfig(const ModelConfig& c, nlohmann::ordered_json& j) {
  if (c.arch == "qwen3moe") j["model_type"] = "qwen3_moe";
  if (c.arch == "phi3") {
    j["partial_rotary_factor"] = double(c.RopeDim()) / c.head_dim;
    j["sliding_window"] = nullptr;
    // Phi3Config's defaults (pad 32000) would not fit a small vocabulary.
    j["bos_token_id"] = 1;
    j["eos_token_id"] = 2;
    j["pad_token_id"] = nullptr;
    if (c.longrope) {
      const LongRopeScaling& s = *c.longrope;
      j["original_max_position_embeddings"] = s.original_max_position;
      j["rope_scaling"] = {{"rope_type", "longrope"},
                           {"type", "longrope"},
                           {"short_factor", s.short_factors},
                           {"long_factor", s.long_factors},
                           {"attention_factor", s.attention_factor}};
    }
  }
  if (!c.IsMoe()) return;
  j[c.arch == "mixtral" ? "num_local_experts" : "num_experts"] = c.n_experts;
  j["num_experts_per_tok"] = c.n_experts_used;
  if (c.arch == "qwen3moe") {
    j["moe_intermediate_size"] = c.expert_hidden_dim;
    j["decoder_sparse_step"] = 1;
    j["mlp_only_layers"] = nlohmann::ordered_json::array();
  }
  if (c.arch != "mixtral") j["norm_topk_prob"] = c.moe_routing == MoeRouting::kSoftmaxTopKRenorm;
  if (c.arch == "mixtral") j["sliding_window"] = nullptr;
  if (c.arch == "olmoe") j["clip_qkv"] = nullptr;
  j["output_router_logits"] = false;
}

void AddPhi3OrMoeGguf(const ModelConfig& c, GgufWriter& w) {
  const std::string a = GgufArchName(c) + ".";
  w.SetU32(a + "rope.dimension_count", c.RopeDim());
  if (c.arch == "phi3") {
    w.SetU32(a + "attention.sliding_window", 0);
    if (c.longrope) {
      const LongRopeScaling& s = *c.longrope;
      w.SetU32(a + "rope.scaling.original_context_length", s.original_max_position);
      w.SetF32(a + "rope.scaling.attn_factor", s.attention_factor);
      w.AddTensorFromF32("rope_factors_long.weight", DType::kF32,
                         {int64_t(s.long_factors.size())}, s.long_factors.data());
      w.AddTensorFromF32("rope_factors_short.weight", DType::kF32,
                         {int64_t(s.short_factors.size())}, s.short_factors.data());
    }
  }
  if (!c.IsMoe()) return;
  w.SetU32(a + "expert_count", c.n_experts);
  w.SetU32(a + "expert_used_count", c.n_experts_used);
  if (c.arch == "qwen3moe") {
    w.SetU32(a + "expert_feed_forward_length", c.expert_hidden_dim);
  } else {
    w.SetU32(a + "feed_forward_length", c.expert_hidden_dim);
  }
}

}  // namespace specline
