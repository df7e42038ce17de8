// The oracle and PPSD drafters (the SPD module's is in drafter_spd.cc).
#include "scheduler/policies/pipeline_drafter.h"

#include "absl/strings/str_cat.h"
#include "model/drafters/draft_head_ppsd.h"

namespace specline::scheduler {
namespace {

// Tap `layer` of chain position `pos` of the current epoch, or nullptr.
const std::vector<float>* FindTap(const SpecState& sp, int32_t pos, int layer) {
  auto at = sp.taps.find(pos);
  if (at == sp.taps.end()) return nullptr;
  auto it = at->second.find(layer);
  return it == at->second.end() ? nullptr : &it->second;
}

// Whether rows [from, to) all have tap `layer`.
bool HasTaps(const SpecState& sp, int32_t from, int32_t to, int layer) {
  for (int32_t p = from; p < to; ++p) {
    if (!FindTap(sp, p, layer)) return false;
  }
  return true;
}

class OracleTimedDrafter : public Drafter {
 public:
  explicit OracleTimedDrafter(int exit_layer) : exit_layer_(exit_layer) {}
  std::string name() const override {
    return exit_layer_ > 0 ? absl::StrCat("oracle (PPSD timing, E=", exit_layer_, ")")
                           : "oracle (SPD timing)";
  }
  std::vector<int> TapLayers() const override {
    if (exit_layer_ > 0) return {exit_layer_};
    return {};
  }
  bool Ready(const SpecState& sp, int32_t verified) const override {
    return exit_layer_ == 0 || FindTap(sp, sp.end(verified) - 1, exit_layer_) != nullptr;
  }
  void Propose(DraftJob& job) override {
    const size_t i = static_cast<size_t>(job.end - job.prompt_len);
    // Past the reference any token is "the truth" as far as the test knows.
    const int32_t truth =
        job.reference && i < job.reference->size() ? (*job.reference)[i] : 0;
    job.draft = {job.oracle->Propose(truth, vocab_size(job)), {}};
    job.fed = job.end;
  }

 private:
  static int32_t vocab_size(const DraftJob& job) { return job.vocab_size; }
  int exit_layer_;
};

class PpsdDrafter : public Drafter {
 public:
  PpsdDrafter(std::shared_ptr<const DraftHead> head, std::shared_ptr<kernels::ThreadPool> pool,
              int kv_block_size, int kv_capacity_tokens)
      : head_(std::move(head), std::move(pool),
              PpsdHeadOptions{kv_block_size, kv_capacity_tokens}),
        layer_head_(head_.method() == DraftMethod::kPpsdLayer) {}

  std::string name() const override {
    return absl::StrCat("PPSD ", DraftMethodName(head_.method()), " head, E=", head_.exit_layer());
  }
  std::vector<int> TapLayers() const override { return {head_.exit_layer()}; }
  bool Ready(const SpecState& sp, int32_t verified) const override {
    const int32_t end = sp.end(verified);
    // The norm head needs the newest token's features only; the layer head
    // also every position its cache lacks (the prompt, after a flush).
    return HasTaps(sp, layer_head_ ? std::min(sp.fed, end - 1) : end - 1, end,
                   head_.exit_layer());
  }
  void Propose(DraftJob& job) override {
    const int e = head_.exit_layer();
    const int dim = head_.dim();
    const int32_t first = layer_head_ ? job.first : job.end - 1;
    std::vector<SlotRef> slots;
    std::vector<float> hidden;
    for (int32_t p = first; p < job.end; ++p) {
      const auto& row = job.taps[p - job.first];
      auto it = row.find(e);
      if (it == row.end() || static_cast<int>(it->second.size()) != dim) {
        job.status = absl::InternalError(absl::StrCat("no tap ", e, " for position ", p));
        return;
      }
      slots.push_back({job.seq_id, p});
      hidden.insert(hidden.end(), it->second.begin(), it->second.end());
    }
    logits_.resize(head_.vocab_size());
    job.status = head_.LastLogits(slots, hidden.data(), logits_.data());
    if (!job.status.ok()) return;
    job.draft = DraftFromLogits(logits_, job.sampling, {job.chain, job.prompt_len, job.allowed}, job.rng);
    job.fed = job.end;  // features after layer E never change: every row is final
  }
  void Release(uint64_t seq_id) override { head_.Release(seq_id); }

 private:
  PpsdHead head_;
  bool layer_head_;
  std::vector<float> logits_;
};

}  // namespace

DraftToken DraftFromLogits(std::span<const float> logits, const SamplingParams& sampling,
                           const SamplingContext& ctx, Rng& rng) {
  // The drafter's row gets the target's processing (bias, mask, penalties):
  // q then drafts what p can accept.
  if (sampling.greedy()) return {Sample(logits, sampling, ctx, rng), {}};
  DraftToken d;
  d.q = Warp(logits, sampling, ctx);
  d.token = d.q.InverseCdf(rng.Uniform());
  return d;
}

std::unique_ptr<Drafter> MakeOracleDrafter(int exit_layer) {
  return std::make_unique<OracleTimedDrafter>(exit_layer);
}

std::unique_ptr<Drafter> MakePpsdDrafter(std::shared_ptr<const DraftHead> head,
                                         std::shared_ptr<kernels::ThreadPool> pool,
                                         int kv_block_size, int kv_capacity_tokens) {
  return std::make_unique<PpsdDrafter>(std::move(head), std::move(pool), kv_block_size,
                                       kv_capacity_tokens);
}

}  // namespace specline::scheduler
