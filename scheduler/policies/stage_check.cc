#include "scheduler/policies/stage_check.h"

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace specline::scheduler {
namespace {

// `list(info)` is a stage's hosted adapters or weight sets; `what` and
// `flag` name them in the message.
template <typename List>
StageModel Find(const PolicyHost& host, const std::vector<internal::StageInfo>& infos,
                uint64_t want, const char* policy, const std::string& head_dir, const char* what,
                const char* flag, const List& list) {
  StageModel found;
  auto fail = [&](size_t stage, const std::string& problem) {
    found.id = 0;
    found.unavailable = absl::StrCat("policy ", policy, " is not available: ",
                                     host.StageName(static_cast<int>(stage)), " ", problem,
                                     " (start every stage with --", flag, " ", head_dir, ")");
    spdlog::error("{}", found.unavailable);
    return found;
  };
  for (size_t i = 0; i < infos.size(); ++i) {
    uint32_t id = 0;
    for (const auto& entry : list(infos[i])) {
      if (entry.fingerprint() == want) id = entry.id();
    }
    if (id == 0) {
      return fail(i, list(infos[i]).empty() ? absl::StrCat("hosts no ", what)
                                            : absl::StrCat("hosts a different ", what));
    }
    if (i > 0 && id != found.id) {
      return fail(i, absl::StrCat("hosts the ", what, " under id ", id, ", the first stage under ",
                                  found.id, "; list the same heads in the same order"));
    }
    found.id = id;
  }
  return found;
}

}  // namespace

StageModel FindStageAdapter(const PolicyHost& host, const std::vector<internal::StageInfo>& infos,
                            uint64_t want, const char* policy, const std::string& head_dir) {
  return Find(host, infos, want, policy, head_dir, "adapter", "adapter",
              [](const internal::StageInfo& s) -> const auto& { return s.adapters(); });
}

StageModel FindStageWeightSet(const PolicyHost& host,
                              const std::vector<internal::StageInfo>& infos, uint64_t want,
                              const char* policy, const std::string& head_dir) {
  return Find(host, infos, want, policy, head_dir, "weight set", "weight-set",
              [](const internal::StageInfo& s) -> const auto& { return s.weight_sets(); });
}

}  // namespace specline::scheduler
