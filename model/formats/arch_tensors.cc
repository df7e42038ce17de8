#include "model/formats/arch_tensors.h"

#include <vector>

#include "model/formats/model_source.h"

namespace specline {

namespace {

[[noreturn]] void Fail(const std::string& path, const std::string& what) {
  throw ModelFormatError(path + ": " + what);
}

// Rows [first, first + rows) of `t` viewed as a 2-D [rows, cols] tensor
// (t's trailing dimension is cols; leading ones are flattened into rows).
TensorInfo RowView(const TensorInfo& t, const std::string& name, int64_t first, int64_t rows,
                   const std::string& path) {
  const int64_t cols = t.cols();
  const auto row_bytes = RowBytes(t.dtype, cols);
  if (!row_bytes || t.shape.size() < 2) {
    Fail(path, "tensor '" + t.file_name + "' is not a matrix of whole blocks");
  }
  TensorInfo v = t;
  v.name = name;
  v.file_name = t.file_name + "[rows " + std::to_string(first) + ".." +
                std::to_string(first + rows) + ")";
  v.shape = {rows, cols};
  v.data = static_cast<const uint8_t*>(t.data) + first * *row_bytes;
  v.nbytes = rows * *row_bytes;
  return v;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Splits `t` (rows = sum of parts) into consecutive row views named
// prefix + part name.
void SplitRows(const TensorInfo& t, const std::string& prefix,
               const std::vector<std::pair<std::string, int64_t>>& parts, const std::string& path,
               std::map<std::string, TensorInfo>& out) {
  int64_t total = 0;
  for (const auto& p : parts) total += p.second;
  if (t.shape.size() != 2 || t.shape[0] != total) {
    Fail(path, "fused tensor '" + t.file_name + "' has shape " + ShapeString(t.shape) +
                   ", expected " + std::to_string(total) + " rows");
  }
  int64_t first = 0;
  for (const auto& [name, rows] : parts) {
    out.insert_or_assign(prefix + name, RowView(t, prefix + name, first, rows, path));
    first += rows;
  }
}

// "model.layers.N." for a tensor of layer N, "" for any other tensor.
std::string LayerPrefix(const std::string& name) {
  const std::string p = "model.layers.";
  if (name.rfind(p, 0) != 0) return std::string();
  const size_t dot = name.find('.', p.size());
  return dot == std::string::npos ? std::string() : name.substr(0, dot + 1);
}

}  // namespace

std::string ExpertTensorName(int layer, int expert, const std::string& proj) {
  return "model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(expert) +
         "." + proj + ".weight";
}

void CanonicalizeArchTensors(const ModelConfig& c, const std::string& path,
                             std::map<std::string, TensorInfo>& tensors) {
  const int64_t q_dim = int64_t{c.n_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.n_kv_heads} * c.head_dim;
  std::map<std::string, TensorInfo> out;
  for (auto& [name, t] : tensors) {
    const std::string layer_prefix = LayerPrefix(name);
    const std::string rest = layer_prefix.empty() ? "" : name.substr(layer_prefix.size());
    if (rest == "self_attn.qkv_proj.weight") {
      SplitRows(t, layer_prefix + "self_attn.",
                {{"q_proj.weight", q_dim}, {"k_proj.weight", kv_dim}, {"v_proj.weight", kv_dim}},
                path, out);
      continue;
    }
    const bool fused_up = rest == "mlp.gate_up_proj.weight" ||
                          (c.arch == "phi3" && rest == "mlp.up_proj.weight");
    if (fused_up) {
      SplitRows(t, layer_prefix + "mlp.",
                {{"gate_proj.weight", c.hidden_dim}, {"up_proj.weight", c.hidden_dim}}, path, out);
      continue;
    }
    // Mixtral's Hugging Face names.
    if (rest.rfind("block_sparse_moe.", 0) == 0) {
      std::string r = rest.substr(std::string("block_sparse_moe.").size());
      for (const auto& [from, to] : {std::pair<std::string, std::string>{".w1.", ".gate_proj."},
                                     {".w3.", ".up_proj."},
                                     {".w2.", ".down_proj."}}) {
        const size_t at = r.find(from);
        if (at != std::string::npos) r.replace(at, from.size(), to);
      }
      TensorInfo v = t;
      v.name = layer_prefix + "mlp." + r;
      out.insert_or_assign(v.name, std::move(v));
      continue;
    }
    // Stacked experts: [E, rows, cols] -> E views.
    if (rest.rfind("mlp.experts.", 0) == 0 && t.shape.size() == 3) {
      const std::string proj = rest.substr(std::string("mlp.experts.").size());
      const int64_t experts = t.shape[0], rows = t.shape[1];
      // Bounded before any view is made (ModelConfig::Validate's limit).
      if (experts <= 0 || experts > 4096) {
        Fail(path, "tensor '" + t.file_name + "' stacks " + std::to_string(experts) +
                       " experts (at most 4096)");
      }
      if (c.n_experts > 0 && experts != c.n_experts) {
        Fail(path, "tensor '" + t.file_name + "' stacks " + std::to_string(experts) +
                       " experts, the model has " + std::to_string(c.n_experts));
      }
      const std::string index = layer_prefix.substr(std::string("model.layers.").size(),
                                                    layer_prefix.size() - 14);
      if (index.empty() || index.size() > 6 ||
          index.find_first_not_of("0123456789") != std::string::npos) {
        Fail(path, "tensor '" + t.file_name + "' has no layer index");
      }
      const int layer = std::stoi(index);
      for (int64_t e = 0; e < experts; ++e) {
        if (proj == "gate_up_proj" || proj == "gate_up_proj.weight") {
          // transformers 5: gate rows, then up rows, per expert.
          if (rows % 2 != 0) Fail(path, "tensor '" + t.file_name + "' has an odd row count");
          const std::string g = ExpertTensorName(layer, int(e), "gate_proj");
          const std::string u = ExpertTensorName(layer, int(e), "up_proj");
          out.insert_or_assign(g, RowView(t, g, e * rows, rows / 2, path));
          out.insert_or_assign(u, RowView(t, u, e * rows + rows / 2, rows / 2, path));
        } else {
          std::string stem = proj;
          if (EndsWith(stem, ".weight")) stem.resize(stem.size() - 7);
          const std::string n = ExpertTensorName(layer, int(e), stem);
          out.insert_or_assign(n, RowView(t, n, e * rows, rows, path));
        }
      }
      continue;
    }
    out.insert_or_assign(name, std::move(t));
  }
  tensors = std::move(out);
}

}  // namespace specline
