// Draft-head files: the early-exit heads of PPSD and the speculation module of
// SPD, stored as a directory with
//   head.json         format "specline.head.v1": method, base-model
//                     fingerprint, method parameters, tensor shapes, metadata
//   head.safetensors  the weights under the names listed in docs/heads.md
// LoadDraftHead checks the file against the base model it will run with and
// against itself; WriteRandomDraftHead makes randomly initialised heads of the
// right shapes for tests and benchmarks. See docs/heads.md.
//
// head_file.cc holds what every method shares; each method's parameters and
// tensors are read and written by its own reader (head_ppsd.cc, head_spd.cc,
// head_ptp.cc, head_pipo.cc; their interface: head_format.h), random heads
// are made in head_random.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/dtype.h"
#include "model/formats/model_source.h"
#include "model/model_config.h"

namespace specline {

class SafetensorsFile;

// kPtp: a PTP adapter (docs/ptp.md): u_embed + gated LoRA over the base's
// own layers; the base model is the drafter. kPipo: PIPO's compressor, MTP
// and confidence heads plus a fine-tuned backbone file (docs/pipo.md).
enum class DraftMethod { kPpsdNorm, kPpsdLayer, kSpd, kPtp, kPipo };
enum class SpdFeatureLayout { kV10, kV11 };

// "ppsd-norm", "ppsd-layer", "spd", "ptp", "pipo"; "v10", "v11".
const char* DraftMethodName(DraftMethod m);
const char* SpdFeatureLayoutName(SpdFeatureLayout l);

struct HeadConfig {
  DraftMethod method = DraftMethod::kPpsdNorm;
  // PPSD: the head reads the hidden state after the first `exit_layer`
  // layers (Hugging Face index exit_layer), 1 <= E < n_layers.
  int exit_layer = 0;
  // SPD: pipeline stages n, tap indices (global, Hugging Face numbering,
  // strictly increasing, in [0, n_layers]), decoder layers L_s, layout.
  int spd_stages = 0;
  std::vector<int> spd_taps;
  int spd_layers = 0;
  SpdFeatureLayout spd_layout = SpdFeatureLayout::kV11;
  // PTP: auxiliary rows per call N, LoRA rank r and the factor applied to
  // its product (alpha / r). The LoRA covers kPtpLoraTargets of every layer
  // and u_embed is piecewise linear through 3 vectors at u = 0, 0.5, 1.
  int ptp_n_aux = 0;
  int ptp_lora_rank = 0;
  double ptp_lora_alpha = 0.0;
  // PIPO: the PAD id (fills a pair's second slot, never emitted), the
  // default confidence threshold, and the fine-tuned backbone the stages
  // run instead of the base (path relative to the head directory).
  int pipo_pad_id = 0;
  double pipo_tau_default = 0.95;
  std::string pipo_backbone_file;
  // Free-form provenance (recipe, data, steps, created, ...), a JSON object
  // serialised as text; "{}" when there is none.
  std::string metadata_json = "{}";
};

// The projections PTP's LoRA adapts, in file order (docs/ptp.md).
inline constexpr const char* kPtpLoraTargets[] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

// Every tensor a head of `spec` for `base` must hold, in file order, with its
// shape (PyTorch order). Throws std::invalid_argument for an inconsistent
// spec (message says which field).
std::vector<std::pair<std::string, std::vector<int64_t>>> ExpectedDraftHeadTensors(
    const HeadConfig& spec, const ModelConfig& base);

// The v11 default taps: bounds [0, L/n, 3L/n, 6L/n, L-1] clamped to
// [0, L-1] and deduplicated.
std::vector<int> SpdDefaultTaps(int n_layers, int n_stages);
// The v10 taps: the union over depths k = 1..n of {0, l_max/2, l_max},
// l_max = k*L/n (integer division).
std::vector<int> SpdV10Taps(int n_layers, int n_stages);

// A loaded head: its spec, the base config it was checked against, and its
// tensors (memory-mapped). source() shows the tensors under the canonical
// names the runtime's loaders use:
//   file "layers.{j}.X"  -> "model.layers.{first_layer + j}.X"
//   file "norm.weight"   -> "model.norm.weight"
//   other names          -> unchanged ("lm_head.weight", "fc.{i}.weight")
// with a config equal to the base's but n_layers = first_layer + layers,
// rope_style kHalf (heads are stored in Hugging Face layout) and untied.
// first_layer is E for PPSD and 0 for SPD.
class DraftHead {
 public:
  ~DraftHead();
  const HeadConfig& config() const { return config_; }
  const ModelConfig& base_config() const { return base_; }
  const std::string& dir() const { return dir_; }
  const ModelSource& source() const { return *source_; }
  // A tensor by its name in head.safetensors (nullptr when absent).
  const TensorInfo* FileTensor(const std::string& name) const;
  // FNV-1a over the names and bytes of every tensor in head.safetensors: a
  // short identity so a scheduler can check that its stages load the same
  // head (PTP adapters, PIPO backbones' heads) as itself.
  uint64_t Fingerprint() const;

 private:
  friend std::unique_ptr<DraftHead> LoadDraftHead(const std::string&, const ModelConfig&);
  HeadConfig config_;
  ModelConfig base_;
  std::string dir_;
  std::unique_ptr<SafetensorsFile> file_;
  std::unique_ptr<ModelSource> source_;
};

// Reads and validates `dir`/head.json and `dir`/head.safetensors against
// `base`. Throws ModelFormatError whose message names the file and the field
// or tensor at fault: unreadable or malformed JSON, wrong format string,
// unknown method, base fingerprint mismatch, bad E / SPD parameters, declared
// shapes that differ from the expected ones, missing, extra or mis-shaped
// tensors, non-float dtypes.
std::unique_ptr<DraftHead> LoadDraftHead(const std::string& dir, const ModelConfig& base);

// Writes a head directory (created if needed) holding `tensors` (name ->
// values, in ExpectedDraftHeadTensors order and shapes), in `dtype` (F32, F16
// or BF16). Throws std::invalid_argument on tensors that do not match the
// spec, std::runtime_error on I/O errors.
void WriteDraftHead(const std::string& dir, const HeadConfig& spec, const ModelConfig& base,
                    const std::vector<std::pair<std::string, std::vector<float>>>& tensors,
                    DType dtype = DType::kF32);

// A randomly initialised head of the right shapes (deterministic per seed
// and tensor name): matrices uniform with std 1/sqrt(fan_in), lm_head std
// 2/sqrt(dim), norms 1 +- 0.1, biases +- 0.1. When `init_from` is given,
// "norm.weight" (PPSD) and "lm_head.weight" (all methods) are copied from the
// base model's final norm and LM head (the embedding for tied models), as
// the papers initialise them.
void WriteRandomDraftHead(const std::string& dir, const HeadConfig& spec,
                          const ModelConfig& base, uint64_t seed,
                          const ModelSource* init_from = nullptr, DType dtype = DType::kF32);

}  // namespace specline
