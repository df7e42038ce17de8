// OpenModel's format detection, Require, and the structural validation every
// source goes through before it is handed out.
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "model/formats/arch_tensors.h"
#include "model/formats/basic_source.h"

namespace specline {

namespace fs = std::filesystem;

namespace {

bool HasGgufMagic(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char magic[4] = {};
  size_t n = std::fread(magic, 1, 4, f);
  std::fclose(f);
  return n == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace

const TensorInfo* BasicModelSource::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<const TensorInfo*> BasicModelSource::Tensors() const {
  std::vector<const TensorInfo*> out;
  out.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) out.push_back(&t);
  return out;
}

void BasicModelSource::AddTensor(TensorInfo t) {
  std::string name = t.name;
  if (!tensors_.emplace(name, std::move(t)).second) {
    throw ModelFormatError(path_ + ": tensor '" + name + "' appears twice");
  }
}

void BasicModelSource::CanonicalizeTensors() {
  CanonicalizeArchTensors(config_, path_, tensors_);
}

const TensorInfo& ModelSource::Require(const std::string& name,
                                       const std::vector<int64_t>& shape) const {
  const TensorInfo* t = Find(name);
  if (!t) {
    throw ModelFormatError(path() + ": missing tensor '" + name + "'");
  }
  if (!shape.empty() && t->shape != shape) {
    throw ModelFormatError(path() + ": tensor '" + name + "' (" +
                           t->file_name + " in " + t->file_path +
                           ") has shape " + ShapeString(t->shape) +
                           ", expected " + ShapeString(shape));
  }
  return *t;
}

namespace {

// A MoE layer: the router [E, dim] and every expert's three matrices.
void ValidateExperts(const ModelSource& src, int layer) {
  const ModelConfig& c = src.config();
  const int64_t dim = c.dim, h = c.expert_hidden_dim;
  src.Require("model.layers." + std::to_string(layer) + ".mlp.gate.weight",
              {c.n_experts, dim});
  for (int e = 0; e < c.n_experts; ++e) {
    src.Require(ExpertTensorName(layer, e, "gate_proj"), {h, dim});
    src.Require(ExpertTensorName(layer, e, "up_proj"), {h, dim});
    src.Require(ExpertTensorName(layer, e, "down_proj"), {dim, h});
  }
}

}  // namespace

void ValidateModelSource(const ModelSource& src) {
  const ModelConfig& c = src.config();
  std::string err = c.Validate();
  if (!err.empty()) {
    throw ModelFormatError(src.path() + ": invalid model config: " + err);
  }
  const int64_t dim = c.dim, hd = c.head_dim, hidden = c.hidden_dim;
  const int64_t q_rows = int64_t{c.n_heads} * hd;
  const int64_t kv_rows = int64_t{c.n_kv_heads} * hd;
  src.Require("model.embed_tokens.weight", {c.vocab_size, dim});
  src.Require("model.norm.weight", {dim});
  if (c.tied_embeddings) {
    // A tied model may still carry an explicit copy; then it must fit too.
    if (src.Find("lm_head.weight")) src.Require("lm_head.weight", {c.vocab_size, dim});
  } else {
    src.Require("lm_head.weight", {c.vocab_size, dim});
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    src.Require(p + "input_layernorm.weight", {dim});
    src.Require(p + "post_attention_layernorm.weight", {dim});
    src.Require(p + "self_attn.q_proj.weight", {q_rows, dim});
    src.Require(p + "self_attn.k_proj.weight", {kv_rows, dim});
    src.Require(p + "self_attn.v_proj.weight", {kv_rows, dim});
    src.Require(p + "self_attn.o_proj.weight", {dim, q_rows});
    if (c.IsMoe()) {
      ValidateExperts(src, l);
    } else {
      src.Require(p + "mlp.gate_proj.weight", {hidden, dim});
      src.Require(p + "mlp.up_proj.weight", {hidden, dim});
      src.Require(p + "mlp.down_proj.weight", {dim, hidden});
    }
    if (c.qkv_bias) {
      src.Require(p + "self_attn.q_proj.bias", {q_rows});
      src.Require(p + "self_attn.k_proj.bias", {kv_rows});
      src.Require(p + "self_attn.v_proj.bias", {kv_rows});
    }
    if (const TensorInfo* o = src.Find(p + "self_attn.o_proj.bias")) {
      src.Require(o->name, {dim});
    }
    if (c.qk_norm) {
      src.Require(p + "self_attn.q_norm.weight", {c.qk_norm_full ? q_rows : hd});
      src.Require(p + "self_attn.k_norm.weight", {c.qk_norm_full ? kv_rows : hd});
    }
    if (c.post_norms) {  // Gemma: the MLP's input norm and its output norm
      src.Require(p + "pre_feedforward_layernorm.weight", {dim});
      src.Require(p + "post_feedforward_layernorm.weight", {dim});
    }
  }
}

std::unique_ptr<ModelSource> OpenModel(const std::string& path) {
  std::error_code ec;
  fs::path p(path);
  if (!fs::exists(p, ec)) {
    throw ModelFormatError(path + ": no such file or directory");
  }
  std::unique_ptr<ModelSource> src;
  if (fs::is_directory(p, ec)) {
    if (!fs::exists(p / "config.json", ec)) {
      throw ModelFormatError(path +
                             ": directory has no config.json (expected a "
                             "Hugging Face model directory)");
    }
    src = OpenHfModel(path);
  } else if (p.filename() == "config.json" || p.extension() == ".safetensors") {
    // A file inside a Hugging Face directory stands for the directory.
    src = OpenHfModel(p.parent_path().empty() ? "." : p.parent_path().string());
  } else if (HasGgufMagic(path)) {
    src = OpenGgufModel(path);
  } else {
    src = OpenLlama2cModel(path);
  }
  ValidateModelSource(*src);
  return src;
}

}  // namespace specline
