#include "scheduler/policies/spd.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "scheduler/policies/pipeline_draft.h"

namespace specline::scheduler {
namespace {

std::unique_ptr<DecodingPolicy> MakeSpdPolicy(const PolicyResources& r) {
  const int n_stages = r.n_stages;
  const SpecOptions& o = r.options;
  const std::string& head_dir = o.Of<SpdOptions>().head;
  const bool training_free = o.Of<SpdOptions>().drafter == "recycle";
  if (head_dir.empty() && !training_free && !o.allow_oracle) return nullptr;
  std::unique_ptr<Drafter> drafter;
  if (training_free) {
    drafter = MakeTrainingFreePipelineDrafter(r.training_free());
  } else if (!head_dir.empty()) {
    std::shared_ptr<const DraftHead> head = LoadDraftHead(head_dir, r.model->config());
    if (head->config().method != DraftMethod::kSpd) {
      throw std::invalid_argument(head_dir + ": a " + DraftMethodName(head->config().method) +
                                  " head is not an SPD module");
    }
    if (head->config().spd_stages != n_stages) {
      throw std::invalid_argument(absl::StrCat(head_dir, ": the module was made for ",
                                               head->config().spd_stages,
                                               " pipeline stages; this pipeline has ", n_stages));
    }
    drafter = MakeSpdDrafter(head, r.model, r.pool, r.kv_block_size, o.draft_kv_capacity_tokens);
  }
  return std::make_unique<PipelineDraftPolicy>(
      r.host, v1::DECODING_POLICY_SPD, r.draft_rules(), std::move(drafter),
      o.allow_oracle ? MakeOracleDrafter(0) : nullptr);
}

constexpr PolicyFlag kFlags[] = {
    {"spd-head", "DIR", "enable DECODING_POLICY_SPD with this speculation module", "",
     StoreText<SpdOptions, &SpdOptions::head>},
    {"spd-drafter", "D",
     "module (--spd-head's) or recycle (the training-free\ndrafter under SPD's timing; no head)",
     "module",
     [](const std::string& v, SpecOptions& o) {
       if (v != "module" && v != "recycle") {
         return absl::InvalidArgumentError(
             absl::StrCat("--spd-drafter: \"", v, "\" is not module or recycle"));
       }
       o.Of<SpdOptions>().drafter = v;
       return absl::OkStatus();
     }},
};

}  // namespace

const PolicyDeclaration& SpdDeclaration() {
  static const PolicyDeclaration d{v1::DECODING_POLICY_SPD, kFlags,
                                   "the scheduler has no --spd-head", MakeSpdPolicy};
  return d;
}

}  // namespace specline::scheduler
