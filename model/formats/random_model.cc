#include "model/formats/random_model.h"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "model/formats/gemma_config.h"
#include "model/formats/gguf_names.h"
#include "model/formats/gguf_writer.h"
#include "kernels/cpu/ops.h"
#include "model/formats/arch_tensors.h"
#include "model/formats/quantize.h"
#include "model/formats/random_model_arch.h"
#include "model/formats/rope_factors.h"
#include "model/formats/rope_layout.h"
#include "model/formats/safetensors.h"
#include "model/splitmix64.h"

namespace specline {

namespace {


// fn(i) for every i in [0, n), on up to one thread per core; the first
// exception is rethrown once every thread is done. A 1B-parameter model is
// drawn and encoded in seconds this way, not minutes.
template <typename Fn>
void ParallelFor(int64_t n, const Fn& fn) {
  const int64_t threads =
      std::min<int64_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::exception_ptr error;
  std::mutex mu;
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int64_t i; (i = next++) < n;) {
        try {
          fn(i);
        } catch (...) {
          std::lock_guard<std::mutex> lock(mu);
          if (!error) error = std::current_exception();
        }
      }
    });
  }
  for (std::thread& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

uint64_t HashName(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// `n` values center + uniform(-half_width, half_width).
std::vector<float> Uniform(uint64_t seed, const std::string& name, int64_t n,
                           float center, float half_width) {
  uint64_t state = seed ^ HashName(name);
  std::vector<float> v(n);
  for (float& x : v) {
    float u = static_cast<float>(SplitMix64(state) >> 40) * (1.0f / 16777216.0f);
    x = center + (2.0f * u - 1.0f) * half_width;
  }
  return v;
}

// The double whose shortest decimal form is that of `f`, so config.json says
// 1e-05 rather than 9.999999747378752e-06.
double Shortest(float f) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  return std::strtod(std::string(buf, r.ptr).c_str(), nullptr);
}

bool IsInterleavedArch(const std::string& arch) {
  return arch == "llama" || arch == "mistral" || arch == "mixtral";  // GGUF "llama"
}

// Gemma's fixed traits (ApplyGemmaArch) on exactly the Gemma archs, and its
// per-model numbers nowhere else: what the Hugging Face classes can hold.
void CheckGemmaConfig(const ModelConfig& c) {
  const bool gemma = IsGemmaArch(c.arch);
  if (gemma) {
    ModelConfig fixed = c;
    ApplyGemmaArch(fixed);
    if (fixed.scale_embeddings != c.scale_embeddings || fixed.gelu_mlp != c.gelu_mlp ||
        fixed.post_norms != c.post_norms || !c.tied_embeddings) {
      throw std::invalid_argument(
          "a " + c.arch + " config needs scaled embeddings, GeGLU, post-norms and tied "
          "embeddings (ApplyGemmaArch)");
    }
    if (c.llama3_scaling) throw std::invalid_argument("Gemma has no Llama 3 RoPE scaling");
    if (c.arch == "gemma3" && c.attn_softcap != 0.0f) {
      throw std::invalid_argument("gemma3 has no attention soft-capping");
    }
    if (c.arch == "gemma2" && c.rope_theta_local != 0.0f && c.rope_theta_local != c.rope_theta) {
      throw std::invalid_argument("gemma2 has one RoPE base for all layers");
    }
    // GGUF has no key for it: llama.cpp derives it from the model size.
    if (c.query_pre_attn_scalar != 0.0f && c.query_pre_attn_scalar != c.head_dim) {
      throw std::invalid_argument("query_pre_attn_scalar other than head_dim is not writable");
    }
    return;
  }
  if (c.scale_embeddings || c.gelu_mlp || c.post_norms || c.attn_softcap != 0.0f ||
      c.final_softcap != 0.0f || c.query_pre_attn_scalar != 0.0f || c.sliding_window != 0 ||
      c.swa_pattern != 0 || c.rope_theta_local != 0.0f || c.rope_linear_factor != 1.0f) {
    throw std::invalid_argument("Gemma fields set on arch " + c.arch);
  }
}

// Gemma's norm weights are stored as 1 + w in GGUF (llama.cpp's converter
// adds the 1), as w in Hugging Face safetensors.
bool IsGemmaNorm(const RandomTensor& t, const ModelConfig& c) {
  static const std::string kSuffix = "norm.weight";
  return IsGemmaArch(c.arch) && t.name.size() >= kSuffix.size() &&
         t.name.compare(t.name.size() - kSuffix.size(), kSuffix.size(), kSuffix) == 0;
}

void CheckConfig(const ModelConfig& c) {
  std::string err = c.Validate();
  if (!err.empty()) throw std::invalid_argument("invalid model config: " + err);
  if (IsPhi3OrMoeArch(c.arch)) return CheckPhi3OrMoeConfig(c);
  if (c.arch != "llama" && c.arch != "mistral" && c.arch != "qwen2" && c.arch != "qwen3" &&
      !IsGemmaArch(c.arch)) {
    throw std::invalid_argument("unsupported arch " + c.arch);
  }
  CheckGemmaConfig(c);
  // Keep each architecture to what its Hugging Face class has, so the written
  // config.json means exactly this model to transformers too.
  if (c.qkv_bias != (c.arch == "qwen2")) {
    throw std::invalid_argument("qkv_bias must be set exactly for arch qwen2");
  }
  if (c.qk_norm != (c.arch == "qwen3" || c.arch == "gemma3")) {
    throw std::invalid_argument("qk_norm must be set exactly for archs qwen3 and gemma3");
  }
}

// The heads of a q or k tensor (weight, bias or norm) whose rows an
// interleaved-layout format reorders; 0 for every other tensor.
int64_t ReorderedHeads(const RandomTensor& t, const ModelConfig& c) {
  auto ends_with = [&](const char* s) {
    size_t n = std::strlen(s);
    return t.name.size() >= n && t.name.compare(t.name.size() - n, n, s) == 0;
  };
  int64_t heads = 0;
  if (ends_with("q_proj.weight") || ends_with("q_proj.bias")) heads = c.n_heads;
  if (ends_with("k_proj.weight") || ends_with("k_proj.bias")) heads = c.n_kv_heads;
  if (ends_with("q_norm.weight") || ends_with("k_norm.weight")) heads = 1;
  return heads;
}

// A tensor's half-layout rows reordered to interleaved when it is q or k
// (weight, bias or norm) of an interleaved-layout format.
std::vector<float> ToFileLayout(const RandomTensor& t, const ModelConfig& c) {
  const int64_t heads = ReorderedHeads(t, c);
  if (heads == 0) return t.values;
  const int64_t row_elems = t.shape.size() == 2 ? t.shape[1] : 1;
  std::vector<float> out(t.values.size());
  HalfToInterleavedRows(t.values.data(), out.data(), heads, c.head_dim,
                        row_elems * 4);
  return out;
}

void WriteLlama2c(const ModelConfig& c, const std::vector<RandomTensor>& tensors,
                  const std::string& path, DType dtype) {
  if (dtype != DType::kF32) throw std::invalid_argument("llama2.c checkpoints are fp32 only");
  if (!IsInterleavedArch(c.arch) || c.IsMoe() || c.head_dim * c.n_heads != c.dim ||
      c.rope_theta != 10000.0f || c.norm_eps != 1e-5f || c.llama3_scaling) {
    throw std::invalid_argument(
        "llama2.c checkpoints hold only plain Llama models (head_dim * n_heads "
        "== dim, rope_theta 10000, norm_eps 1e-5, no rope scaling)");
  }
  std::map<std::string, std::vector<float>> by_name;
  for (const RandomTensor& t : tensors) by_name[t.name] = ToFileLayout(t, c);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path);
  const int32_t header[7] = {c.dim, c.hidden_dim, c.n_layers, c.n_heads, c.n_kv_heads,
                             c.tied_embeddings ? c.vocab_size : -c.vocab_size,
                             c.max_seq_len};
  out.write(reinterpret_cast<const char*>(header), sizeof header);
  auto put = [&](const std::string& name) {
    const std::vector<float>& v = by_name.at(name);
    out.write(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  };
  put("model.embed_tokens.weight");
  for (const char* stem :
       {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
        "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj",
        "mlp.down_proj", "mlp.up_proj"}) {
    for (int l = 0; l < c.n_layers; ++l) {
      put("model.layers." + std::to_string(l) + "." + stem + ".weight");
    }
  }
  put("model.norm.weight");
  // freq_cis_real / imag as llama2.c's export writes them (run.c ignores them).
  const int half = c.head_dim / 2;
  std::vector<float> re(int64_t{c.max_seq_len} * half), im(re.size());
  for (int p = 0; p < c.max_seq_len; ++p) {
    for (int i = 0; i < half; ++i) {
      double freq = 1.0 / std::pow(10000.0, 2.0 * i / c.head_dim);
      re[int64_t{p} * half + i] = static_cast<float>(std::cos(p * freq));
      im[int64_t{p} * half + i] = static_cast<float>(std::sin(p * freq));
    }
  }
  out.write(reinterpret_cast<const char*>(re.data()), re.size() * 4);
  out.write(reinterpret_cast<const char*>(im.data()), im.size() * 4);
  if (!c.tied_embeddings) put("lm_head.weight");
  if (!out.flush()) throw std::runtime_error("error writing " + path);
}

uint32_t GgufFileType(DType d) {
  // llama.cpp's LLAMA_FTYPE_* for "mostly <dtype>".
  switch (d) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ8_0: return 7;
    case DType::kQ5_0: return 8;
    case DType::kQ5_1: return 9;
    case DType::kQ2_K: return 10;
    case DType::kQ3_K: return 11;  // the *_S ("small": all one type) variants
    case DType::kQ4_K: return 14;
    case DType::kQ5_K: return 16;
    case DType::kQ6_K: return 18;
    case DType::kBF16: return 32;
  }
  return 0;
}

