#include "loadtest/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace specline::loadtest {

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = std::clamp(q, 0.0, 1.0) * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

Distribution Describe(const std::vector<double>& values) {
  Distribution d;
  d.count = static_cast<int>(values.size());
  if (values.empty()) return d;
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  d.min = *std::min_element(values.begin(), values.end());
  d.max = *std::max_element(values.begin(), values.end());
  d.p50 = Percentile(values, 0.50);
  d.p90 = Percentile(values, 0.90);
  d.p95 = Percentile(values, 0.95);
  d.p99 = Percentile(values, 0.99);
  return d;
}

bool MeetsSlo(const RequestRecord& r, const Slo& slo) {
  if (!r.ok) return false;
  if (slo.ttft > 0 && r.ttft > slo.ttft) return false;
  if (slo.tpot > 0 && r.output_tokens >= 2 && r.tpot > slo.tpot) return false;
  return true;
}

Summary Summarize(const std::vector<RequestRecord>& records, const Slo& slo) {
  Summary s;
  s.sent = static_cast<int>(records.size());
  std::vector<double> ttft, tpot, itl, e2e;
  double first = 0, last = 0;
  bool any = false;
  // Requests in flight: +1 at start, -1 at end, swept in time order.
  std::vector<std::pair<double, int>> events;
  for (const RequestRecord& r : records) {
    if (!any || r.start < first) first = r.start;
    if (!any || r.end > last) last = r.end;
    any = true;
    events.push_back({r.start, 1});
    events.push_back({r.end, -1});
    if (!r.ok) {
      ++s.failed;
      if (s.errors[r.status_code]++ == 0) s.error_examples[r.status_code] = r.error;
      continue;
    }
    ++s.completed;
    if (MeetsSlo(r, slo)) ++s.good;
    s.prompt_tokens += r.prompt_tokens;
    s.output_tokens += r.output_tokens;
    if (r.output_tokens > 0) ttft.push_back(r.ttft);
    if (r.output_tokens >= 2) tpot.push_back(r.tpot);
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
    e2e.push_back(r.e2e);
    if (!r.policy.empty()) ++s.policies[r.policy];
    SpecTotals& t = s.spec;
    t.num_drafts += r.num_drafts;
    t.num_draft_tokens += r.num_draft_tokens;
    t.num_accepted_tokens += r.num_accepted_tokens;
    t.num_flushes += r.num_flushes;
    t.num_discarded_tokens += r.num_discarded_tokens;
    t.pipeline_cycles += r.pipeline_cycles;
    if (t.accepted_per_pos.size() < r.accepted_per_pos.size())
      t.accepted_per_pos.resize(r.accepted_per_pos.size());
    for (size_t i = 0; i < r.accepted_per_pos.size(); ++i) t.accepted_per_pos[i] += r.accepted_per_pos[i];
  }
  std::sort(events.begin(), events.end());  // ends (-1) before starts at equal times
  int in_flight = 0;
  for (const auto& e : events) s.max_in_flight = std::max(s.max_in_flight, in_flight += e.second);
  s.duration = any ? last - first : 0;
  if (s.duration > 0) {
    s.request_throughput = s.completed / s.duration;
    s.output_token_throughput = static_cast<double>(s.output_tokens) / s.duration;
    s.goodput = s.good / s.duration;
  }
  s.goodput_fraction = s.sent > 0 ? static_cast<double>(s.good) / s.sent : 0;
  s.ttft = Describe(ttft);
  s.tpot = Describe(tpot);
  s.itl = Describe(itl);
  s.e2e = Describe(e2e);
  SpecTotals& t = s.spec;
  if (t.num_accepted_tokens + t.num_flushes > 0)
    t.acceptance_rate = static_cast<double>(t.num_accepted_tokens) /
                        static_cast<double>(t.num_accepted_tokens + t.num_flushes);
  if (t.num_drafts > 0)
    t.mean_accepted_length = 1 + static_cast<double>(t.num_accepted_tokens) / t.num_drafts;
  return s;
}

TimeSeries PerSecond(const std::vector<RequestRecord>& records) {
  double last = 0;
  for (const RequestRecord& r : records) last = std::max(last, r.end);
  const size_t n = static_cast<size_t>(std::ceil(last));
  TimeSeries ts;
  ts.in_flight.assign(n, 0);
  ts.tokens_per_second.assign(n, 0);
  for (const RequestRecord& r : records) {
    for (size_t sec = static_cast<size_t>(std::max(0.0, std::floor(r.start)));
         sec < n && static_cast<double>(sec) < r.end; ++sec) {
      const double lo = std::max(r.start, static_cast<double>(sec));
      const double hi = std::min(r.end, static_cast<double>(sec + 1));
      if (hi > lo) ts.in_flight[sec] += hi - lo;
    }
    for (size_t i = 0; i < r.message_times.size(); ++i) {
      const size_t sec = static_cast<size_t>(std::max(0.0, r.message_times[i]));
      if (sec < n) ts.tokens_per_second[sec] += r.message_tokens[i];
    }
  }
  return ts;
}

}  // namespace specline::loadtest
