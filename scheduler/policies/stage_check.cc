#include "scheduler/policies/stage_check.h"

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace specline::scheduler {

std::string StageLacks(const PolicyHost& host, const std::vector<internal::StageInfo>& infos,
                       uint64_t (internal::StageInfo::*fingerprint)() const, uint64_t want,
                       const char* policy, const char* what, const std::string& flag_value,
                       const char* flag) {
  for (size_t i = 0; i < infos.size(); ++i) {
    const uint64_t got = (infos[i].*fingerprint)();
    if (got == want) continue;
    std::string why = absl::StrCat("policy ", policy, " is not available: ",
                                   host.StageName(static_cast<int>(i)),
                                   got == 0 ? " has no " : " runs a different ", what,
                                   " (start every stage with --", flag, " ", flag_value, ")");
    spdlog::error("{}", why);
    return why;
  }
  return "";
}

}  // namespace specline::scheduler
