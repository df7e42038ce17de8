// `specline make-random-model` and `specline info`.
#include <iostream>
#include <map>

#include "cli/args.h"
#include "cli/commands.h"
#include "model/formats/gguf.h"
#include "model/formats/head_file.h"
#include "model/formats/random_model.h"
#include "model/formats/random_model_arch.h"

namespace specline::cli {
namespace {

const char kRandomUsage[] = R"(usage: specline make-random-model --out PATH [options]
  --format llama2c|gguf|hf   (default gguf)
  --dtype F32|F16|BF16|Q8_0|Q4_0|Q4_1|Q5_0|Q5_1|Q2_K|Q3_K|Q4_K|Q5_K|Q6_K
                             weight type (gguf: all, K-quants need dims that
                             are multiples of 256; hf: float types; llama2c: F32)
  --dim N --hidden-dim N --layers N --heads N --kv-heads N --head-dim N
  --vocab N --seq-len N --rope-theta F --seed N
  --tied                     share the embedding with the LM head
  --arch llama|qwen2|qwen3|gemma2|gemma3|phi3|qwen3moe|mixtral|olmoe
                             qwen2 adds qkv bias, qwen3 q/k norm; gemma2/3 the
                             Gemma block (scaled tied embeddings, GeGLU,
                             post-norms; gemma3 q/k norm) with sliding windows;
                             phi3 fuses qkv and gate/up in its files; qwen3moe,
                             mixtral (GGUF arch "llama") and olmoe have experts
  --sliding-window N         (gemma; default 128) window of the local layers
  --swa-pattern N            (gemma; 2 / 6) layer l local iff l % N < N - 1
  --rope-theta-local F       (gemma3; 10000) RoPE base of the local layers
  --attn-softcap F --final-softcap F   (gemma2: 50 / 30; 0 = none)
  --experts N --experts-used N --expert-hidden-dim N
                             mixture of experts (default 8, 2, --hidden-dim)
  --rope-dim N               phi3 partial rotary: rotated dims per head
  --longrope-original N      phi3 LongRoPE factors with this original context
                             (long factors in use when --seq-len exceeds it)
  --vocab-from PATH.gguf     copy the tokenizer.* metadata of a GGUF vocabulary
                             (e.g. ggml-vocab-llama-spm.gguf) so llama.cpp can
                             load the model; --vocab defaults to its size
Shape of stories110M: --dim 768 --hidden-dim 2048 --layers 12 --heads 12 --vocab 32000
)";

DType ParseDType(const std::string& s) {
  static const std::map<std::string, DType> kTypes = {
      {"F32", DType::kF32},   {"F16", DType::kF16},   {"BF16", DType::kBF16},
      {"Q8_0", DType::kQ8_0}, {"Q4_0", DType::kQ4_0}, {"Q4_1", DType::kQ4_1},
      {"Q5_0", DType::kQ5_0}, {"Q5_1", DType::kQ5_1}, {"Q2_K", DType::kQ2_K},
      {"Q3_K", DType::kQ3_K}, {"Q4_K", DType::kQ4_K}, {"Q5_K", DType::kQ5_K},
      {"Q6_K", DType::kQ6_K}};
  auto it = kTypes.find(s);
  if (it == kTypes.end()) throw std::invalid_argument("--dtype: unknown type " + s);
  return it->second;
}

ModelFormat ParseFormat(const std::string& s) {
  if (s == "llama2c") return ModelFormat::kLlama2c;
  if (s == "gguf") return ModelFormat::kGguf;
  if (s == "hf") return ModelFormat::kHuggingFace;
  throw std::invalid_argument("--format: expected llama2c, gguf or hf, got " + s);
}

// The arch-specific fields of Phi-3 and the MoE archs.
void SetPhi3AndMoeOptions(const Args& args, ModelConfig& c) {
  const bool moe = c.arch == "qwen3moe" || c.arch == "mixtral" || c.arch == "olmoe";
  if (moe) {
    c.n_experts = args.Int("experts", 8);
    c.n_experts_used = args.Int("experts-used", 2);
    c.expert_hidden_dim = args.Int("expert-hidden-dim", c.hidden_dim);
    // Mixtral and OLMoE have one intermediate size.
    if (c.arch != "qwen3moe") c.hidden_dim = c.expert_hidden_dim;
    c.moe_routing =
        c.arch == "olmoe" ? MoeRouting::kSoftmaxTopK : MoeRouting::kSoftmaxTopKRenorm;
    c.qk_norm = c.arch != "mixtral";
    c.qk_norm_full = c.arch == "olmoe";
  }
  if (c.arch == "phi3") {
    c.rope_dim = args.Int("rope-dim", 0);
    if (args.Has("longrope-original")) {
      c.longrope = RandomLongRope(c.RopeDim(), args.Int("longrope-original", 0), c.max_seq_len);
    }
  }
}

// Gemma's fixed traits plus its per-model numbers from the flags: by
// default a window short enough for tests to cross (128), Gemma 3's 5 local
// : 1 global layers with local base 10000 (global base --rope-theta), Gemma
// 2's alternation with soft caps 50 / 30.
void ConfigureRandomGemma(const Args& args, ModelConfig& c) {
  const bool gemma2 = c.arch == "gemma2";
  ApplyGemmaArch(c);
  c.tied_embeddings = true;
  c.sliding_window = args.Int("sliding-window", 128);
  c.swa_pattern = args.Int("swa-pattern", gemma2 ? 2 : 6);
  c.rope_theta = static_cast<float>(args.Float("rope-theta", gemma2 ? 10000.0 : 1000000.0));
  c.rope_theta_local =
      static_cast<float>(args.Float("rope-theta-local", gemma2 ? c.rope_theta : 10000.0));
  c.attn_softcap = static_cast<float>(args.Float("attn-softcap", gemma2 ? 50.0 : 0.0));
  c.final_softcap = static_cast<float>(args.Float("final-softcap", gemma2 ? 30.0 : 0.0));
}

}  // namespace

