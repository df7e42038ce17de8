#include "model/cuda/cuda_stage_slice.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/ops.h"

namespace specline::cuda {
namespace {

// Bytes at element offset `elems` of a buffer of 16-bit elements.
void* At(const DeviceBuffer& b, int64_t elems) { return b.as<uint16_t>() + elems; }

int Bucket(int n) {
  int b = 1;
  while (b < n) b *= 2;
  return b;
}

}  // namespace

// One batch's metadata. Packed into meta_host_ in this order (int32 unless
// said): tokens, slot_rows, row_seq, row_len, decode_rows, tile_first,
// tile_rows [rows each], cos, sin [rows * AngleFloats() floats each: the
// global angles of every row, then, with sliding layers, the local ones], block_tables
// [seqs * max_blocks]. The offsets depend only on `rows`, so a graph
// captured for a bucket finds its arrays where it left them.
struct CudaStageSlice::Plan {
  int n = 0;     // real slots
  int rows = 0;  // rows computed: n, or the graph bucket
  int seqs = 0;  // block-table rows used
  bool graph = false;
  int max_row_len = 0;
  int n_decode = 0;
  int n_tiles = 0;
  std::vector<int32_t> tokens, slot_rows, row_seq, row_len, decode_rows, tile_first, tile_rows;
  std::vector<int32_t> block_tables;
  std::vector<float> cos, sin;
};

struct CudaStageSlice::MetaLayout {
  size_t tokens, slot_rows, row_seq, row_len, decode_rows, tile_first, tile_rows, cos, sin,
      block_tables;  // byte offsets
  size_t Bytes(int seqs, int max_blocks) const {
    return block_tables + size_t(seqs) * max_blocks * sizeof(int32_t);
  }
  MetaLayout(int rows, int half) {
    const size_t r = size_t(rows) * sizeof(int32_t);
    tokens = 0;
    slot_rows = tokens + r;
    row_seq = slot_rows + r;
    row_len = row_seq + r;
    decode_rows = row_len + r;
    tile_first = decode_rows + r;
    tile_rows = tile_first + r;
    cos = tile_rows + r;
    sin = cos + size_t(rows) * half * sizeof(float);
    block_tables = sin + size_t(rows) * half * sizeof(float);
  }
};

CudaStageSlice::CudaStageSlice(const ModelSource& src, int begin, int end,
                               const CudaSliceOptions& options)
    : config_(src.config()),
      begin_(begin),
      end_(end),
      options_(options),
      embeds_(begin == 0 && !options.slice.hidden_input),
      rope_(src.config()),
      kv_(KvCacheShape{0, src.config().n_kv_heads, src.config().head_dim,
                       options.slice.kv_block_size, KvBlocksFor(options.slice)}) {
  if (!options.slice.adapters.empty()) {
    throw std::invalid_argument(
        "adapters run on CPU stages only for now: the CUDA slice has no adapter hook "
        "(start this stage with --device cpu, or without --adapter)");
  }
  Init();
  if (embeds_) {
    embedding_ =
        LoadMatrix(src, "model.embed_tokens.weight", config_.vocab_size, config_.dim, options.dtype);
  }
  for (int l = begin; l < end; ++l) layers_.push_back(LoadLayer(src, l, options.dtype));
}

CudaStageSlice::CudaStageSlice(const ModelConfig& config, int begin, int end,
                               const CudaSliceOptions& options, uint64_t seed)
    : config_(config),
      begin_(begin),
      end_(end),
      options_(options),
      embeds_(begin == 0 && !options.slice.hidden_input),
      rope_(config),
      kv_(KvCacheShape{0, config.n_kv_heads, config.head_dim, options.slice.kv_block_size,
                       KvBlocksFor(options.slice)}) {
  Init();
  if (embeds_) {
    // random_model.h's embedding scale: std 2 / sqrt(dim).
    embedding_ = RandomMatrix(config.vocab_size, config.dim, options.dtype, seed ^ 0xE4B,
                              2.0f * std::sqrt(3.0f / config.dim));
  }
  for (int l = begin; l < end; ++l) layers_.push_back(RandomLayer(config, l, options.dtype, seed));
}

void CudaStageSlice::Init() {
  if (begin_ < 0 || end_ > config_.n_layers || begin_ >= end_) {
    throw std::invalid_argument(absl::StrCat("layer range [", begin_, ", ", end_,
                                             ") is not inside [0, ", config_.n_layers, ")"));
  }
  if (config_.head_dim % 2 != 0 || config_.head_dim > 256) {
    throw std::invalid_argument(
        absl::StrCat("the CUDA backend needs an even head_dim <= 256, not ", config_.head_dim));
  }
  ElementBytes(options_.dtype);  // throws for anything but bf16/fp16
  for (int l = begin_; l < end_; ++l) {
    if (config_.IsSlidingLayer(l)) rope_copies_ = 2;
  }
  SPECLINE_CUDA_CHECK(cudaSetDevice(options_.device));
  SPECLINE_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  SPECLINE_CUDA_CHECK(cudaEventCreateWithFlags(&meta_uploaded_, cudaEventDisableTiming));
  SPECLINE_CUDA_CHECK(cudaEventRecord(meta_uploaded_, stream_));
  gemm_ = std::make_unique<Gemm>(stream_);

  const int bs = options_.slice.kv_block_size;
  kv_blocks_ = KvBlocksFor(options_.slice);
  max_len_ = std::min(config_.max_seq_len, kv_blocks_ * bs);
  max_blocks_ = (max_len_ + bs - 1) / bs;
  // One block past the allocator's: the scratch block that graph padding
  // rows write to and read from.
  const size_t layer_bytes = size_t(kv_blocks_ + 1) * bs * config_.n_kv_heads * config_.head_dim *
                             ElementBytes(options_.dtype);
  for (int l = begin_; l < end_; ++l) {
    k_cache_.emplace_back(layer_bytes);
    v_cache_.emplace_back(layer_bytes);
  }
  EnsureCapacity(options_.cuda_graphs ? options_.max_graph_batch : 1, 1);
}

CudaStageSlice::~CudaStageSlice() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  if (stream_) cudaStreamSynchronize(stream_);
  if (meta_uploaded_) cudaEventDestroy(meta_uploaded_);
  gemm_.reset();
  if (stream_) cudaStreamDestroy(stream_);
}

