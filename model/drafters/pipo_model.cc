#include "model/drafters/pipo_model.h"

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "model/formats/renamed_source.h"
#include "model/runtime/weights.h"

namespace specline {
namespace {

constexpr const char* kMtpPrefix = "mtp.layers.0.";

// The head's MTP decoder layer shown as layer 0 of a one-layer model
// ("mtp.layers.0.X" -> "model.layers.0.X"), so a StageSlice can load it
// like any layer. The config is the head source's (the base's shape, Hugging
// Face RoPE layout, as head files are stored) with n_layers = 1.
std::unique_ptr<ModelSource> MtpLayerSource(const DraftHead& head) {
  ModelConfig config = head.source().config();
  config.n_layers = 1;
  auto source = std::make_unique<RenamedSource>(std::move(config), head.dir());
  const std::string prefix = kMtpPrefix;
  for (const TensorInfo* t : head.source().Tensors()) {
    if (t->name.rfind(prefix, 0) != 0) continue;
    source->Add(LayerTensorName(0, t->name.substr(prefix.size())), *t);
  }
  return source;
}

void SiluInPlace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / (1.0f + std::exp(-x[i]));
}

void AddRowBias(float* rows, int64_t n, const std::vector<float>& bias) {
  const int64_t width = static_cast<int64_t>(bias.size());
  for (int64_t i = 0; i < n; ++i) kernels::AddInPlace(rows + i * width, bias.data(), width);
}

}  // namespace

PipoModel::PipoModel(std::shared_ptr<const DraftHead> head,
                     std::shared_ptr<kernels::ThreadPool> pool, const PipoModelOptions& options)
    : head_(std::move(head)), pool_(std::move(pool)) {
  if (!head_) throw std::invalid_argument("PipoModel needs a head");
  if (!pool_) throw std::invalid_argument("PipoModel needs a thread pool");
  if (head_->config().method != DraftMethod::kPipo) {
    throw std::invalid_argument(absl::StrCat(head_->dir(), ": a ",
                                             DraftMethodName(head_->config().method),
                                             " head is not a PIPO head"));
  }
  const ModelConfig& base = head_->base_config();
  const std::string bpath =
      (std::filesystem::path(head_->dir()) / head_->config().pipo_backbone_file).string();
  backbone_ = OpenModel(bpath);
  const ModelConfig& bc = backbone_->config();
  // LoadDraftHead checked this already; checked again because every matrix
  // below is indexed with the head's shapes.
  if (bc.dim != base.dim || bc.vocab_size != base.vocab_size || bc.n_layers != base.n_layers ||
      bc.hidden_dim != base.hidden_dim || bc.n_heads != base.n_heads ||
      bc.n_kv_heads != base.n_kv_heads || bc.head_dim != base.head_dim) {
    throw ModelFormatError(bpath + ": the backbone's shape differs from the head's base");
  }
  const int64_t H = bc.dim, V = bc.vocab_size;
  eps_ = bc.norm_eps;

  // Frozen, from the backbone: E, final norm (inside head1_), LM head.
  embedding_ = MatrixOf(backbone_->Require("model.embed_tokens.weight", {V, H}));
  const TensorInfo* lm = backbone_->Find("lm_head.weight");
  if (lm == nullptr || bc.tied_embeddings) lm = &backbone_->Require("model.embed_tokens.weight");
  lm_head_ = MatrixOf(backbone_->Require(lm->name, {V, H}));
  head1_ = std::make_unique<OutputHead>(*backbone_, pool_);

  // The head's own tensors (shapes checked by LoadDraftHead, and again here).
  const ModelSource& src = head_->source();
  comp_fc1_ = MatrixOf(src.Require("compressor.fc1.weight", {2 * H, 2 * H}));
  comp_b1_ = VectorOf(src.Require("compressor.fc1.bias", {2 * H}));
  comp_fc2_ = MatrixOf(src.Require("compressor.fc2.weight", {H, 2 * H}));
  comp_b2_ = VectorOf(src.Require("compressor.fc2.bias", {H}));
  mtp_norm_e_ = VectorOf(src.Require("mtp.norm_e.weight", {H}));
  mtp_norm_h_ = VectorOf(src.Require("mtp.norm_h.weight", {H}));
  mtp_fc_ = MatrixOf(src.Require("mtp.fc.weight", {H, 2 * H}));
  mtp_norm_ = VectorOf(src.Require("mtp.norm.weight", {H}));
  conf_norm_ = VectorOf(src.Require("confidence.norm.weight", {2 * H}));
  conf_fc1_ = MatrixOf(src.Require("confidence.fc1.weight", {H, 2 * H}));
  conf_fc2_ = MatrixOf(src.Require("confidence.fc2.weight", {1, H}));

  // The MTP layer reads computed rows m, not tokens: a hidden-input slice.
  mtp_source_ = MtpLayerSource(*head_);
  SliceOptions so;
  so.kv_block_size = options.kv_block_size;
  so.kv_capacity_tokens = options.kv_capacity_tokens;
  so.hidden_input = true;
  mtp_layer_ = std::make_unique<StageSlice>(*mtp_source_, 0, 1, so, pool_);
}

PipoModel::~PipoModel() = default;

absl::StatusOr<std::vector<int32_t>> PipoModel::PadPrompt(std::span<const int32_t> prompt) const {
  if (prompt.empty()) return absl::InvalidArgumentError("PIPO: empty prompt");
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] == pad_id()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "PIPO: the prompt contains the PAD id ", pad_id(), " at position ", i,
          " (PAD may only fill the second slot of a pair)"));
    }
    if (prompt[i] < 0 || prompt[i] >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("PIPO: prompt token ", prompt[i],
                                                     " at position ", i,
                                                     " is outside the vocabulary of ",
                                                     vocab_size()));
    }
  }
  std::vector<int32_t> out(prompt.begin(), prompt.end());
  if (out.size() % 2) out.push_back(pad_id());
  return out;
}

