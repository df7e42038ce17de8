// The SPD drafter: the speculation module run on every row the pipeline has
// not finished with, each at its lockstep depth (see LockstepDepth).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/drafters/spd_module.h"
#include "scheduler/policies/pipeline_drafter.h"

namespace specline::scheduler {
namespace {

class SpdDrafter : public Drafter {
 public:
  SpdDrafter(std::shared_ptr<const DraftHead> head, std::shared_ptr<const ModelSource> base,
             std::shared_ptr<kernels::ThreadPool> pool, int kv_block_size, int kv_capacity_tokens)
      : module_(std::move(head), std::move(base), std::move(pool),
                SpdModuleOptions{kv_block_size, kv_capacity_tokens}) {
    for (int l : module_.AllTaps()) {
      if (l != 0) taps_.push_back(l);  // H^0 the module embeds itself
    }
  }

  std::string name() const override {
    return absl::StrCat("SPD module (n=", module_.n_stages(), ", L_s=", module_.n_layers(), ")");
  }
  std::vector<int> TapLayers() const override { return taps_; }
  // Waits until every row the module recomputes has the features of its
  // lockstep depth (below): the module is trained on that layout only, and
  // feeding a row shallower features because its taps lag behind the
  // drafter costs acceptance (measured: 13% of rows at n=5 on stories260K,
  // per-verified T=1 acceptance 0.6 instead of Python's 0.7). The wait is
  // about one stage's time, the pipeline's own cadence.
  bool Ready(const SpecState& sp, int32_t verified) const override {
    const int32_t end = sp.end(verified);
    for (int32_t pos = std::min(sp.fed, end - 1); pos < end; ++pos) {
      const int depth = LockstepDepth(pos, end, verified);
      if (depth == 0) continue;
      auto have = sp.taps.find(pos);
      if (have == sp.taps.end()) return false;
      for (int l : module_.TapsForDepth(depth)) {
        if (l != 0 && have->second.count(l) == 0) return false;
      }
    }
    return true;
  }

  void Propose(DraftJob& job) override {
    const int n = module_.n_stages();
    const int dim = module_.dim();
    const size_t rows = static_cast<size_t>(job.end - job.first);
    std::vector<SpdRow> in(rows);
    std::vector<std::vector<float>> features(rows);
    int32_t fed = job.first;
    bool leading_final = true;
    for (size_t r = 0; r < rows; ++r) {
      const auto& have = job.taps[r];
      const int32_t pos = job.first + static_cast<int32_t>(r);
      // Ready() waited for the lockstep depth's taps; the fallback to a
      // shallower depth only guards against a tap that was dropped.
      const int lockstep = LockstepDepth(pos, job.end, job.verified);
      int depth = 0;
      for (int d = lockstep; d > 0; --d) {
        bool all = true;
        for (int l : module_.TapsForDepth(d)) all = all && (l == 0 || have.count(l) > 0);
        if (all) {
          depth = d;
          break;
        }
      }
      for (int l : module_.TapsForDepth(depth)) {
        if (l == 0) continue;
        const std::vector<float>& h = have.at(l);
        if (static_cast<int>(h.size()) != dim) {
          job.status = absl::InternalError(absl::StrCat("tap ", l, " has ", h.size(), " floats"));
          return;
        }
        features[r].insert(features[r].end(), h.begin(), h.end());
      }
      in[r] = {pos, job.chain[pos], depth, features[r]};
      // Rows at full depth will not change any more: they stay in the
      // module's cache and are not rerun next time.
      leading_final = leading_final && depth == n;
      if (leading_final) fed = pos + 1;
    }
    logits_.resize(module_.vocab_size());
    job.status = module_.Forward(job.seq_id, in, logits_.data());
    if (!job.status.ok()) return;
    job.draft = DraftFromLogits(logits_, job.sampling, {job.chain, job.prompt_len, job.allowed}, job.rng);
    job.fed = fed;
  }

  void Release(uint64_t seq_id) override { module_.Release(seq_id); }

 private:
  // The paper's input-state schedule, which the module is trained on:
  // drafting the token after the newest (position end - 1), an in-flight row
  // k positions back has passed k stages (the newest is just entering the
  // pipeline: depth 0), and rows that left the pipeline (the token after
  // them was verified) are at full depth n; a full pipeline, or fewer rows
  // in flight after a flush. Taps of in-flight rows may already have
  // arrived for deeper layers (stages run ahead of the drafter); using them
  // would feed the module features it never saw at that offset.
  int LockstepDepth(int32_t pos, int32_t end, int32_t verified) const {
    const int n = module_.n_stages();
    if (pos < verified - 1) return n;
    return static_cast<int>(std::min<int64_t>(end - 1 - pos, n));
  }

  SpdModule module_;
  std::vector<int> taps_;
  std::vector<float> logits_;
};

}  // namespace

std::unique_ptr<Drafter> MakeSpdDrafter(std::shared_ptr<const DraftHead> head,
                                        std::shared_ptr<const ModelSource> base,
                                        std::shared_ptr<kernels::ThreadPool> pool,
                                        int kv_block_size, int kv_capacity_tokens) {
  return std::make_unique<SpdDrafter>(std::move(head), std::move(base), std::move(pool),
                                      kv_block_size, kv_capacity_tokens);
}

}  // namespace specline::scheduler