int64_t CudaStageSlice::decode_weight_bytes() const {
  int64_t total = 0;
  for (const auto& l : layers_) total += l.matrix_bytes();
  if (embeds_) total += int64_t{config_.dim} * ElementBytes(options_.dtype);
  return total;
}

void CudaStageSlice::EnsureCapacity(int rows, int taps) {
  if (rows <= capacity_rows_ && taps <= capacity_taps_) return;
  // Reallocating moves the buffers the captured graphs point at.
  SPECLINE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
  capacity_rows_ = std::max(rows, capacity_rows_);
  capacity_taps_ = std::max(taps, capacity_taps_);
  const ModelConfig& c = config_;
  const int64_t eb = ElementBytes(options_.dtype);
  const int64_t C = capacity_rows_;
  const int64_t q_dim = int64_t{c.n_heads} * c.head_dim;
  const int64_t qkv_dim = q_dim + 2 * int64_t{c.n_kv_heads} * c.head_dim;
  x_.Resize(C * c.dim * sizeof(float));
  xb_.Resize(C * c.dim * eb);
  qkv_.Resize(C * qkv_dim * eb);
  att_.Resize(C * q_dim * eb);
  delta_.Resize(C * c.dim * eb);
  const int64_t mlp_dim = std::max(c.hidden_dim, c.expert_hidden_dim);  // MoE: an expert's
  gate_up_.Resize(C * 2 * mlp_dim * eb);
  h_.Resize(C * mlp_dim * eb);
  // The decode kernel's split-K factor (so its workspace) depends on the
  // row count and is not monotonic in it: size for the worst batch.
  size_t ws = 1;
  for (int rows = 1; rows <= C; ++rows) {
    ws = std::max(ws, DecodeWorkspaceBytes(rows, c.n_heads, c.head_dim, max_len_));
  }
  attn_ws_.Resize(ws);
  taps_.Resize(std::max<int64_t>(capacity_taps_, 1) * C * c.dim * sizeof(float));
  const MetaLayout layout(static_cast<int>(C), AngleFloats());
  const size_t meta = layout.Bytes(static_cast<int>(C), max_blocks_);
  meta_.Resize(meta);
  meta_host_.Resize(meta);
  io_host_.Resize((1 + std::max<int64_t>(capacity_taps_, 1)) * C * c.dim * sizeof(float));
}