int RandomModelCommand(int argc, char** argv) {
  Args args(argc, argv, 2,
            {"out", "format", "dtype", "dim", "hidden-dim", "layers", "heads", "kv-heads",
             "head-dim", "vocab", "seq-len", "rope-theta", "seed", "arch", "vocab-from",
             "sliding-window", "swa-pattern", "rope-theta-local", "attn-softcap",
             "final-softcap", "experts", "experts-used", "expert-hidden-dim", "rope-dim",
             "longrope-original"},
            {"tied", "help"});
  if (args.Has("help") || !args.Has("out")) {
    std::cout << kRandomUsage;
    return args.Has("help") ? 0 : 2;
  }
  ModelConfig c;
  c.arch = args.Str("arch", "llama");
  c.dim = args.Int("dim", 288);
  c.hidden_dim = args.Int("hidden-dim", 768);
  c.n_layers = args.Int("layers", 6);
  c.n_heads = args.Int("heads", 6);
  c.n_kv_heads = args.Int("kv-heads", c.n_heads);
  c.head_dim = args.Int("head-dim", c.n_heads > 0 ? c.dim / c.n_heads : 0);
  const std::string vocab_from = args.Str("vocab-from", "");
  int default_vocab = 32000;
  if (!vocab_from.empty()) {
    const GgufValue* tokens = GgufFile::Open(vocab_from)->Find("tokenizer.ggml.tokens");
    if (!tokens || !tokens->AsArray()) {
      std::cerr << "--vocab-from: " << vocab_from << " has no tokenizer.ggml.tokens\n";
      return 2;
    }
    default_vocab = static_cast<int>(tokens->AsArray()->size());
  }
  c.vocab_size = args.Int("vocab", default_vocab);
  c.max_seq_len = args.Int("seq-len", 1024);
  c.rope_theta = static_cast<float>(args.Float("rope-theta", 10000.0));
  c.tied_embeddings = args.Has("tied");
  c.qkv_bias = c.arch == "qwen2";
  c.qk_norm = c.arch == "qwen3";
  if (IsGemmaArch(c.arch)) {
    ConfigureRandomGemma(args, c);
  } else {
    for (const char* flag : {"sliding-window", "swa-pattern", "rope-theta-local", "attn-softcap",
                             "final-softcap"}) {
      if (args.Has(flag)) {
        std::cerr << "--" << flag << " is for --arch gemma2 / gemma3, not " << c.arch << "\n";
        return 2;
      }
    }
  }
  SetPhi3AndMoeOptions(args, c);
  const ModelFormat format = ParseFormat(args.Str("format", "gguf"));
  c.rope_style = (format == ModelFormat::kHuggingFace || c.arch != "llama") ? RopeStyle::kHalf
                                                                           : RopeStyle::kInterleaved;
  if (std::string err = c.Validate(); !err.empty()) {
    std::cerr << "invalid shape: " << err << "\n";
    return 2;
  }
  WriteRandomModel(c, format, args.Str("out"), args.U64("seed", 1),
                   ParseDType(args.Str("dtype", "F32")), vocab_from);
  std::cerr << "wrote " << args.Str("out") << "\n";
  return 0;
}

