#include "model/runtime/stage_slice.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace specline {
namespace {

void AddBias(float* rows, int64_t n, const std::vector<float>& bias) {
  if (bias.empty()) return;
  const int64_t width = static_cast<int64_t>(bias.size());
  for (int64_t i = 0; i < n; ++i) kernels::AddInPlace(rows + i * width, bias.data(), width);
}

// Qwen3's per-head RMSNorm of q and k, before RoPE.
void HeadNorm(float* rows, int64_t n_heads_total, const std::vector<float>& w, float eps) {
  if (w.empty()) return;
  const int64_t hd = static_cast<int64_t>(w.size());
  for (int64_t h = 0; h < n_heads_total; ++h) {
    kernels::RmsNorm(rows + h * hd, w.data(), eps, hd, rows + h * hd);
  }
}

}  // namespace

StageSlice::StageSlice(const ModelSource& src, int begin, int end, const SliceOptions& options,
                       std::shared_ptr<kernels::ThreadPool> pool)
    : config_(src.config()),
      begin_(begin),
      end_(end),
      pool_(std::move(pool)),
      embeds_(begin == 0 && !options.hidden_input),
      adapters_(options.adapters),
      kv_(KvCacheShape{end - begin, src.config().n_kv_heads, src.config().head_dim,
                       options.kv_block_size, KvBlocksFor(options)}),
      rope_(src.config()),
      rope_local_(src.config(), /*local=*/true) {
  if (begin < 0 || end > config_.n_layers || begin >= end) {
    throw std::invalid_argument(absl::StrCat("layer range [", begin, ", ", end,
                                             ") is not inside [0, ", config_.n_layers, ")"));
  }
  if (!pool_) throw std::invalid_argument("StageSlice needs a thread pool");
  for (const auto& a : adapters_) {
    if (!a || a->dim() != config_.dim) {
      throw std::invalid_argument("an adapter was made for another model (dim differs)");
    }
  }
  if (embeds_) {
    embedding_ = MatrixOf(
        src.Require("model.embed_tokens.weight", {config_.vocab_size, config_.dim}));
  }
  if (config_.IsMoe() && !adapters_.empty()) {
    // Adapters hook the dense projections (slice_adapter.h); a MoE MLP has none.
    throw std::invalid_argument("adapters are not supported on mixture-of-experts models");
  }
  layers_.reserve(end - begin);
  for (int l = begin; l < end; ++l) {
    layers_.push_back(LayerWeights::Load(src, l));
    has_local_rope_ = has_local_rope_ || config_.IsSlidingLayer(l);
  }
}

void StageSlice::Embed(std::span<const int32_t> tokens, float* out) const {
  const int64_t dim = config_.dim;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto* row = static_cast<const uint8_t*>(embedding_.data) +
                      int64_t{tokens[i]} * embedding_.row_bytes;
    kernels::DequantizeRow(embedding_.dtype, row, dim, out + i * dim);
  }
}

