#include <cstdio>

#include "loadtest/report.h"

namespace specline::loadtest {
namespace {

void Row(std::ostream& out, const char* name, const Distribution& d) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %-6s %9.2f %9.2f %9.2f %9.2f %9.2f %9.2f %7d\n", name,
                d.mean * 1e3, d.p50 * 1e3, d.p90 * 1e3, d.p95 * 1e3, d.p99 * 1e3, d.max * 1e3,
                d.count);
  out << buf;
}

}  // namespace

void PrintTable(std::ostream& out, const Report& report) {
  char buf[512];
  for (const RunReport& run : report.runs) {
    const Summary& s = run.summary;
    out << "== " << run.label << " ==\n";
    std::snprintf(buf, sizeof buf,
                  "  requests %d sent, %d ok, %d failed in %.2f s; max in flight %d\n"
                  "  throughput %.2f req/s, %.1f output tok/s; goodput %.2f req/s (%.1f%% of "
                  "requests met the SLOs)\n",
                  s.sent, s.completed, s.failed, s.duration, s.max_in_flight, s.request_throughput,
                  s.output_token_throughput, s.goodput, 100 * s.goodput_fraction);
    out << buf;
    out << "  (ms)       mean       p50       p90       p95       p99       max   count\n";
    Row(out, "TTFT", s.ttft);
    Row(out, "TPOT", s.tpot);
    Row(out, "ITL", s.itl);
    Row(out, "e2e", s.e2e);
    if (!s.policies.empty()) {
      out << "  served by";
      for (const auto& [policy, n] : s.policies) out << " " << policy << " (" << n << ")";
      out << "\n";
    }
    for (const auto& [code, n] : s.errors)
      out << "  error " << code << ": " << n << " (e.g. \"" << s.error_examples.at(code) << "\")\n";
    if (s.spec.num_draft_tokens > 0) {
      std::snprintf(buf, sizeof buf,
                    "  speculation: %lld drafts, %lld draft tokens, %lld accepted, %lld flushes, "
                    "acceptance %.3f, mean accepted length %.2f\n",
                    static_cast<long long>(s.spec.num_drafts),
                    static_cast<long long>(s.spec.num_draft_tokens),
                    static_cast<long long>(s.spec.num_accepted_tokens),
                    static_cast<long long>(s.spec.num_flushes), s.spec.acceptance_rate,
                    s.spec.mean_accepted_length);
      out << buf;
    }
  }
  if (report.searched) {
    std::snprintf(buf, sizeof buf, "highest rate meeting the SLOs: %.3f req/s\n", report.search.max_rate);
    out << buf;
  }
}

}  // namespace specline::loadtest