void CudaStageSlice::BuildPlan(const SliceInput& in, Plan& plan) const {
  const int n = static_cast<int>(in.slots.size());
  const int bs = options_.slice.kv_block_size;
  const int half = config_.head_dim / 2;
  plan.n = n;
  // Runs of consecutive slots of one sequence: a run of one is a decode row,
  // longer runs are prefill (or speculative) chunks, tiled.
  std::vector<std::pair<int, int>> runs;  // (first, count)
  for (int i = 0; i < n;) {
    int j = i + 1;
    while (j < n && in.slots[j].seq_id == in.slots[i].seq_id) ++j;
    runs.emplace_back(i, j - i);
    i = j;
  }
  bool all_single = true;
  for (const auto& r : runs) all_single &= r.second == 1;
  // MoE routing is decided on the host mid-layer (cuda_moe.cc): no graphs.
  plan.graph = options_.cuda_graphs && all_single && n <= options_.max_graph_batch &&
               !config_.IsMoe();
  plan.rows = plan.graph ? Bucket(n) : n;
  const int R = plan.rows;
  plan.tokens.assign(R, 0);
  plan.slot_rows.assign(R, kv_blocks_ * bs);  // padding rows: the scratch block
  plan.row_seq.assign(R, 0);
  plan.row_len.assign(R, 1);
  plan.decode_rows.clear();
  plan.tile_first.clear();
  plan.tile_rows.clear();
  plan.cos.assign(size_t(R) * AngleFloats(), 1.0f);
  plan.sin.assign(size_t(R) * AngleFloats(), 0.0f);

  std::unordered_map<uint64_t, int> seq_index;
  std::vector<uint64_t> seqs;
  for (int i = 0; i < n; ++i) {
    auto [it, fresh] = seq_index.try_emplace(in.slots[i].seq_id, static_cast<int>(seqs.size()));
    if (fresh) seqs.push_back(in.slots[i].seq_id);
    plan.row_seq[i] = it->second;
  }
  // Graph padding rows each get a table row of their own (all scratch).
  plan.seqs = plan.graph ? R : static_cast<int>(seqs.size());
  for (int i = n; i < R; ++i) plan.row_seq[i] = i;
  plan.block_tables.assign(size_t(plan.seqs) * max_blocks_, kv_blocks_);
  for (size_t s = 0; s < seqs.size(); ++s) {
    std::span<const int32_t> table = kv_.BlockTable(seqs[s]);
    std::copy(table.begin(), table.end(), plan.block_tables.begin() + s * max_blocks_);
  }
  plan.max_row_len = 1;
  for (int i = 0; i < n; ++i) {
    const SlotRef& slot = in.slots[i];
    if (embeds_) plan.tokens[i] = in.tokens[i];
    const int32_t block = plan.block_tables[size_t(plan.row_seq[i]) * max_blocks_ + slot.pos / bs];
    plan.slot_rows[i] = block * bs + slot.pos % bs;
    plan.row_len[i] = slot.pos + 1;
    plan.max_row_len = std::max(plan.max_row_len, slot.pos + 1);
    rope_.Angles(slot.pos, plan.cos.data() + size_t(i) * half, plan.sin.data() + size_t(i) * half);
    if (rope_copies_ == 2) {  // the local layers' angles follow all R rows' global ones
      const size_t at = (size_t(R) + i) * half;
      rope_local_.Angles(slot.pos, plan.cos.data() + at, plan.sin.data() + at);
    }
  }
  for (const auto& [first, count] : runs) {
    if (count == 1) {
      plan.decode_rows.push_back(first);
      continue;
    }
    for (int t = 0; t < count; t += kPrefillTileRows) {
      plan.tile_first.push_back(first + t);
      plan.tile_rows.push_back(std::min(kPrefillTileRows, count - t));
    }
  }
  for (int i = n; i < R; ++i) plan.decode_rows.push_back(i);
  plan.n_decode = static_cast<int>(plan.decode_rows.size());
  plan.n_tiles = static_cast<int>(plan.tile_first.size());
}