absl::Status StageSlice::Forward(const SliceInput& in, std::span<const int> tap_indices,
                                 SliceOutput* out) {
  for (int t : tap_indices) {
    if (!CanTap(t)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tap ", t, " is outside layers [", begin_, ", ", end_, "] of this slice"));
    }
  }
  if (absl::Status st = ValidateAndReserve(in, embeds_, config_, begin_, end_, kv_,
                                           /*hidden_elsewhere=*/false, adapters_);
      !st.ok()) {
    return st;
  }
  adapted_rows_ = RowsByAdapter(in, adapters_.size());

  const int64_t n = static_cast<int64_t>(in.slots.size());
  const int64_t dim = config_.dim;
  out->hidden.resize(n * dim);
  float* x = out->hidden.data();
  if (embeds_) {
    Embed(in.tokens, x);
    EmbedAdapted(adapters_, adapted_rows_, in.adapter_arg, dim, x);
    // Gemma scales its input embeddings by sqrt(dim) in the compute dtype
    // (fp32 here), as transformers' normalizer and llama.cpp's ggml_scale do.
    if (config_.scale_embeddings) {
      kernels::Scale(x, n * dim, std::sqrt(static_cast<float>(dim)));
    }
  } else {
    std::copy(in.hidden.begin(), in.hidden.end(), x);
  }

  // Taps come out in the order requested, filled as x passes each boundary.
  out->taps.assign(tap_indices.size(), Tap{});
  auto take_taps = [&](int index) {
    for (size_t k = 0; k < tap_indices.size(); ++k) {
      if (tap_indices[k] != index) continue;
      out->taps[k].index = index;
      out->taps[k].hidden.assign(x, x + n * dim);
    }
  };
  // RoPE angles depend only on the position: compute once for all layers.
  const int half = config_.head_dim / 2;
  cos_.resize(n * half);
  sin_.resize(n * half);
  for (int64_t i = 0; i < n; ++i) {
    rope_.Angles(in.slots[i].pos, cos_.data() + i * half, sin_.data() + i * half);
  }
  if (has_local_rope_) {
    cos_local_.resize(n * half);
    sin_local_.resize(n * half);
    for (int64_t i = 0; i < n; ++i) {
      rope_local_.Angles(in.slots[i].pos, cos_local_.data() + i * half,
                         sin_local_.data() + i * half);
    }
  }

  take_taps(begin_);
  for (int l = begin_; l < end_; ++l) {
    RunLayer(l - begin_, in.slots, x);
    take_taps(l + 1);
  }
  return absl::OkStatus();
}

template <typename Fn>
void StageSlice::ForEachRow(int64_t n, const Fn& fn) {
  if (n < kParallelRows) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  pool_->ParallelFor(n, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) fn(i);
  });
}

