// A GGUF file as a ModelSource: llama.cpp tensor names become canonical
// Hugging Face names and the config comes from the "{arch}.*" metadata keys.
#include <cstring>

#include "model/formats/basic_source.h"
#include "model/formats/gemma_config.h"
#include "model/formats/gguf.h"
#include "model/formats/gguf_names.h"
#include "model/formats/rope_factors.h"

namespace specline {

namespace {

class GgufSource : public BasicModelSource {
 public:
  explicit GgufSource(const std::string& path)
      : BasicModelSource(ModelFormat::kGguf, path) {
    file_ = GgufFile::Open(path);
    // Gemma names its layer norms differently (gguf_names.h).
    const GgufValue* arch = file_->Find("general.architecture");
    const std::string arch_name = arch && arch->AsString() ? *arch->AsString() : "";
    for (const auto& [gguf_name, t] : file_->tensors()) {
      TensorInfo c = t;
      // Tensors outside the mapping (rope_freqs.weight, extras) keep their
      // GGUF name so listings still show them.
      c.name = GgufToHfName(gguf_name, arch_name).value_or(gguf_name);
      AddTensor(std::move(c));
    }
    ReadConfig();
  }

  const GgufFile* gguf() const override { return file_.get(); }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    throw ModelFormatError(path() + ": " + what);
  }

  const GgufValue* Key(const std::string& key) const { return file_->Find(key); }

  int64_t IntKey(const std::string& key, std::optional<int64_t> fallback) const {
    const GgufValue* v = Key(key);
    if (!v) {
      if (fallback) return *fallback;
      Fail("missing metadata key '" + key + "'");
    }
    auto i = v->AsInt();
    if (!i || *i < 0 || *i > INT32_MAX) {
      Fail("metadata key '" + key + "' is not a non-negative 32-bit integer");
    }
    return *i;
  }

  double FloatKey(const std::string& key, double fallback) const {
    const GgufValue* v = Key(key);
    if (!v) return fallback;
    auto f = v->AsFloat();
    if (!f) Fail("metadata key '" + key + "' is not a number");
    return *f;
  }

  void ReadConfig() {
    const GgufValue* a = Key("general.architecture");
    if (!a || !a->AsString()) Fail("missing metadata key 'general.architecture'");
    const std::string arch = *a->AsString();
    ModelConfig& c = config_;
    c.arch = arch;
    // llama.cpp's converter permutes q/k of "llama" models into Meta's
    // interleaved pairs; qwen2/qwen3 are run with NeoX (rotate_half) RoPE and
    // left in Hugging Face order.
    if (arch == "llama" || arch == "mistral") {
      c.rope_style = RopeStyle::kInterleaved;
    } else if (arch == "qwen2" || arch == "qwen3" || IsGemmaArch(arch) || arch == "phi3" ||
               arch == "qwen3moe" || arch == "olmoe") {
      c.rope_style = RopeStyle::kHalf;
    } else {
      Fail("unsupported architecture '" + arch +
           "' (supported: llama, mistral, qwen2, qwen3, gemma2, gemma3, phi3, qwen3moe, olmoe)");
    }
    const std::string k = arch + ".";
    c.dim = static_cast<int>(IntKey(k + "embedding_length", std::nullopt));
    c.hidden_dim = static_cast<int>(IntKey(k + "feed_forward_length", std::nullopt));
    c.n_layers = static_cast<int>(IntKey(k + "block_count", std::nullopt));
    c.n_heads = static_cast<int>(IntKey(k + "attention.head_count", std::nullopt));
    c.n_kv_heads = static_cast<int>(IntKey(k + "attention.head_count_kv", c.n_heads));
    int64_t default_hd = c.n_heads > 0 ? c.dim / c.n_heads : 0;
    c.head_dim = static_cast<int>(IntKey(k + "attention.key_length", default_hd));
    if (IntKey(k + "attention.value_length", c.head_dim) != c.head_dim) {
      Fail("attention.value_length differs from key_length (unsupported)");
    }
    // Partial rotary (Phi-4-mini): only the leading dims of each head rotate.
    const int64_t rope_dims = IntKey(k + "rope.dimension_count", c.head_dim);
    if (rope_dims <= 0 || rope_dims > c.head_dim || rope_dims % 2 != 0) {
      Fail("rope.dimension_count (" + std::to_string(rope_dims) +
           ") must be even and at most the head size");
    }
    if (rope_dims != c.head_dim) c.rope_dim = static_cast<int>(rope_dims);
    c.max_seq_len = static_cast<int>(IntKey(k + "context_length", 2048));
    c.norm_eps = static_cast<float>(
        FloatKey(k + "attention.layer_norm_rms_epsilon", 1e-5));
    c.rope_theta = static_cast<float>(FloatKey(k + "rope.freq_base", 10000.0));

    if (const GgufValue* st = Key(k + "rope.scaling.type")) {
      const std::string* type = st->AsString();
      // Gemma 3's linear scaling of its global layers is read with the
      // other Gemma keys (gemma_config.cc).
      const bool gemma_linear = IsGemmaArch(arch) && type && *type == "linear";
      if (!type || (*type != "none" && !type->empty() && !gemma_linear)) {
        Fail("unsupported RoPE scaling type '" + (type ? *type : "?") + "'");
      }
    }
    if (const TensorInfo* f = Find("rope_freqs.weight")) ReadRopeFreqs(*f);

    const TensorInfo* embd = Find("model.embed_tokens.weight");
    if (!embd) Fail("missing tensor 'token_embd.weight'");
    if (embd->shape.size() != 2 || embd->shape[0] > INT32_MAX) {
      Fail("tensor 'token_embd.weight' is not a 2-D [vocab, dim] matrix");
    }
    c.vocab_size = static_cast<int>(embd->shape[0]);
    c.tied_embeddings = Find("lm_head.weight") == nullptr;
    c.qkv_bias = Find("model.layers.0.self_attn.q_proj.bias") != nullptr;
    c.qk_norm = Find("model.layers.0.self_attn.q_norm.weight") != nullptr;
    if (IsGemmaArch(arch)) ReadGemmaGgufConfig(*file_, path(), c);
    ReadPhi3AndMoe();
    CanonicalizeTensors();
  }