absl::Status CudaStageSlice::Prepare(const SliceInput& in, std::span<const int> tap_indices,
                                     bool device_input, Plan& plan) {
  for (int t : tap_indices) {
    if (!CanTap(t)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tap ", t, " is outside layers [", begin_, ", ", end_, "] of this slice"));
    }
  }
  if (absl::Status st =
          ValidateAndReserve(in, embeds_, config_, begin_, end_, kv_, device_input);
      !st.ok()) {
    return st;
  }
  BuildPlan(in, plan);
  EnsureCapacity(plan.rows, static_cast<int>(tap_indices.size()));

  // Pack and upload the metadata in one copy, once the previous batch's
  // upload has left the staging buffer.
  SPECLINE_CUDA_CHECK(cudaEventSynchronize(meta_uploaded_));
  const MetaLayout layout(plan.rows, AngleFloats());
  auto* base = meta_host_.as<uint8_t>();
  auto put = [&](size_t offset, const auto& v) {
    if (!v.empty()) std::memcpy(base + offset, v.data(), v.size() * sizeof(v[0]));
  };
  put(layout.tokens, plan.tokens);
  put(layout.slot_rows, plan.slot_rows);
  put(layout.row_seq, plan.row_seq);
  put(layout.row_len, plan.row_len);
  put(layout.decode_rows, plan.decode_rows);
  put(layout.tile_first, plan.tile_first);
  put(layout.tile_rows, plan.tile_rows);
  put(layout.cos, plan.cos);
  put(layout.sin, plan.sin);
  put(layout.block_tables, plan.block_tables);
  SPECLINE_CUDA_CHECK(cudaMemcpyAsync(meta_.get(), meta_host_.get(),
                                      layout.Bytes(plan.seqs, max_blocks_),
                                      cudaMemcpyHostToDevice, stream_));
  SPECLINE_CUDA_CHECK(cudaEventRecord(meta_uploaded_, stream_));
  return absl::OkStatus();
}

void CudaStageSlice::Launch(const Plan& plan, std::span<const int> tap_indices) {
  if (!plan.graph) {
    Enqueue(plan, tap_indices);
    return;
  }
  auto key = std::make_pair(plan.rows, std::vector<int>(tap_indices.begin(), tap_indices.end()));
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    cudaGraph_t graph = nullptr;
    SPECLINE_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    try {
      Enqueue(plan, tap_indices);
    } catch (...) {
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    SPECLINE_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    SPECLINE_CUDA_CHECK(err);
    it = graphs_.emplace(std::move(key), exec).first;
  }
  SPECLINE_CUDA_CHECK(cudaGraphLaunch(it->second, stream_));
}

