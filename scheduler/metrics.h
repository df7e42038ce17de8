// Prometheus metrics of the scheduler (names follow vLLM's with a specline_
// prefix; see /work/shared/REFERENCES.md "Serving conventions"). The engine
// updates them; main() exposes the registry on /metrics.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace specline::scheduler {

struct SchedulerMetrics {
  explicit SchedulerMetrics(std::shared_ptr<prometheus::Registry> registry = nullptr);

  std::shared_ptr<prometheus::Registry> registry;
  prometheus::Histogram* queue_time;   // arrival -> first scheduled (s)
  prometheus::Gauge* running;
  prometheus::Gauge* waiting;
  prometheus::Counter* prompt_tokens;
  prometheus::Counter* generation_tokens;
  prometheus::Histogram* step_seconds;  // batch round trip through the pipeline
  prometheus::Histogram* batch_slots;
  prometheus::Gauge* kv_free_tokens;
  // Automatic prefix caching, in prompt tokens, as vLLM counts it:
  // queried (prompts that could use the cache) and found cached; and the
  // share of KV capacity held by cached prefix blocks.
  prometheus::Counter* prefix_cache_queries;
  prometheus::Counter* prefix_cache_hits;
  prometheus::Gauge* prefix_cache_usage;
  prometheus::Gauge* pipeline_up;
  prometheus::Counter* pipeline_failures;
  // Requests failed alone because a stage refused their KV log entry (its
  // cache and the scheduler's view disagreed); should stay 0.
  prometheus::Counter* kv_refusals;
  // Requests a pipeline failure caught before their first token, queued to
  // run again once the pipeline is back (EngineOptions::retry_window).
  prometheus::Counter* restarted_requests;

  // Speculative decoding (vLLM's spec_decode counters, plus the pipeline's
  // own: flushes, discarded drafts, L'acc per request), one set per
  // decoding policy (label policy="ppsd" | "spd") so dashboards compare them.
  struct Spec {
    prometheus::Counter* drafts;            // chains of drafts started
    prometheus::Counter* draft_tokens;      // drafts sent down the pipeline
    prometheus::Counter* accepted_tokens;
    prometheus::Counter* flushes;           // rejections
    prometheus::Counter* discarded_tokens;  // drafts voided unverified
    prometheus::Histogram* equivalent_acceptance_length;  // n * N / K per request
    // Accepted drafts by position in their chain (0 = the first draft).
    prometheus::Counter* AcceptedAtPosition(int position);
    // Pipeline speculation's measured pace (policies/draft_pace.h): the
    // mean gap to a sequence's next token after one decided as `after`
    // (plain, accepted, replacement), and the acceptance drafting needs.
    prometheus::Gauge* TokenInterval(const std::string& after);
    prometheus::Gauge* break_even_acceptance;
    // Proposals sent and their draft tokens by the drafter's source
    // (prompt_lookup, recent_requests, token_recycling). No principal
    // label: the scheduler counts every scope together.
    prometheus::Counter* DraftsFrom(const std::string& source);
    prometheus::Counter* DraftTokensFrom(const std::string& source);

    std::string policy;
    prometheus::Family<prometheus::Counter>* drafts_by_source;
    prometheus::Family<prometheus::Counter>* draft_tokens_by_source;
    prometheus::Family<prometheus::Counter>* accepted_per_pos;
    prometheus::Family<prometheus::Gauge>* token_interval;
  };
  // The policy's set, created on first use; `policy` is its label value.
  Spec& ForPolicy(const std::string& policy);

 private:
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Spec>> spec_;
  prometheus::Family<prometheus::Counter>* accepted_per_pos_;
  prometheus::Family<prometheus::Counter>* drafts_by_source_;
  prometheus::Family<prometheus::Counter>* draft_tokens_by_source_;
  prometheus::Family<prometheus::Counter>* spec_counters_[5];
  prometheus::Family<prometheus::Histogram>* spec_length_;
  prometheus::Family<prometheus::Gauge>* token_interval_;
  prometheus::Family<prometheus::Gauge>* break_even_;
};

}  // namespace specline::scheduler