// Copies the tokenizer.* metadata (tokenizer.ggml.tokens, scores, token
// types, special ids, merges, chat template...) of a GGUF vocabulary with
// their stored types. The vocabulary must have exactly vocab_size pieces.
void CopyVocab(const std::string& vocab_path, int64_t vocab_size, GgufWriter& w) {
  auto vocab = GgufFile::Open(vocab_path);  // ModelFormatError when malformed
  const GgufValue* tokens = vocab->Find("tokenizer.ggml.tokens");
  if (!tokens || !tokens->AsArray()) {
    throw std::invalid_argument(vocab_path + " has no tokenizer.ggml.tokens array");
  }
  if (static_cast<int64_t>(tokens->AsArray()->size()) != vocab_size) {
    throw std::invalid_argument("the vocabulary in " + vocab_path + " has " +
                                std::to_string(tokens->AsArray()->size()) +
                                " pieces, the model's vocab size is " +
                                std::to_string(vocab_size));
  }
  for (const auto& [key, value] : vocab->metadata()) {
    if (key.rfind("tokenizer.", 0) != 0) continue;
    w.Set(key, *vocab->TypeOf(key), value);
  }
}

void WriteGguf(const ModelConfig& c, const std::vector<RandomTensor>& tensors,
               const std::string& path, DType dtype, const std::string& vocab_from) {
  GgufWriter w;
  const std::string a = GgufArchName(c) + ".";
  w.SetString("general.architecture", GgufArchName(c));
  w.SetString("general.name", "specline-random");
  w.SetU32("general.file_type", GgufFileType(dtype));
  w.SetU32(a + "context_length", c.max_seq_len);
  w.SetU32(a + "embedding_length", c.dim);
  w.SetU32(a + "feed_forward_length", c.hidden_dim);
  w.SetU32(a + "block_count", c.n_layers);
  w.SetU32(a + "attention.head_count", c.n_heads);
  w.SetU32(a + "attention.head_count_kv", c.n_kv_heads);
  w.SetU32(a + "attention.key_length", c.head_dim);
  w.SetU32(a + "attention.value_length", c.head_dim);
  w.SetU32(a + "rope.dimension_count", c.head_dim);
  w.SetF32(a + "rope.freq_base", c.rope_theta);
  w.SetF32(a + "attention.layer_norm_rms_epsilon", c.norm_eps);
  w.SetU32(a + "vocab_size", c.vocab_size);
  WriteGemmaGgufConfig(c, w);
  AddPhi3OrMoeGguf(c, w);
  if (!vocab_from.empty()) CopyVocab(vocab_from, c.vocab_size, w);
  const bool interleave = IsInterleavedArch(c.arch);
  const int64_t n = static_cast<int64_t>(tensors.size());
  std::vector<std::string> names(n);
  std::vector<DType> types(n);
  for (int64_t i = 0; i < n; ++i) {
    const RandomTensor& t = tensors[i];
    // Matrices and expert stacks in `dtype`; vectors and the MoE router in
    // F32 (llama.cpp's quantizer keeps ffn_gate_inp F32 too).
    const bool router = t.name.size() > 16 && t.name.ends_with(".mlp.gate.weight");
    types[i] = t.shape.size() >= 2 && !router ? dtype : DType::kF32;
    auto name = HfToGgufName(t.name, c.arch);
    if (!name) throw std::logic_error("no GGUF name for " + t.name);
    names[i] = *name;
    if (!RowBytes(types[i], t.shape.back())) {
      throw std::invalid_argument("tensor " + t.name + ": row length " +
                                  std::to_string(t.shape.back()) +
                                  " is not a multiple of the " +
                                  std::string(DTypeName(types[i])) + " block size");
    }
  }
  // Encoded on every core, in runs of whole rows (the same bytes as one
  // pass): first the q/k reorders and the output buffers, per tensor...
  std::vector<std::vector<float>> reordered(n);
  std::vector<std::string> bytes(n);
  ParallelFor(n, [&](int64_t i) {
    const RandomTensor& t = tensors[i];
    if (interleave && ReorderedHeads(t, c) != 0) reordered[i] = ToFileLayout(t, c);
    if (IsGemmaNorm(t, c)) {
      reordered[i] = t.values;
      for (float& x : reordered[i]) x += 1.0f;
    }
    bytes[i].assign(*RowBytes(types[i], static_cast<int64_t>(t.values.size())), '\0');
  });
  // ... then the rows, about 1M values per run.
  struct Run {
    int64_t tensor, first_row, rows;
  };
  std::vector<Run> runs;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t cols = tensors[i].shape.back();
    const int64_t rows = static_cast<int64_t>(tensors[i].values.size()) / cols;
    const int64_t per_run = std::max<int64_t>(1, (int64_t{1} << 20) / cols);
    for (int64_t r = 0; r < rows; r += per_run) runs.push_back({i, r, std::min(per_run, rows - r)});
  }
  ParallelFor(static_cast<int64_t>(runs.size()), [&](int64_t k) {
    const Run& run = runs[k];
    const RandomTensor& t = tensors[run.tensor];
    const float* src = reordered[run.tensor].empty() ? t.values.data() : reordered[run.tensor].data();
    const int64_t cols = t.shape.back();
    const int64_t row_bytes = *RowBytes(types[run.tensor], cols);
    EncodeValuesInto(types[run.tensor], src + run.first_row * cols, run.rows * cols,
                     reinterpret_cast<uint8_t*>(bytes[run.tensor].data()) + run.first_row * row_bytes);
  });
  reordered.clear();
  for (int64_t i = 0; i < n; ++i) {
    w.AddTensor(names[i], types[i], tensors[i].shape, std::move(bytes[i]));
  }
  if (c.llama3_scaling) {
    std::vector<float> f = Llama3RopeFactors(*c.llama3_scaling, c.rope_theta, c.head_dim);
    w.SetU32(a + "rope.scaling.original_context_length",
             c.llama3_scaling->original_max_position);
    w.AddTensorFromF32("rope_freqs.weight", DType::kF32, {int64_t(f.size())}, f.data());
  }
  w.Write(path);
}