void CudaStageSlice::Enqueue(const Plan& plan, std::span<const int> tap_indices) {
  const int64_t dim = config_.dim;
  const int R = plan.rows;
  const MetaLayout layout(R, AngleFloats());
  float* x = x_.as<float>();
  if (embeds_) {
    EmbedTokens(options_.dtype, embedding_.view.data,
                reinterpret_cast<const int32_t*>(meta_.as<uint8_t>() + layout.tokens), R,
                config_.dim, x, stream_);
    // Gemma: times sqrt(dim) on the fp32 residual stream, as the CPU slice.
    if (config_.scale_embeddings) {
      ScaleF32(x, int64_t{R} * dim, std::sqrt(static_cast<float>(dim)), stream_);
    }
  }
  auto take_taps = [&](int index) {
    for (size_t k = 0; k < tap_indices.size(); ++k) {
      if (tap_indices[k] != index) continue;
      SPECLINE_CUDA_CHECK(cudaMemcpyAsync(taps_.as<float>() + k * capacity_rows_ * dim, x,
                                          size_t(plan.n) * dim * sizeof(float),
                                          cudaMemcpyDeviceToDevice, stream_));
    }
  };
  take_taps(begin_);
  bool delta_pending = false;
  for (int local = 0; local < end_ - begin_; ++local) {
    RunLayer(local, plan, delta_pending);
    // Layer `local`'s MLP output is left in delta_ for the next layer's
    // fused add + norm; the slice's last boundary, and a tapped one, add it
    // here instead.
    delta_pending = true;
    const int boundary = begin_ + local + 1;
    const bool tapped =
        std::find(tap_indices.begin(), tap_indices.end(), boundary) != tap_indices.end();
    if (boundary == end_ || tapped) {
      AddResidual(options_.dtype, x, delta_.get(), int64_t{R} * dim, stream_);
      delta_pending = false;
      take_taps(boundary);
    }
  }
}

void CudaStageSlice::RunLayer(int local, const Plan& plan, bool add_delta) {
  const ModelConfig& c = config_;
  const DeviceLayerWeights& w = layers_[local];
  const DType t = options_.dtype;
  const int R = plan.rows;
  const int q_dim = c.n_heads * c.head_dim;
  const int kv_dim = c.n_kv_heads * c.head_dim;
  const int qkv_dim = q_dim + 2 * kv_dim;
  const MetaLayout layout(R, AngleFloats());
  auto meta = [&](size_t offset) { return meta_.as<uint8_t>() + offset; };
  float* x = x_.as<float>();

  // The previous layer's MLP output joins the residual stream here, unless
  // Enqueue already added it (at a tapped boundary).
  AddRmsNorm(t, x, add_delta ? delta_.get() : nullptr, w.attn_norm.as<float>(), c.norm_eps, R,
             c.dim, xb_.get(), stream_);
  gemm_->Run(w.wqkv.view, xb_.get(), R, qkv_.get());
  if (w.has_bias) AddBias(t, qkv_.get(), w.bqkv.as<float>(), R, qkv_dim, qkv_dim, stream_);
  if (w.has_qk_norm) {
    // OLMoE: one norm over the whole q (k) projection, i.e. one "head".
    const bool full = c.qk_norm_full;
    HeadRmsNorm(t, qkv_.get(), w.q_norm.as<float>(), c.norm_eps, R, full ? 1 : c.n_heads,
                full ? q_dim : c.head_dim, qkv_dim, stream_);
    HeadRmsNorm(t, At(qkv_, q_dim), w.k_norm.as<float>(), c.norm_eps, R,
                full ? 1 : c.n_kv_heads, full ? kv_dim : c.head_dim, qkv_dim, stream_);
  }
  const bool interleaved = c.rope_style == RopeStyle::kInterleaved;
  // A sliding layer's angles are the second set (after all R rows' first).
  const size_t angle_off =
      c.IsSlidingLayer(begin_ + local) ? size_t(R) * (c.head_dim / 2) * sizeof(float) : 0;
  const auto* cos = reinterpret_cast<const float*>(meta(layout.cos + angle_off));
  const auto* sin = reinterpret_cast<const float*>(meta(layout.sin + angle_off));
  ApplyRope(t, qkv_.get(), R, c.n_heads, c.head_dim, qkv_dim, cos, sin, interleaved, stream_,
            c.RopeDim());
  ApplyRope(t, At(qkv_, q_dim), R, c.n_kv_heads, c.head_dim, qkv_dim, cos, sin, interleaved,
            stream_, c.RopeDim());
  // Every slot's K/V is written before attention runs, so a chunk's tokens
  // see each other (causally) within this call.
  WriteKv(t, qkv_.get(), R, qkv_dim, q_dim, q_dim + kv_dim, kv_dim,
          reinterpret_cast<const int32_t*>(meta(layout.slot_rows)), k_cache_[local].get(),
          v_cache_[local].get(), stream_);
  Attention(local, plan);
  gemm_->Run(w.wo.view, att_.get(), R, delta_.get());
  // Gemma's post-norms: RMSNorm of each branch's output before it joins the
  // residual stream (one "head" of dim elements per row).
  if (w.has_post_norms) {
    HeadRmsNorm(t, delta_.get(), w.post_attn_norm.as<float>(), c.norm_eps, R, 1, c.dim, c.dim,
                stream_);
  }
  AddRmsNorm(t, x, delta_.get(), w.ffn_norm.as<float>(), c.norm_eps, R, c.dim, xb_.get(), stream_);
  if (c.IsMoe()) {
    RunMoe(local, R);  // R == plan.n: MoE batches are never padded (no graphs)
    return;
  }
  gemm_->Run(w.w_gate_up.view, xb_.get(), R, gate_up_.get());
  if (c.gelu_mlp) {
    GeGlu(t, gate_up_.get(), R, c.hidden_dim, h_.get(), stream_);
  } else {
    SwiGlu(t, gate_up_.get(), R, c.hidden_dim, h_.get(), stream_);
  }
  gemm_->Run(w.w_down.view, h_.get(), R, delta_.get());
  if (w.has_post_norms) {
    HeadRmsNorm(t, delta_.get(), w.post_ffw_norm.as<float>(), c.norm_eps, R, 1, c.dim, c.dim,
                stream_);
  }
}

