// Policies whose models run on the stages (PTP's adapter, PIPO's
// backbone) find them at bring-up: every stage must host the same one,
// under the same id, which the policy then tags its slots with.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "scheduler/policy_host.h"
#include "specline/internal/stage.pb.h"

namespace specline::scheduler {

// The id every stage hosts a model under, or why the pipeline cannot serve
// the policy (logged).
struct StageModel {
  uint32_t id = 0;
  std::string unavailable;  // "" when found
};

// The adapter / weight set whose fingerprint is `want`. `policy` and
// `head_dir` go into the message.
StageModel FindStageAdapter(const PolicyHost& host, const std::vector<internal::StageInfo>& infos,
                            uint64_t want, const char* policy, const std::string& head_dir);
StageModel FindStageWeightSet(const PolicyHost& host,
                              const std::vector<internal::StageInfo>& infos, uint64_t want,
                              const char* policy, const std::string& head_dir);

}  // namespace specline::scheduler
