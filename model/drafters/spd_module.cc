#include "model/drafters/spd_module.h"

#include <algorithm>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/runtime/weights.h"

namespace specline {
namespace {

// The base's shape must be the one the head was checked against at load;
// otherwise embedding rows, the norm and the FC inputs would not line up.
void CheckBase(const DraftHead& head, const ModelConfig& base) {
  const ModelConfig& h = head.base_config();
  if (base.dim != h.dim || base.vocab_size != h.vocab_size || base.n_layers != h.n_layers) {
    throw std::invalid_argument(absl::StrCat(
        head.dir(), ": SPD head is for a base of dim ", h.dim, ", vocab ", h.vocab_size, ", ",
        h.n_layers, " layers; the given base has ", base.dim, ", ", base.vocab_size, ", ",
        base.n_layers));
  }
}

}  // namespace

SpdModule::SpdModule(std::shared_ptr<const DraftHead> head,
                     std::shared_ptr<const ModelSource> base,
                     std::shared_ptr<kernels::ThreadPool> pool, const SpdModuleOptions& options)
    : head_(std::move(head)), base_(std::move(base)), pool_(std::move(pool)) {
  if (!head_) throw std::invalid_argument("SpdModule needs a head");
  if (!base_) throw std::invalid_argument("SpdModule needs the base model");
  if (!pool_) throw std::invalid_argument("SpdModule needs a thread pool");
  if (head_->config().method != DraftMethod::kSpd) {
    throw std::invalid_argument(absl::StrCat(head_->dir(), ": a ",
                                             DraftMethodName(head_->config().method),
                                             " head is not an SPD head"));
  }
  const ModelConfig& bc = base_->config();
  CheckBase(*head_, bc);
  const HeadConfig& spec = head_->config();
  const int n = spec.spd_stages, L = bc.n_layers, H = bc.dim;

  // Feature plan per depth. d*L/n is the deepest base layer boundary a row
  // at depth d has passed (integer arithmetic, as in the authors' code).
  for (int d = 0; d <= n; ++d) {
    Feature f;
    const int reached = d * L / n;
    if (spec.spd_layout == SpdFeatureLayout::kV11) {
      const std::vector<int>& b = spec.spd_taps;  // b[0] == 0 (loader checks)
      int i = 0;
      while (i + 1 < static_cast<int>(b.size()) && b[i + 1] <= reached) ++i;
      f.fc = i;
      f.concat.assign(b.begin(), b.begin() + i + 1);
    } else if (d == 0) {
      f.fc = 0;
      f.concat = {0};
    } else {
      f.fc = d;
      f.concat = {0, reached / 2, reached};
    }
    f.taps = f.concat;
    std::sort(f.taps.begin(), f.taps.end());
    f.taps.erase(std::unique(f.taps.begin(), f.taps.end()), f.taps.end());
    all_taps_.insert(all_taps_.end(), f.taps.begin(), f.taps.end());
    features_.push_back(std::move(f));
  }
  std::sort(all_taps_.begin(), all_taps_.end());
  all_taps_.erase(std::unique(all_taps_.begin(), all_taps_.end()), all_taps_.end());

  // Shared with the base (frozen): embedding for H^0, final norm.
  embedding_ = MatrixOf(base_->Require("model.embed_tokens.weight", {bc.vocab_size, H}));
  norm_ = VectorOf(base_->Require("model.norm.weight", {H}));
  eps_ = bc.norm_eps;
  // The head's own tensors; shapes were checked by LoadDraftHead, checked
  // again here against the plan so a mismatch cannot read out of bounds.
  const ModelSource& src = head_->source();
  for (const Feature& f : features_) {
    const std::string name = absl::StrCat("fc.", f.fc, ".weight");
    const int64_t width = static_cast<int64_t>(f.concat.size()) * H;
    if (static_cast<int>(fc_.size()) <= f.fc) fc_.resize(f.fc + 1);
    fc_[f.fc] = MatrixOf(src.Require(name, {H, width}));
  }
  lm_head_ = MatrixOf(src.Require("lm_head.weight", {bc.vocab_size, H}));

  // The head's source shows its layers as layers 0..L_s-1 of a model without
  // an embedding: a first slice fed with feature rows instead of tokens.
  SliceOptions so;
  so.kv_block_size = options.kv_block_size;
  so.kv_capacity_tokens = options.kv_capacity_tokens;
  so.hidden_input = true;
  layers_ = std::make_unique<StageSlice>(src, 0, spec.spd_layers, so, pool_);
}

SpdModule::~SpdModule() = default;

std::vector<int> SpdModule::TapsForDepth(int depth) const {
  if (depth < 0 || depth > n_stages()) return {};
  return features_[depth].taps;
}

absl::Status SpdModule::Forward(uint64_t seq, std::span<const SpdRow> rows, float* last_logits) {
  if (rows.empty()) return absl::InvalidArgumentError("SpdModule::Forward needs at least one row");
  const int64_t H = dim();
  // Validate every row before touching anything: the slice below is
  // all-or-nothing too, so an error leaves the cache as it was.
  for (size_t r = 0; r < rows.size(); ++r) {
    const SpdRow& row = rows[r];
    if (row.depth < 0 || row.depth > n_stages()) {
      return absl::InvalidArgumentError(absl::StrCat("row ", r, " (position ", row.pos,
                                                     "): depth ", row.depth, " outside [0, ",
                                                     n_stages(), "]"));
    }
    if (row.token < 0 || row.token >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("row ", r, " (position ", row.pos,
                                                     "): token ", row.token,
                                                     " outside vocabulary of ", vocab_size()));
    }
    const std::vector<int>& taps = features_[row.depth].taps;
    const size_t want = (taps.size() - 1) * H;
    if (row.taps.size() != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "row ", r, " (position ", row.pos, ", depth ", row.depth, "): ", row.taps.size(),
          " tap values, expected ", want, " (hidden states ",
          absl::StrJoin(taps.begin() + 1, taps.end(), ", "), " x ", H, ")"));
    }
  }

  const int64_t n = static_cast<int64_t>(rows.size());
  features_in_.resize(n * H);
  slots_.resize(n);
  for (int64_t r = 0; r < n; ++r) {
    const SpdRow& row = rows[r];
    const Feature& f = features_[row.depth];
    slots_[r] = SlotRef{seq, row.pos};
    // Gather concat(H^j, j in f.concat): H^0 from the embedding, the rest
    // from the row's taps (laid out in TapsForDepth order, without 0).
    cat_.resize(f.concat.size() * H);
    for (size_t k = 0; k < f.concat.size(); ++k) {
      float* dst = cat_.data() + k * H;
      const int j = f.concat[k];
      if (j == 0) {
        const auto* e = static_cast<const uint8_t*>(embedding_.data) +
                        int64_t{row.token} * embedding_.row_bytes;
        kernels::DequantizeRow(embedding_.dtype, e, H, dst);
      } else {
        const auto at = std::lower_bound(f.taps.begin(), f.taps.end(), j) - f.taps.begin();
        std::copy_n(row.taps.data() + (at - 1) * H, H, dst);
      }
    }
    // One GEMV per row: a cycle has about n+1 rows of mixed depths, so
    // grouping by FC would save little.
    kernels::MatMul(fc_[f.fc], cat_.data(), 1, features_in_.data() + r * H, *pool_);
  }

  SliceInput in;
  in.slots = slots_;
  in.hidden = features_in_;
  if (absl::Status st = layers_->Forward(in, {}, &out_); !st.ok()) return st;

  // Only the newest row's logits are wanted (they draft the next token); the
  // earlier rows are run to refresh their K/V with deeper features.
  normed_.resize(H);
  kernels::RmsNorm(out_.hidden.data() + (n - 1) * H, norm_.data(), eps_, H, normed_.data());
  kernels::MatMul(lm_head_, normed_.data(), 1, last_logits, *pool_);
  return absl::OkStatus();
}

}  // namespace specline