void CudaStageSlice::Attention(int local, const Plan& plan) {
  const ModelConfig& c = config_;
  const MetaLayout layout(plan.rows, AngleFloats());
  auto meta = [&](size_t offset) {
    return reinterpret_cast<const int32_t*>(meta_.as<uint8_t>() + offset);
  };
  PagedAttentionParams p;
  p.t = options_.dtype;
  p.q = qkv_.get();
  p.q_stride = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim;
  p.out = att_.get();
  p.k_cache = k_cache_[local].get();
  p.v_cache = v_cache_[local].get();
  p.block_tables = meta(layout.block_tables);
  p.max_blocks = max_blocks_;
  p.row_seq = meta(layout.row_seq);
  p.row_len = meta(layout.row_len);
  p.n = plan.rows;
  p.n_heads = c.n_heads;
  p.n_kv_heads = c.n_kv_heads;
  p.head_dim = c.head_dim;
  p.block_size = options_.slice.kv_block_size;
  p.scale = c.AttentionScale();  // 1/sqrt(head_dim) unless query_pre_attn_scalar says
  p.window = c.LayerWindow(begin_ + local);
  p.softcap = c.attn_softcap;
  // A graph replays as sequences grow, so its grid must hold for any
  // length; eager batches use the same bound so both run identical kernels
  // (blocks past a row's length exit at once).
  p.max_len = max_len_;
  if (plan.graph) {
    PagedAttentionDecode(p, nullptr, plan.rows, attn_ws_.get(), stream_);
    return;
  }
  if (plan.n_decode > 0) {
    PagedAttentionDecode(p, meta(layout.decode_rows), plan.n_decode, attn_ws_.get(), stream_);
  }
  if (plan.n_tiles > 0) {
    PagedAttentionPrefill(p, meta(layout.tile_first), meta(layout.tile_rows), plan.n_tiles,
                          stream_);
  }
}