void StageSlice::RunLayer(int local, std::span<const SlotRef> slots, float* x) {
  const LayerWeights& w = layers_[local];
  const ModelConfig& c = config_;
  const int64_t n = static_cast<int64_t>(slots.size());
  const int64_t dim = c.dim;
  const int64_t q_dim = int64_t{c.n_heads} * c.head_dim;
  const int64_t kv_dim = int64_t{c.n_kv_heads} * c.head_dim;
  const int half = c.head_dim / 2;
  xb_.resize(n * dim);
  q_.resize(n * q_dim);
  k_.resize(n * kv_dim);
  v_.resize(n * kv_dim);
  att_.resize(n * q_dim);

  // Attention block.
  ForEachRow(n, [&](int64_t i) {
    kernels::RmsNorm(x + i * dim, w.attn_norm.data(), c.norm_eps, dim, xb_.data() + i * dim);
  });
  kernels::MatMul(w.wq, xb_.data(), n, q_.data(), *pool_);
  kernels::MatMul(w.wk, xb_.data(), n, k_.data(), *pool_);
  kernels::MatMul(w.wv, xb_.data(), n, v_.data(), *pool_);
  Adapt(local, Projection::kQ, xb_.data(), dim, q_.data(), q_dim);
  Adapt(local, Projection::kK, xb_.data(), dim, k_.data(), kv_dim);
  Adapt(local, Projection::kV, xb_.data(), dim, v_.data(), kv_dim);
  AddBias(q_.data(), n, w.bq);
  AddBias(k_.data(), n, w.bk);
  AddBias(v_.data(), n, w.bv);
  // OLMoE's norms span the whole projection: one "head" per row.
  HeadNorm(q_.data(), c.qk_norm_full ? n : n * c.n_heads, w.q_norm, c.norm_eps);
  HeadNorm(k_.data(), c.qk_norm_full ? n : n * c.n_kv_heads, w.k_norm, c.norm_eps);
  const bool local_rope = c.IsSlidingLayer(begin_ + local);
  const Rope& rope = local_rope ? rope_local_ : rope_;
  const float* cos_all = local_rope ? cos_local_.data() : cos_.data();
  const float* sin_all = local_rope ? sin_local_.data() : sin_.data();
  ForEachRow(n, [&](int64_t i) {
    const float* cs = cos_all + i * half;
    const float* sn = sin_all + i * half;
    rope.Apply(q_.data() + i * q_dim, c.n_heads, cs, sn);
    rope.Apply(k_.data() + i * kv_dim, c.n_kv_heads, cs, sn);
    // Every slot's K/V is cached before any attention runs, so a prefill
    // chunk's tokens see each other (causally) within this one call.
    std::copy_n(k_.data() + i * kv_dim, kv_dim, kv_.K(local, slots[i].seq_id, slots[i].pos));
    std::copy_n(v_.data() + i * kv_dim, kv_dim, kv_.V(local, slots[i].seq_id, slots[i].pos));
  });
  Attention(local, slots, q_.data(), att_.data());
  kernels::MatMul(w.wo, att_.data(), n, xb_.data(), *pool_);
  Adapt(local, Projection::kO, att_.data(), q_dim, xb_.data(), dim);
  PostNorm(w.post_attn_norm, n);
  kernels::AddInPlace(x, xb_.data(), n * dim);

  // MLP block.
  hb_.resize(n * c.hidden_dim);
  hb2_.resize(n * c.hidden_dim);
  ForEachRow(n, [&](int64_t i) {
    kernels::RmsNorm(x + i * dim, w.ffn_norm.data(), c.norm_eps, dim, xb_.data() + i * dim);
  });
  if (c.IsMoe()) {
    moe_out_.resize(n * dim);
    moe_.Forward(c, w, xb_.data(), n, moe_out_.data(), *pool_);
    kernels::AddInPlace(x, moe_out_.data(), n * dim);
    return;
  }
  kernels::MatMul(w.w_gate, xb_.data(), n, hb_.data(), *pool_);
  kernels::MatMul(w.w_up, xb_.data(), n, hb2_.data(), *pool_);
  Adapt(local, Projection::kGate, xb_.data(), dim, hb_.data(), c.hidden_dim);
  Adapt(local, Projection::kUp, xb_.data(), dim, hb2_.data(), c.hidden_dim);
  ForEachRow(n, [&](int64_t i) {
    if (c.gelu_mlp) {
      kernels::GeGluTanh(hb_.data() + i * c.hidden_dim, hb2_.data() + i * c.hidden_dim,
                         c.hidden_dim);
    } else {
      kernels::SwiGlu(hb_.data() + i * c.hidden_dim, hb2_.data() + i * c.hidden_dim,
                      c.hidden_dim);
    }
  });
  kernels::MatMul(w.w_down, hb_.data(), n, xb_.data(), *pool_);
  Adapt(local, Projection::kDown, hb_.data(), c.hidden_dim, xb_.data(), dim);
  PostNorm(w.post_ffw_norm, n);
  kernels::AddInPlace(x, xb_.data(), n * dim);
}

void StageSlice::PostNorm(const std::vector<float>& weight, int64_t n) {
  if (weight.empty()) return;
  const int64_t dim = config_.dim;
  ForEachRow(n, [&](int64_t i) {
    kernels::RmsNorm(xb_.data() + i * dim, weight.data(), config_.norm_eps, dim,
                     xb_.data() + i * dim);
  });
}

void StageSlice::Adapt(int local, Projection target, const float* x, int64_t x_width, float* y,
                       int64_t y_width) {
  ApplyAdapters(adapters_, adapted_rows_, begin_ + local, target, x, x_width, y, y_width);
}

void StageSlice::Attention(int local, std::span<const SlotRef> slots, const float* q,
                           float* out) {
  const ModelConfig& c = config_;
  const int bs = kv_.shape().block_size;
  const int64_t row = kv_.row_elems();
  // One layer's K/V: block b starts at KBlock(local, 0) + b * bs * row.
  const kernels::PagedKvView view{kv_.KBlock(local, 0), kv_.VBlock(local, 0), bs * row, row, bs};
  attn_rows_.resize(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    attn_rows_[i] = {kv_.BlockTable(slots[i].seq_id).data(), slots[i].pos};
  }
  const kernels::AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim, c.AttentionScale(),
                                      c.LayerWindow(begin_ + local), c.attn_softcap};
  kernels::PagedAttention(shape, view, attn_rows_, q, out, *pool_);
}

}  // namespace specline