// The Gemma2Config / Gemma3TextConfig fields of a Gemma config.
void AddGemmaHfConfig(const ModelConfig& c, nlohmann::ordered_json& j) {
  j.erase("hidden_act");
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["query_pre_attn_scalar"] = c.query_pre_attn_scalar > 0.0f
                                   ? Shortest(c.query_pre_attn_scalar)
                                   : static_cast<double>(c.head_dim);
  j["sliding_window"] = c.sliding_window > 0 ? c.sliding_window : c.max_seq_len;
  nlohmann::ordered_json types = nlohmann::ordered_json::array();
  for (int l = 0; l < c.n_layers; ++l) {
    types.push_back(c.IsSlidingLayer(l) ? "sliding_attention" : "full_attention");
  }
  j["layer_types"] = types;
  j["attn_logit_softcapping"] =
      c.attn_softcap > 0.0f ? nlohmann::ordered_json(Shortest(c.attn_softcap)) : nullptr;
  j["final_logit_softcapping"] =
      c.final_softcap > 0.0f ? nlohmann::ordered_json(Shortest(c.final_softcap)) : nullptr;
  if (c.arch == "gemma3") {
    j["sliding_window_pattern"] = c.swa_pattern;
    j["rope_local_base_freq"] =
        Shortest(c.rope_theta_local > 0.0f ? c.rope_theta_local : c.rope_theta);
  }
  if (c.rope_linear_factor != 1.0f) {
    j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", Shortest(c.rope_linear_factor)}};
  }
}

