// Karpathy's llama2.c legacy checkpoint ("version 0", written by export.py's
// legacy_export and read by run.c):
//   int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
//   then fp32 arrays, each stacked over layers where marked [L]:
//   token_embedding [vocab, dim], rms_att [L][dim], wq [L][dim, dim],
//   wk [L][kv_dim, dim], wv [L][kv_dim, dim], wo [L][dim, dim],
//   rms_ffn [L][dim], w1 [L][hidden, dim], w2 [L][dim, hidden],
//   w3 [L][hidden, dim], rms_final [dim], freq_cis_real [seq_len, head/2],
//   freq_cis_imag [seq_len, head/2], and wcls [vocab, dim] when vocab_size in
//   the header is negative (untied classifier).
// Matrices are PyTorch Linear weights ([out, in]), q/k in Meta's interleaved
// RoPE layout.
#include <cstring>

#include "model/formats/basic_source.h"
#include "model/formats/byte_reader.h"
#include "model/formats/mapped_file.h"

namespace specline {

namespace {

constexpr int kHeaderBytes = 7 * 4;

class Llama2cSource : public BasicModelSource {
 public:
  explicit Llama2cSource(const std::string& path)
      : BasicModelSource(ModelFormat::kLlama2c, path) {
    auto map = MappedFile::Open(path);
    KeepMap(map);
    ByteReader r(path, map->data(), map->size());
    int32_t h[7];
    for (int32_t& v : h) v = r.Read<int32_t>("llama2.c header");
    // export.py's versioned formats start with the magic "ak42".
    if (static_cast<uint32_t>(h[0]) == 0x616b3432) {
      Fail("is a versioned llama2.c export (magic ak42, version " +
           std::to_string(h[1]) + "); only the legacy format is supported");
    }
    const bool tied = h[5] > 0;
    ModelConfig& c = config_;
    c.arch = "llama";
    c.dim = h[0];
    c.hidden_dim = h[1];
    c.n_layers = h[2];
    c.n_heads = h[3];
    c.n_kv_heads = h[4];
    c.vocab_size = h[5] == INT32_MIN ? 0 : (tied ? h[5] : -h[5]);
    c.max_seq_len = h[6];
    c.head_dim = c.n_heads > 0 ? c.dim / c.n_heads : 0;
    c.norm_eps = 1e-5f;
    c.rope_theta = 10000.0f;
    c.rope_style = RopeStyle::kInterleaved;
    c.tied_embeddings = tied;
    std::string err = c.Validate();
    if (err.empty() && c.head_dim * c.n_heads != c.dim) {
      err = "dim is not a multiple of n_heads";
    }
    if (!err.empty()) Fail("invalid llama2.c header: " + err);

    const int64_t dim = c.dim, hidden = c.hidden_dim, L = c.n_layers;
    const int64_t vocab = c.vocab_size, hd = c.head_dim;
    const int64_t kv_dim = int64_t{c.n_kv_heads} * hd;
    const int64_t freq = int64_t{c.max_seq_len} * hd / 2;
    struct Block {
      const char* name;  // canonical name, "{}" = layer index
      bool stacked;
      std::vector<int64_t> shape;
    };
    const std::vector<Block> blocks = {
        {"model.embed_tokens.weight", false, {vocab, dim}},
        {"model.layers.{}.input_layernorm.weight", true, {dim}},
        {"model.layers.{}.self_attn.q_proj.weight", true, {dim, dim}},
        {"model.layers.{}.self_attn.k_proj.weight", true, {kv_dim, dim}},
        {"model.layers.{}.self_attn.v_proj.weight", true, {kv_dim, dim}},
        {"model.layers.{}.self_attn.o_proj.weight", true, {dim, dim}},
        {"model.layers.{}.post_attention_layernorm.weight", true, {dim}},
        {"model.layers.{}.mlp.gate_proj.weight", true, {hidden, dim}},  // w1
        {"model.layers.{}.mlp.down_proj.weight", true, {dim, hidden}},  // w2
        {"model.layers.{}.mlp.up_proj.weight", true, {hidden, dim}},    // w3
        {"model.norm.weight", false, {dim}},
        {"", false, {freq}},  // freq_cis_real: run.c recomputes RoPE, unused
        {"", false, {freq}},  // freq_cis_imag
        {"lm_head.weight", false, {vocab, dim}},
    };
    const size_t n_blocks = tied ? blocks.size() - 1 : blocks.size();

    // A corrupt header can claim sizes whose products overflow; check each.
    std::vector<int64_t> block_bytes(n_blocks);
    int64_t expected = kHeaderBytes;
    for (size_t b = 0; b < n_blocks; ++b) {
      int64_t n = 4;
      for (int64_t d : blocks[b].shape) {
        if (!CheckedMul(n, d, &n)) Fail("llama2.c header sizes overflow");
      }
      block_bytes[b] = n;
      if (!CheckedMul(n, blocks[b].stacked ? L : 1, &n) ||
          __builtin_add_overflow(expected, n, &expected)) {
        Fail("llama2.c header sizes overflow");
      }
    }
    if (static_cast<uint64_t>(expected) != map->size()) {
      Fail("size does not match its llama2.c header (dim " +
           std::to_string(c.dim) + ", hidden " + std::to_string(c.hidden_dim) +
           ", layers " + std::to_string(c.n_layers) + ", heads " +
           std::to_string(c.n_heads) + "/" + std::to_string(c.n_kv_heads) +
           ", vocab " + std::to_string(h[5]) + ", seq_len " +
           std::to_string(c.max_seq_len) + "): expected " +
           std::to_string(expected) + " bytes, the file has " +
           std::to_string(map->size()));
    }

    int64_t offset = kHeaderBytes;
    for (size_t b = 0; b < n_blocks; ++b) {
      const Block& blk = blocks[b];
      const int64_t bytes = block_bytes[b];
      for (int64_t l = 0; l < (blk.stacked ? L : 1); ++l) {
        if (*blk.name) {
          TensorInfo t;
          t.name = blk.name;
          if (blk.stacked) t.name.replace(t.name.find("{}"), 2, std::to_string(l));
          t.file_name = t.name;
          t.file_path = path;
          t.dtype = DType::kF32;
          t.shape = blk.shape;
          t.data = map->data() + offset;
          t.nbytes = bytes;
          AddTensor(std::move(t));
        }
        offset += bytes;
      }
    }
  }

 private:
  [[noreturn]] void Fail(const std::string& what) const {
    throw ModelFormatError(path() + ": " + what);
  }
};

}  // namespace

std::unique_ptr<ModelSource> OpenLlama2cModel(const std::string& path) {
  return std::make_unique<Llama2cSource>(path);
}

}  // namespace specline
