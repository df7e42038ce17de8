// Per-request records (timestamps taken by the load tester itself) and
// their aggregation: latency distributions, throughput, goodput under SLOs,
// errors by gRPC status code, speculation counters and per-second series.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace specline::loadtest {

// One Generate call. Times are seconds; `start` and `message_times` are
// relative to the start of the run, the latencies relative to `start`.
struct RequestRecord {
  int index = 0;
  double scheduled = 0;  // intended send time (open loop), else = start
  double start = 0;      // Generate issued
  double end = 0;        // stream finished (Finish returned)
  bool ok = false;
  std::string status_code = "OK";  // gRPC status name
  std::string error;
  std::string finish_reason;  // stop, length, abort, none
  std::string policy;         // the policy that served it, as users type it ("" = not said)
  int prompt_tokens = 0;      // from the final message's usage
  int output_tokens = 0;      // tokens received
  double ttft = 0;            // start -> first token-bearing message
  double e2e = 0;             // start -> end
  double tpot = 0;            // (e2e - ttft) / (output_tokens - 1); 0 below 2 tokens
  std::vector<double> itl;    // one gap per token-bearing message after the first
  std::vector<double> message_times;  // receipt of each token-bearing message
  std::vector<int> message_tokens;    // tokens in it
  // Speculation counters from the final message (spec_decode).
  int64_t num_drafts = 0, num_draft_tokens = 0, num_accepted_tokens = 0, num_flushes = 0,
          num_discarded_tokens = 0, pipeline_cycles = 0;
  std::vector<int64_t> accepted_per_pos;
};

// Linear interpolation between closest ranks (numpy's default): q in [0, 1].
double Percentile(std::vector<double> values, double q);

struct Distribution {
  int count = 0;
  double mean = 0, min = 0, max = 0, p50 = 0, p90 = 0, p95 = 0, p99 = 0;
};
Distribution Describe(const std::vector<double>& values);

struct Slo {
  double ttft = 0;  // seconds; 0 = no SLO on TTFT
  double tpot = 0;  // seconds; 0 = no SLO on TPOT
};

// A request is "good" when it succeeded and meets every SLO that is set.
bool MeetsSlo(const RequestRecord& r, const Slo& slo);

struct SpecTotals {
  int64_t num_drafts = 0, num_draft_tokens = 0, num_accepted_tokens = 0, num_flushes = 0,
          num_discarded_tokens = 0, pipeline_cycles = 0;
  std::vector<int64_t> accepted_per_pos;
  double acceptance_rate = 0;       // accepted / (accepted + flushes)
  double mean_accepted_length = 0;  // 1 + accepted / drafts
};

struct Summary {
  int sent = 0, completed = 0, failed = 0, good = 0;
  std::map<std::string, int> errors;  // status name -> count
  std::map<std::string, std::string> error_examples;  // status name -> first message
  double duration = 0;                // first start -> last end, seconds
  int64_t prompt_tokens = 0, output_tokens = 0;
  double request_throughput = 0;  // completed / duration
  double output_token_throughput = 0;
  double goodput = 0;           // good / duration
  double goodput_fraction = 0;  // good / sent
  Distribution ttft, tpot, itl, e2e;  // seconds, over successful requests
  SpecTotals spec;
  std::map<std::string, int> policies;  // successful requests by the policy that served them
  int max_in_flight = 0;
};

Summary Summarize(const std::vector<RequestRecord>& records, const Slo& slo);

// Per-second series over [0, ceil(last end)): mean requests in flight in each
// second (time-weighted) and tokens received in it.
struct TimeSeries {
  std::vector<double> in_flight;
  std::vector<double> tokens_per_second;
};
TimeSeries PerSecond(const std::vector<RequestRecord>& records);

}  // namespace specline::loadtest