void CudaStageSlice::CopyTapsOut(const Plan& plan, std::span<const int> tap_indices,
                                 std::vector<Tap>* taps) {
  const int64_t dim = config_.dim;
  const int64_t C = capacity_rows_;
  float* host = io_host_.as<float>() + C * dim;  // after the hidden in/out area
  for (size_t k = 0; k < tap_indices.size(); ++k) {
    SPECLINE_CUDA_CHECK(cudaMemcpyAsync(host + k * C * dim, taps_.as<float>() + k * C * dim,
                                        size_t(plan.n) * dim * sizeof(float),
                                        cudaMemcpyDeviceToHost, stream_));
  }
  SPECLINE_CUDA_CHECK(cudaStreamSynchronize(stream_));
  taps->assign(tap_indices.size(), Tap{});
  for (size_t k = 0; k < tap_indices.size(); ++k) {
    (*taps)[k].index = tap_indices[k];
    (*taps)[k].hidden.assign(host + k * C * dim, host + k * C * dim + plan.n * dim);
  }
}

absl::Status CudaStageSlice::Guarded(const std::function<absl::Status()>& body) {
  try {
    SPECLINE_CUDA_CHECK(cudaSetDevice(options_.device));
    return body();
  } catch (const CudaError& e) {
    return absl::InternalError(absl::StrCat("layers [", begin_, ", ", end_, ") on ", device(),
                                            ": ", e.what()));
  }
}

void CudaStageSlice::LoadHidden(const Plan& plan, const float* src, cudaMemcpyKind kind) {
  const int64_t dim = config_.dim;
  SPECLINE_CUDA_CHECK(cudaMemcpyAsync(x_.get(), src, size_t(plan.n) * dim * sizeof(float), kind,
                                      stream_));
  if (plan.rows > plan.n) {  // graph padding rows: finite values, ignored
    SPECLINE_CUDA_CHECK(cudaMemsetAsync(x_.as<float>() + plan.n * dim, 0,
                                        size_t(plan.rows - plan.n) * dim * sizeof(float), stream_));
  }
}

absl::Status CudaStageSlice::Forward(const SliceInput& in, std::span<const int> tap_indices,
                                     SliceOutput* out) {
  return Guarded([&]() -> absl::Status {
    Plan plan;
    if (absl::Status st = Prepare(in, tap_indices, /*device_input=*/false, plan); !st.ok()) {
      return st;
    }
    const int64_t dim = config_.dim;
    float* staging = io_host_.as<float>();
    if (!embeds_) {
      std::memcpy(staging, in.hidden.data(), size_t(plan.n) * dim * sizeof(float));
      LoadHidden(plan, staging, cudaMemcpyHostToDevice);
    }
    Launch(plan, tap_indices);
    SPECLINE_CUDA_CHECK(cudaMemcpyAsync(staging, x_.get(), size_t(plan.n) * dim * sizeof(float),
                                        cudaMemcpyDeviceToHost, stream_));
    CopyTapsOut(plan, tap_indices, &out->taps);  // synchronizes the stream
    out->hidden.assign(staging, staging + plan.n * dim);
    return absl::OkStatus();
  });
}

absl::Status CudaStageSlice::ForwardDevice(const SliceInput& in, const float* device_in,
                                           cudaEvent_t in_ready, std::span<const int> tap_indices,
                                           std::vector<Tap>* taps, float* device_out,
                                           cudaEvent_t out_ready) {
  return Guarded([&]() -> absl::Status {
    Plan plan;
    if (absl::Status st = Prepare(in, tap_indices, /*device_input=*/true, plan); !st.ok()) {
      return st;
    }
    if (!embeds_) {
      if (in_ready) SPECLINE_CUDA_CHECK(cudaStreamWaitEvent(stream_, in_ready, 0));
      LoadHidden(plan, device_in, cudaMemcpyDeviceToDevice);
    }
    Launch(plan, tap_indices);
    SPECLINE_CUDA_CHECK(cudaMemcpyAsync(device_out, x_.get(),
                                        size_t(plan.n) * config_.dim * sizeof(float),
                                        cudaMemcpyDeviceToDevice, stream_));
    if (out_ready) SPECLINE_CUDA_CHECK(cudaEventRecord(out_ready, stream_));
    if (!tap_indices.empty()) {
      CopyTapsOut(plan, tap_indices, taps);  // waits for the stream
    } else {
      taps->clear();
    }
    return absl::OkStatus();
  });
}

}  // namespace specline::cuda
