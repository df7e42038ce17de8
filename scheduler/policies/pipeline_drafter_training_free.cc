// The training-free drafter under pipeline speculation's timing (SPD): one
// token per call, proposed from the chain as it stands.
#include "model/drafters/training_free_drafter.h"
#include "scheduler/policies/pipeline_drafter.h"

namespace specline::scheduler {
namespace {

class TrainingFreePipelineDrafter : public Drafter {
 public:
  explicit TrainingFreePipelineDrafter(std::shared_ptr<TrainingFreeDrafter> drafter)
      : drafter_(std::move(drafter)) {}

  std::string name() const override { return "training-free (prompt lookup, Token Recycling)"; }
  std::vector<int> TapLayers() const override { return {}; }
  bool Ready(const SpecState& /*sp*/, int32_t /*verified*/) const override { return true; }
  // A point-mass draft: the verifier's rejection sampling stays exact.
  void Propose(DraftJob& job) override {
    const DraftProposal p = drafter_->Propose(*drafter_->MemoryFor(job.cache_scope), job.chain, 1);
    job.fed = job.end;
    if (p.tokens.empty()) {
      job.none = true;
      return;
    }
    job.draft = {p.tokens.front(), {}};
    job.source = DraftSourceName(p.source);
  }
  bool WantsLogits() const override { return true; }
  // The matrix of the sequence's scope learns the row (drafter_memory.h).
  void Observe(const Sequence& s, int32_t input_token, std::span<const float> logits) override {
    drafter_->Observe(*drafter_->MemoryFor(s.cache_scope), input_token, logits);
  }

 private:
  std::shared_ptr<TrainingFreeDrafter> drafter_;
};

}  // namespace

std::unique_ptr<Drafter> MakeTrainingFreePipelineDrafter(
    std::shared_ptr<TrainingFreeDrafter> drafter) {
  return std::make_unique<TrainingFreePipelineDrafter>(std::move(drafter));
}

}  // namespace specline::scheduler
