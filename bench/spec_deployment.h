// A pipeline for the speculation benchmarks (spec_bench, head_bench,
// pipo_bench): N `specline-stage` processes (layers split evenly) and one
// `specline-scheduler` on loopback TCP, started by cli/launch/ as `specline
// serve` is but without the gateway, so a benchmark talks to the
// scheduler's internal Submit and sees the final SubmitEvent's speculation
// counters. Also what one request cost in CPU time.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/launch/startup.h"
#include "specline/internal/scheduler.grpc.pb.h"

namespace specline::bench {

// Busy CPU time of the whole machine so far (/proc/stat), all cores.
double MachineCpuSeconds();
std::string LoadAverage();

// Expected speedup of pipeline speculation over autoregressive decoding on
// n stages at acceptance alpha: the equivalent acceptance length
// L'acc = n N / K with K = accepted + n (N - accepted) (SPD; PPSD's eq. 7
// with E = L / n gives the same).
inline double Theory(double alpha, int n) { return n / (alpha + (1 - alpha) * n); }

// One request's client-side view.
struct Run {
  std::vector<int32_t> tokens;
  double ttft = 0, e2e = 0;
  v1::DecodingPolicy policy = v1::DECODING_POLICY_UNSPECIFIED;
  v1::SpecDecodeStats spec;
  double cpu_seconds = 0;          // of the stage and scheduler processes, during the request
  double machine_cpu_seconds = 0;  // of every process on the machine, during the request
  double other_cores() const;      // busy outside the deployment
  double cores() const { return e2e > 0 ? cpu_seconds / e2e : 0; }
  double cpu_ms_per_token() const { return tokens.empty() ? 0 : 1e3 * cpu_seconds / tokens.size(); }
  // (tokens - 1) / (end-to-end - time to first token), at the client.
  double decode_tok_s() const {
    return tokens.size() > 1 ? (tokens.size() - 1) / (e2e - ttft) : 0;
  }
  // accepted / (accepted + flushes): the acceptance of the drafts that were
  // verified (a flush voids the drafts behind the rejected one unverified).
  double acceptance() const;
};

struct DeploymentOptions {
  std::string model;
  int stages = 2;
  int stage_threads = 1;
  int scheduler_threads = 1;
  int kv_tokens = 1024;             // per stage
  std::string spec_policy = "always";
  bool allow_oracle = false;
  std::vector<std::string> scheduler_args;  // extra flags, as is (e.g. --spd-head DIR)
  std::vector<std::string> stage_args;      // extra flags for every stage (e.g. --device cuda)
  bool metrics = false;                     // the scheduler serves /metrics (PaceGauges)
};

struct BenchRequest {
  std::vector<int32_t> prompt;
  int max_tokens = 0;  // no stop ids: EOS is ignored
  v1::DecodingPolicy policy = v1::DECODING_POLICY_AUTOREGRESSIVE;
  float temperature = 0;
  uint64_t seed = 0;
  double oracle_alpha = -1;                        // >= 0: the oracle drafter
  const std::vector<int32_t>* reference = nullptr;  // the oracle's true tokens
  float pipo_tau = -1;                             // >= 0: PIPO's threshold
};

// The processes, killed on destruction; their logs go to a file in a
// temporary directory (named in errors).
class Deployment {
 public:
  explicit Deployment(const DeploymentOptions& o);
  ~Deployment();
  Deployment(const Deployment&) = delete;
  Deployment& operator=(const Deployment&) = delete;

  // One request; throws on failure.
  Run Submit(const BenchRequest& request);

  // Pipeline speculation's measured pace from the scheduler's /metrics
  // (policies/draft_pace.h): the lines of the token-gap and break-even
  // gauges that hold a value, as exposed. Empty without `metrics`.
  std::vector<std::string> PaceGauges() const;

 private:
  double CpuSeconds();  // user + system CPU time of every process so far
  std::filesystem::path dir_;
  std::string log_;
  launch::Processes processes_;
  std::unique_ptr<internal::Scheduler::Stub> stub_;
  uint64_t seq_ = 0;
};

}  // namespace specline::bench