void PipoModel::EmbeddingRow(int32_t token, float* out) const {
  if (token < 0 || token >= vocab_size()) {
    throw std::out_of_range(absl::StrCat("PIPO: token ", token, " is outside the vocabulary of ",
                                         vocab_size()));
  }
  const auto* row =
      static_cast<const uint8_t*>(embedding_.data) + int64_t{token} * embedding_.row_bytes;
  kernels::DequantizeRow(embedding_.dtype, row, dim(), out);
}

void PipoModel::Compress(int32_t a, int32_t b, float* z) {
  const int32_t pair[2] = {a, b};
  CompressPairs(pair, z);
}

void PipoModel::CompressPairs(std::span<const int32_t> stream, float* z) {
  if (stream.size() % 2) {
    throw std::invalid_argument(
        absl::StrCat("PIPO: a pair stream has even length, got ", stream.size()));
  }
  const int64_t n = static_cast<int64_t>(stream.size()) / 2, H = dim();
  if (n == 0) return;
  // Row k of pairs_ is concat(E[a], E[b]): the stream's embeddings laid out
  // one after another are exactly that.
  pairs_.resize(n * 2 * H);
  for (size_t i = 0; i < stream.size(); ++i) EmbeddingRow(stream[i], pairs_.data() + i * H);
  hidden_.resize(n * 2 * H);
  kernels::MatMul(comp_fc1_, pairs_.data(), n, hidden_.data(), *pool_);
  AddRowBias(hidden_.data(), n, comp_b1_);
  SiluInPlace(hidden_.data(), n * 2 * H);
  kernels::MatMul(comp_fc2_, hidden_.data(), n, z, *pool_);
  AddRowBias(z, n, comp_b2_);
}

void PipoModel::MaskPad(float* logits, int64_t n) const {
  for (int64_t i = 0; i < n; ++i) {
    logits[i * vocab_size() + pad_id()] = -std::numeric_limits<float>::infinity();
  }
}

void PipoModel::Logits1(const float* h_b, int64_t n, float* logits) {
  if (n <= 0) return;
  head1_->Logits(h_b, n, logits);
  MaskPad(logits, n);
}

absl::Status PipoModel::Mtp(uint64_t seq, int32_t first_pos, std::span<const int32_t> token1,
                            std::span<const float> h_b, float* last_logits2, float* confidence) {
  const int64_t n = static_cast<int64_t>(token1.size()), H = dim();
  if (n == 0) return absl::InvalidArgumentError("PipoModel::Mtp needs at least one row");
  if (static_cast<int64_t>(h_b.size()) != n * H) {
    return absl::InvalidArgumentError(absl::StrCat("PipoModel::Mtp: ", h_b.size(),
                                                   " h_b values for ", n, " rows of dim ", H));
  }
  for (int64_t k = 0; k < n; ++k) {
    if (token1[k] < 0 || token1[k] >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("PipoModel::Mtp: row ", k, " token1 ",
                                                     token1[k], " is outside the vocabulary of ",
                                                     vocab_size()));
    }
  }

  // m = mtp.fc(concat(norm_e(E[t1]), norm_h(h_b))): embedding first.
  cat_.resize(n * 2 * H);
  normed_.resize(H);
  for (int64_t k = 0; k < n; ++k) {
    float* row = cat_.data() + k * 2 * H;
    EmbeddingRow(token1[k], normed_.data());
    kernels::RmsNorm(normed_.data(), mtp_norm_e_.data(), eps_, H, row);
    kernels::RmsNorm(h_b.data() + k * H, mtp_norm_h_.data(), eps_, H, row + H);
  }
  m_.resize(n * H);
  kernels::MatMul(mtp_fc_, cat_.data(), n, m_.data(), *pool_);

  slots_.resize(n);
  for (int64_t k = 0; k < n; ++k) slots_[k] = SlotRef{seq, first_pos + static_cast<int32_t>(k)};
  SliceInput in;
  in.slots = slots_;
  in.hidden = m_;
  if (absl::Status st = mtp_layer_->Forward(in, {}, &out_); !st.ok()) return st;
  const float* h_d = out_.hidden.data();

  if (confidence != nullptr) {
    // c = sigmoid(fc2(silu(fc1(norm(concat(h_b, h_d)))))), one RMS over 2H.
    for (int64_t k = 0; k < n; ++k) {
      float* row = cat_.data() + k * 2 * H;
      std::copy_n(h_b.data() + k * H, H, row);
      std::copy_n(h_d + k * H, H, row + H);
      kernels::RmsNorm(row, conf_norm_.data(), eps_, 2 * H, row);
    }
    conf_hidden_.resize(n * H);
    kernels::MatMul(conf_fc1_, cat_.data(), n, conf_hidden_.data(), *pool_);
    SiluInPlace(conf_hidden_.data(), n * H);
    kernels::MatMul(conf_fc2_, conf_hidden_.data(), n, confidence, *pool_);
    for (int64_t k = 0; k < n; ++k) confidence[k] = 1.0f / (1.0f + std::exp(-confidence[k]));
  }
  if (last_logits2 != nullptr) {
    normed_.resize(H);
    kernels::RmsNorm(h_d + (n - 1) * H, mtp_norm_.data(), eps_, H, normed_.data());
    kernels::MatMul(lm_head_, normed_.data(), 1, last_logits2, *pool_);
    MaskPad(last_logits2, 1);
  }
  return absl::OkStatus();
}

}  // namespace specline
