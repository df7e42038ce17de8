#include "scheduler/policies/spd.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "scheduler/policies/pipeline_draft.h"

namespace specline::scheduler {

std::unique_ptr<DecodingPolicy> MakeSpdPolicy(const PolicyResources& r) {
  const int n_stages = r.n_stages;
  const SpecOptions& o = r.options;
  const bool training_free = o.spd_drafter == "recycle";
  if (o.spd_head.empty() && !training_free && !o.allow_oracle) return nullptr;
  std::unique_ptr<Drafter> drafter;
  if (training_free) {
    drafter = MakeTrainingFreePipelineDrafter(r.training_free);
  } else if (!o.spd_head.empty()) {
    std::shared_ptr<const DraftHead> head = LoadDraftHead(o.spd_head, r.model->config());
    if (head->config().method != DraftMethod::kSpd) {
      throw std::invalid_argument(o.spd_head + ": a " + DraftMethodName(head->config().method) +
                                  " head is not an SPD module");
    }
    if (head->config().spd_stages != n_stages) {
      throw std::invalid_argument(absl::StrCat(o.spd_head, ": the module was made for ",
                                               head->config().spd_stages,
                                               " pipeline stages; this pipeline has ", n_stages));
    }
    drafter = MakeSpdDrafter(head, r.model, r.pool, r.kv_block_size, o.draft_kv_capacity_tokens);
  }
  return std::make_unique<PipelineDraftPolicy>(
      r.host, v1::DECODING_POLICY_SPD, r.draft_rules(), std::move(drafter),
      o.allow_oracle ? MakeOracleDrafter(0) : nullptr);
}

}  // namespace specline::scheduler
