#include "scheduler/policies/ppsd.h"

#include <stdexcept>

#include "scheduler/policies/pipeline_draft.h"

namespace specline::scheduler {
namespace {

class PpsdPolicy : public PipelineDraftPolicy {
 public:
  using PipelineDraftPolicy::PipelineDraftPolicy;
  // The PPSD oracle without a head exits where the first stage ends, which
  // is known once the stages answer.
  void OnPipelineUpLocked(const std::vector<internal::StageInfo>& infos) override {
    if (!oracle_ && allow_oracle_ && !infos.empty()) {
      oracle_ = MakeOracleDrafter(infos.front().layer_end());
    }
  }
  bool allow_oracle_ = false;
};

std::unique_ptr<DecodingPolicy> MakePpsdPolicy(const PolicyResources& r) {
  const SpecOptions& o = r.options;
  const std::string& head_dir = o.Of<PpsdOptions>().head;
  if (head_dir.empty() && !o.allow_oracle) return nullptr;
  std::unique_ptr<Drafter> drafter, oracle;
  if (!head_dir.empty()) {
    // Checked against the served model now, so a wrong head stops the
    // scheduler at start-up rather than failing requests later.
    std::shared_ptr<const DraftHead> head = LoadDraftHead(head_dir, r.model->config());
    if (head->config().method == DraftMethod::kSpd) {
      throw std::invalid_argument(head_dir + ": an SPD module is not a PPSD head");
    }
    drafter = MakePpsdDrafter(head, r.pool, r.kv_block_size, o.draft_kv_capacity_tokens);
    if (o.allow_oracle) oracle = MakeOracleDrafter(head->config().exit_layer);
  }
  auto policy = std::make_unique<PpsdPolicy>(r.host, v1::DECODING_POLICY_PPSD, r.draft_rules(),
                                             std::move(drafter), std::move(oracle));
  policy->allow_oracle_ = o.allow_oracle;
  return policy;
}

constexpr PolicyFlag kFlags[] = {
    {"ppsd-head", "DIR", "enable DECODING_POLICY_PPSD with this early-exit head", "",
     StoreText<PpsdOptions, &PpsdOptions::head>},
};

}  // namespace

const PolicyDeclaration& PpsdDeclaration() {
  static const PolicyDeclaration d{v1::DECODING_POLICY_PPSD, kFlags,
                                   "the scheduler has no --ppsd-head", MakePpsdPolicy};
  return d;
}

}  // namespace specline::scheduler
