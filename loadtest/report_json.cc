#include <fstream>
#include <stdexcept>

#include "loadtest/report.h"

namespace specline::loadtest {
namespace {

using nlohmann::json;

// Distributions in milliseconds.
json Ms(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean * 1e3}, {"min", d.min * 1e3}, {"max", d.max * 1e3},
          {"p50", d.p50 * 1e3},   {"p90", d.p90 * 1e3},   {"p95", d.p95 * 1e3}, {"p99", d.p99 * 1e3}};
}

json SummaryJson(const Summary& s) {
  json errors = json::object();
  for (const auto& [code, n] : s.errors) errors[code] = n;
  return {{"sent", s.sent},
          {"completed", s.completed},
          {"failed", s.failed},
          {"good", s.good},
          {"errors", errors},
          {"error_examples", s.error_examples},
          {"duration_s", s.duration},
          {"max_in_flight", s.max_in_flight},
          {"prompt_tokens", s.prompt_tokens},
          {"output_tokens", s.output_tokens},
          {"request_throughput", s.request_throughput},
          {"output_token_throughput", s.output_token_throughput},
          {"goodput", s.goodput},
          {"goodput_fraction", s.goodput_fraction},
          {"ttft_ms", Ms(s.ttft)},
          {"tpot_ms", Ms(s.tpot)},
          {"itl_ms", Ms(s.itl)},
          {"e2e_ms", Ms(s.e2e)},
          {"policies", s.policies},
          {"spec_decode",
           {{"num_drafts", s.spec.num_drafts},
            {"num_draft_tokens", s.spec.num_draft_tokens},
            {"num_accepted_tokens", s.spec.num_accepted_tokens},
            {"num_flushes", s.spec.num_flushes},
            {"num_discarded_tokens", s.spec.num_discarded_tokens},
            {"pipeline_cycles", s.spec.pipeline_cycles},
            {"num_accepted_tokens_per_pos", s.spec.accepted_per_pos},
            {"acceptance_rate", s.spec.acceptance_rate},
            {"mean_accepted_length", s.spec.mean_accepted_length}}}};
}

json RecordJson(const RequestRecord& r) {
  std::vector<double> itl_ms;
  for (double v : r.itl) itl_ms.push_back(v * 1e3);
  return {{"index", r.index},
          {"scheduled_s", r.scheduled},
          {"start_s", r.start},
          {"end_s", r.end},
          {"ok", r.ok},
          {"status", r.status_code},
          {"error", r.error},
          {"finish_reason", r.finish_reason},
          {"policy", r.policy},
          {"prompt_tokens", r.prompt_tokens},
          {"output_tokens", r.output_tokens},
          {"messages", r.message_times.size()},
          {"ttft_ms", r.ttft * 1e3},
          {"tpot_ms", r.tpot * 1e3},
          {"e2e_ms", r.e2e * 1e3},
          {"itl_ms", itl_ms},
          {"spec_decode",
           {{"num_drafts", r.num_drafts},
            {"num_draft_tokens", r.num_draft_tokens},
            {"num_accepted_tokens", r.num_accepted_tokens},
            {"num_flushes", r.num_flushes}}}};
}

}  // namespace

json ToJson(const Report& report) {
  json runs = json::array();
  for (const RunReport& run : report.runs) {
    json records = json::array();
    for (const RequestRecord& r : run.records) records.push_back(RecordJson(r));
    runs.push_back({{"label", run.label},
                    {"offered_rate", run.offered_rate},
                    {"concurrency", run.concurrency},
                    {"summary", SummaryJson(run.summary)},
                    {"timeseries",
                     {{"in_flight", run.series.in_flight},
                      {"tokens_per_second", run.series.tokens_per_second}}},
                    {"requests", records}});
  }
  json out = {{"config", report.config},
              {"slo", {{"ttft_ms", report.slo.ttft * 1e3}, {"tpot_ms", report.slo.tpot * 1e3}}},
              {"runs", runs}};
  if (report.searched)
    out["find_max"] = {{"max_rate", report.search.max_rate},
                       {"rates", report.search.rates},
                       {"attainments", report.search.attainments}};
  return out;
}

void WriteJson(const std::string& path, const Report& report) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write " + path);
  f << ToJson(report).dump(2) << "\n";
}

}  // namespace specline::loadtest