void WriteHf(const ModelConfig& c, const std::vector<RandomTensor>& tensors,
             const std::string& dir, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) {
    throw std::invalid_argument("Hugging Face safetensors hold F32, F16 or BF16, not " +
                                std::string(DTypeName(dtype)));
  }
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  static const std::map<std::string, std::string> kClass = {
      {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"},
      {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"},
      {"gemma2", "Gemma2ForCausalLM"}, {"gemma3", "Gemma3ForCausalLM"},
      {"phi3", "Phi3ForCausalLM"}, {"qwen3moe", "Qwen3MoeForCausalLM"},
      {"mixtral", "MixtralForCausalLM"}, {"olmoe", "OlmoeForCausalLM"}};
  nlohmann::ordered_json j;
  j["architectures"] = {kClass.at(c.arch)};
  j["model_type"] = c.arch == "gemma3" ? "gemma3_text" : c.arch;
  j["hidden_size"] = c.dim;
  j["intermediate_size"] = c.hidden_dim;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_seq_len;
  j["rms_norm_eps"] = Shortest(c.norm_eps);
  j["rope_theta"] = Shortest(c.rope_theta);
  j["tie_word_embeddings"] = c.tied_embeddings;
  j["hidden_act"] = "silu";
  j["attention_bias"] = c.qkv_bias;
  if (c.arch == "mistral" || c.arch == "qwen2" || c.arch == "qwen3") {
    j["sliding_window"] = nullptr;
    j["use_sliding_window"] = false;
  }
  if (c.llama3_scaling) {
    const Llama3RopeScaling& s = *c.llama3_scaling;
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", Shortest(s.factor)},
                         {"low_freq_factor", Shortest(s.low_freq_factor)},
                         {"high_freq_factor", Shortest(s.high_freq_factor)},
                         {"original_max_position_embeddings", s.original_max_position}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  if (IsGemmaArch(c.arch)) AddGemmaHfConfig(c, j);
  AddPhi3OrMoeHfConfig(c, j);
  j["torch_dtype"] = dtype == DType::kF32 ? "float32"
                     : dtype == DType::kF16 ? "float16" : "bfloat16";
  {
    std::ofstream out(fs::path(dir) / "config.json", std::ios::trunc);
    out << j.dump(2) << "\n";
    if (!out.flush()) throw std::runtime_error("cannot write config.json in " + dir);
  }
  std::vector<std::vector<uint8_t>> bytes;
  bytes.reserve(tensors.size());
  std::vector<TensorInfo> infos;
  for (const RandomTensor& t : tensors) {
    bytes.push_back(EncodeValues(dtype, t.values.data(), t.values.size()));
    TensorInfo info;
    info.name = t.name;
    info.dtype = dtype;
    info.shape = t.shape;
    info.data = bytes.back().data();
    info.nbytes = static_cast<int64_t>(bytes.back().size());
    infos.push_back(std::move(info));
  }
  WriteSafetensors((fs::path(dir) / "model.safetensors").string(), infos,
                   {{"format", "pt"}});
}

}  // namespace

std::vector<RandomTensor> RandomModelTensors(const ModelConfig& c, uint64_t seed) {
  CheckConfig(c);
  const int64_t dim = c.dim, hidden = c.hidden_dim, hd = c.head_dim;
  const int64_t q_rows = c.n_heads * hd, kv_rows = c.n_kv_heads * hd;
  const float kSqrt3 = std::sqrt(3.0f);
  // Names, shapes and ranges first; the values are drawn below, a tensor per
  // thread (each tensor's stream depends only on the seed and its name).
  std::vector<RandomTensor> out;
  std::vector<std::pair<float, float>> ranges;  // center, half width
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols, float std) {
    out.push_back({name, {rows, cols}, {}});
    ranges.push_back({0.0f, std * kSqrt3});
  };
  auto vec = [&](const std::string& name, int64_t n, float center, float half_width) {
    out.push_back({name, {n}, {}});
    ranges.push_back({center, half_width});
  };
  const float emb_std = 2.0f / std::sqrt(static_cast<float>(dim));
  // Norm weights act as 1 +- 0.1 in every arch: Gemma's Hugging Face layout
  // stores w for a norm that multiplies by 1 + w.
  const float norm_center = IsGemmaArch(c.arch) ? 0.0f : 1.0f;
  matrix("model.embed_tokens.weight", c.vocab_size, dim, emb_std);
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    vec(p + "input_layernorm.weight", dim, norm_center, 0.1f);
    matrix(p + "self_attn.q_proj.weight", q_rows, dim, 1.0f / std::sqrt(float(dim)));
    matrix(p + "self_attn.k_proj.weight", kv_rows, dim, 1.0f / std::sqrt(float(dim)));
    matrix(p + "self_attn.v_proj.weight", kv_rows, dim, 1.0f / std::sqrt(float(dim)));
    if (c.qkv_bias) {
      vec(p + "self_attn.q_proj.bias", q_rows, 0.0f, 0.1f);
      vec(p + "self_attn.k_proj.bias", kv_rows, 0.0f, 0.1f);
      vec(p + "self_attn.v_proj.bias", kv_rows, 0.0f, 0.1f);
    }
    if (c.qk_norm) {
      vec(p + "self_attn.q_norm.weight", c.qk_norm_full ? q_rows : hd, norm_center, 0.1f);
      vec(p + "self_attn.k_norm.weight", c.qk_norm_full ? kv_rows : hd, norm_center, 0.1f);
    }
    matrix(p + "self_attn.o_proj.weight", dim, q_rows, 1.0f / std::sqrt(float(q_rows)));
    vec(p + "post_attention_layernorm.weight", dim, norm_center, 0.1f);
    if (c.post_norms) {
      vec(p + "pre_feedforward_layernorm.weight", dim, norm_center, 0.1f);
      vec(p + "post_feedforward_layernorm.weight", dim, norm_center, 0.1f);
    }
    if (c.IsMoe()) {
      // Router logits of a few units (std about 3.5): routing still varies
      // from token to token, and the top-k choice has margins well above
      // bf16 rounding. At order-one logits, 1 row in 10 or so had two experts
      // within 0.02 of each other, and a bf16 GPU stage then routed it to the
      // other one: a legitimate difference between two precisions, but one
      // that hid the GPU path's arithmetic from cuda_runtime_test (measured on
      // an H100, docs/cuda.md).
      const int64_t eh = c.expert_hidden_dim;
      matrix(p + "mlp.gate.weight", c.n_experts, dim, 6.0f / std::sqrt(float(dim)));
      for (int e = 0; e < c.n_experts; ++e) {
        matrix(ExpertTensorName(l, e, "gate_proj"), eh, dim, 1.0f / std::sqrt(float(dim)));
        matrix(ExpertTensorName(l, e, "up_proj"), eh, dim, 1.0f / std::sqrt(float(dim)));
        matrix(ExpertTensorName(l, e, "down_proj"), dim, eh, 1.0f / std::sqrt(float(eh)));
      }
      continue;
    }
    matrix(p + "mlp.gate_proj.weight", hidden, dim, 1.0f / std::sqrt(float(dim)));
    matrix(p + "mlp.up_proj.weight", hidden, dim, 1.0f / std::sqrt(float(dim)));
    matrix(p + "mlp.down_proj.weight", dim, hidden, 1.0f / std::sqrt(float(hidden)));
  }
  vec("model.norm.weight", dim, norm_center, 0.1f);
  if (!c.tied_embeddings) matrix("lm_head.weight", c.vocab_size, dim, emb_std);
  ParallelFor(static_cast<int64_t>(out.size()), [&](int64_t i) {
    int64_t n = 1;
    for (int64_t d : out[i].shape) n *= d;
    out[i].values = Uniform(seed, out[i].name, n, ranges[i].first, ranges[i].second);
  });
  return out;
}