  // LongRoPE factors (Phi-3), the sliding window Phi-3 mini declares, and
  // the expert counts of MoE files (qwen3moe, olmoe, Mixtral as "llama").
  void ReadPhi3AndMoe() {
    ModelConfig& c = config_;
    const std::string k = c.arch + ".";
    const TensorInfo* lf = Find("rope_factors_long.weight");
    const TensorInfo* sf = Find("rope_factors_short.weight");
    if (lf || sf) {
      if (!lf || !sf) Fail("rope_factors_long.weight and rope_factors_short.weight come in pairs");
      LongRopeScaling s;
      s.long_factors = F32Vector(*lf);
      s.short_factors = F32Vector(*sf);
      s.original_max_position = static_cast<int>(
          IntKey(k + "rope.scaling.original_context_length", c.max_seq_len));
      s.attention_factor = static_cast<float>(FloatKey(k + "rope.scaling.attn_factor", 1.0));
      c.longrope = std::move(s);
    }
    if (c.arch == "phi3") {
      // A window shorter than the context is full attention up to it (as
      // for Mistral in hf_model.cc); 0 means none (Phi-4).
      const int64_t window = IntKey(k + "attention.sliding_window", 0);
      if (window > 0 && window < c.max_seq_len) c.max_seq_len = static_cast<int>(window);
    }
    c.n_experts = static_cast<int>(IntKey(k + "expert_count", 0));
    if (c.n_experts > 0) {
      c.n_experts_used = static_cast<int>(IntKey(k + "expert_used_count", std::nullopt));
      c.expert_hidden_dim =
          static_cast<int>(IntKey(k + "expert_feed_forward_length", c.hidden_dim));
      // llama.cpp: Mixtral and qwen3moe renormalise the top-k weights,
      // olmoe does not.
      c.moe_routing = c.arch == "olmoe" ? MoeRouting::kSoftmaxTopK
                                        : MoeRouting::kSoftmaxTopKRenorm;
      if (IntKey(k + "expert_shared_count", 0) != 0) {
        Fail("shared experts are not supported");
      }
    }
    c.qk_norm_full = c.arch == "olmoe";
  }

  std::vector<float> F32Vector(const TensorInfo& t) const {
    if (t.dtype != DType::kF32 || t.shape.size() != 1) {
      Fail("tensor '" + t.file_name + "' must be a 1-D F32 tensor");
    }
    std::vector<float> v(t.shape[0]);
    std::memcpy(v.data(), t.data, v.size() * sizeof(float));
    return v;
  }

  // Llama 3.1 scaling arrives as per-frequency divisors; recover the
  // parameters so the runtime needs only one code path.
  void ReadRopeFreqs(const TensorInfo& f) {
    ModelConfig& c = config_;
    if (f.dtype != DType::kF32 || f.shape.size() != 1 || c.head_dim <= 0 ||
        f.shape[0] != c.head_dim / 2) {
      Fail("tensor 'rope_freqs.weight' must be F32 of head_dim/2 elements");
    }
    std::vector<float> factors(f.shape[0]);
    std::memcpy(factors.data(), f.data, factors.size() * sizeof(float));
    int orig = static_cast<int>(
        IntKey(c.arch + ".rope.scaling.original_context_length", 8192));
    auto s = FitLlama3RopeScaling(factors, c.rope_theta, c.head_dim, orig);
    if (!s) {
      Fail("tensor 'rope_freqs.weight' does not match Llama 3 RoPE scaling "
           "(other frequency scalings are not supported)");
    }
    if (s->factor != 1.0f) c.llama3_scaling = s;
  }

  std::unique_ptr<GgufFile> file_;
};

}  // namespace

std::unique_ptr<ModelSource> OpenGgufModel(const std::string& path) {
  return std::make_unique<GgufSource>(path);
}

}  // namespace specline
