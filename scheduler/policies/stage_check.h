// Policies whose weights run on the stages (PTP's adapter, PIPO's
// backbone) check at bring-up that every stage runs the same ones.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/policy_host.h"
#include "specline/internal/stage.pb.h"

namespace specline::scheduler {

// Why the pipeline cannot serve `policy` ("" when every stage reports
// `want` through `fingerprint`). Logs the reason.
std::string StageLacks(const PolicyHost& host, const std::vector<internal::StageInfo>& infos,
                       uint64_t (internal::StageInfo::*fingerprint)() const, uint64_t want,
                       const char* policy, const char* what, const std::string& flag_value,
                       const char* flag);

}  // namespace specline::scheduler