int InfoCommand(int argc, char** argv) {
  Args args(argc, argv, 2, {"model", "head"}, {"tensors", "help"});
  if (args.Has("help") || !args.Has("model")) {
    std::cout << "usage: specline info --model PATH [--tensors] [--head DIR]\n"
                 "  --head DIR   load a specline.head.v1 draft head against the model\n"
                 "               (LoadDraftHead) and print its spec\n";
    return args.Has("help") ? 0 : 2;
  }
  auto model = OpenModel(args.Str("model"));
  const ModelConfig& c = model->config();
  std::cout << "arch " << c.arch << ", dim " << c.dim << ", hidden " << c.hidden_dim
            << ", layers " << c.n_layers << ", heads " << c.n_heads << "/" << c.n_kv_heads
            << " (head_dim " << c.head_dim << "), vocab " << c.vocab_size << ", context "
            << c.max_seq_len << ", rope_theta " << c.rope_theta
            << (c.tied_embeddings ? ", tied embeddings" : "") << (c.qkv_bias ? ", qkv bias" : "")
            << (c.qk_norm ? ", q/k norm" : "") << (c.qk_norm_full ? " (whole projection)" : "");
  if (c.rope_dim > 0) std::cout << ", rope dims " << c.rope_dim;
  if (c.longrope) {
    std::cout << ", longrope (original " << c.longrope->original_max_position << ", "
              << (c.max_seq_len > c.longrope->original_max_position ? "long" : "short")
              << " factors, attention factor " << c.longrope->attention_factor << ")";
  }
  if (c.IsMoe()) {
    std::cout << ", " << c.n_experts << " experts of " << c.expert_hidden_dim << ", top "
              << c.n_experts_used
              << (c.moe_routing == MoeRouting::kSoftmaxTopKRenorm ? " renormalised" : "");
  }
  std::cout << "\n";
  if (IsGemmaArch(c.arch)) {
    std::cout << "gemma: sliding window " << c.sliding_window << " (pattern " << c.swa_pattern
              << "), local rope_theta " << c.rope_theta_local << ", attention scale "
              << c.AttentionScale() << ", soft caps " << c.attn_softcap << " / "
              << c.final_softcap << "\n";
  }
  if (args.Has("tensors")) {
    for (const TensorInfo* t : model->Tensors()) {
      std::cout << t->name << " " << DTypeName(t->dtype) << " [";
      for (size_t i = 0; i < t->shape.size(); ++i) std::cout << (i ? ", " : "") << t->shape[i];
      std::cout << "]\n";
    }
  }
  if (args.Has("head")) {
    auto head = LoadDraftHead(args.Str("head"), c);  // throws ModelFormatError
    const HeadConfig& s = head->config();
    std::cout << "head " << head->dir() << ": method " << DraftMethodName(s.method);
    if (s.method == DraftMethod::kSpd) {
      std::cout << ", n_stages " << s.spd_stages << ", layers " << s.spd_layers << ", layout "
                << SpdFeatureLayoutName(s.spd_layout) << ", taps [";
      for (size_t i = 0; i < s.spd_taps.size(); ++i) std::cout << (i ? ", " : "") << s.spd_taps[i];
      std::cout << "]";
    } else if (s.method == DraftMethod::kPtp) {
      std::cout << ", n_aux " << s.ptp_n_aux << ", lora_rank " << s.ptp_lora_rank << ", lora_alpha "
                << s.ptp_lora_alpha;
    } else if (s.method == DraftMethod::kPipo) {
      std::cout << ", pad_id " << s.pipo_pad_id << ", tau_default " << s.pipo_tau_default << ", backbone "
                << s.pipo_backbone_file;
    } else {
      std::cout << ", exit_layer " << s.exit_layer;
    }
    std::cout << ", tensors " << head->source().Tensors().size() << "\n";
    std::cout << "metadata " << s.metadata_json << "\n";
  }
  return 0;
}

}  // namespace specline::cli