void WriteRandomModel(const ModelConfig& config, ModelFormat format,
                      const std::string& path, uint64_t seed, DType weight_dtype,
                      const std::string& vocab_from) {
  if (!vocab_from.empty() && format != ModelFormat::kGguf) {
    throw std::invalid_argument("a vocabulary can only be copied into a GGUF model");
  }
  std::vector<RandomTensor> tensors =
      PackForFile(config, RandomModelTensors(config, seed), format);
  switch (format) {
    case ModelFormat::kLlama2c: WriteLlama2c(config, tensors, path, weight_dtype); break;
    case ModelFormat::kGguf: WriteGguf(config, tensors, path, weight_dtype, vocab_from); break;
    case ModelFormat::kHuggingFace: WriteHf(config, tensors, path, weight_dtype); break;
  }
}

void WriteModelAsGguf(const ModelSource& src, const std::string& path, DType weight_dtype) {
  std::vector<RandomTensor> tensors;
  for (const TensorInfo* t : src.Tensors()) {
    RandomTensor r{t->name, t->shape, std::vector<float>(t->numel())};
    kernels::DequantizeRow(t->dtype, t->data, t->numel(), r.values.data());
    tensors.push_back(std::move(r));
  }
  // lm_head of a tied model is the embedding: GGUF leaves "output" out.
  if (src.config().tied_embeddings) {
    std::erase_if(tensors, [](const RandomTensor& t) { return t.name == "lm_head.weight"; });
  }
  WriteGguf(src.config(), PackForFile(src.config(), std::move(tensors), ModelFormat::kGguf), path,
            weight_dtype, "");
}

}  // namespace specline
