#include "scheduler/metrics.h"

#include <limits>
#include <string>

namespace specline::scheduler {
namespace {

// vLLM's queue/e2e buckets with finer low ones: this engine often queues a
// request for well under 300 ms.
const prometheus::Histogram::BucketBoundaries kQueueBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1, 1.5, 2, 2.5,
    5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680};
// One pipeline round trip: from a fraction of a millisecond (tiny models)
// to seconds (large prefill chunks on CPU).
const prometheus::Histogram::BucketBoundaries kStepBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1, 2.5, 5, 10};
const prometheus::Histogram::BucketBoundaries kSlotBuckets = {
    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};


}  // namespace

SchedulerMetrics::SchedulerMetrics(std::shared_ptr<prometheus::Registry> reg)
    : registry(reg ? std::move(reg) : std::make_shared<prometheus::Registry>()) {
  using namespace prometheus;
  Registry& r = *registry;
  queue_time = &BuildHistogram()
                    .Name("specline_request_queue_time_seconds")
                    .Help("Time from arrival at the scheduler to first being scheduled")
                    .Register(r)
                    .Add({}, kQueueBuckets);
  running = &BuildGauge()
                 .Name("specline_num_requests_running")
                 .Help("Requests admitted to the pipeline (prefill or decode)")
                 .Register(r)
                 .Add({});
  waiting = &BuildGauge()
                 .Name("specline_num_requests_waiting")
                 .Help("Requests queued for KV capacity")
                 .Register(r)
                 .Add({});
  prompt_tokens = &BuildCounter()
                       .Name("specline_prompt_tokens_total")
                       .Help("Prompt tokens prefilled")
                       .Register(r)
                       .Add({});
  generation_tokens = &BuildCounter()
                           .Name("specline_generation_tokens_total")
                           .Help("Tokens generated")
                           .Register(r)
                           .Add({});
  step_seconds = &BuildHistogram()
                      .Name("specline_scheduler_step_seconds")
                      .Help("Round trip of one micro-batch through every stage")
                      .Register(r)
                      .Add({}, kStepBuckets);
  batch_slots = &BuildHistogram()
                     .Name("specline_scheduler_batch_slots")
                     .Help("Slots (token positions) per micro-batch")
                     .Register(r)
                     .Add({}, kSlotBuckets);
  kv_free_tokens = &BuildGauge()
                        .Name("specline_kv_free_tokens")
                        .Help("KV positions per stage that admission may still hand out")
                        .Register(r)
                        .Add({});
  prefix_cache_queries = &BuildCounter()
                              .Name("specline_prefix_cache_queries_total")
                              .Help("Prompt tokens of requests that could use the prefix cache")
                              .Register(r)
                              .Add({});
  prefix_cache_hits = &BuildCounter()
                           .Name("specline_prefix_cache_hits_total")
                           .Help("Prompt tokens whose KV was found in the prefix cache")
                           .Register(r)
                           .Add({});
  prefix_cache_usage = &BuildGauge()
                            .Name("specline_prefix_cache_usage_perc")
                            .Help("Fraction of KV capacity held by cached prefix blocks (0-1)")
                            .Register(r)
                            .Add({});
  pipeline_up = &BuildGauge()
                     .Name("specline_pipeline_up")
                     .Help("1 when every stage answers and the pipeline runs")
                     .Register(r)
                     .Add({});
  pipeline_failures = &BuildCounter()
                           .Name("specline_pipeline_failures_total")
                           .Help("Times the pipeline went down (stage unreachable, batch error or timeout)")
                           .Register(r)
                           .Add({});
  kv_refusals = &BuildCounter()
                     .Name("specline_kv_refusals_total")
                     .Help("Requests failed alone because a stage could not apply their KV cache decision")
                     .Register(r)
                     .Add({});
  restarted_requests = &BuildCounter()
                            .Name("specline_restarted_requests_total")
                            .Help("Requests without a token yet that a pipeline failure held to run again after recovery")
                            .Register(r)
                            .Add({});
  auto counter = [&](const char* name, const char* help) {
    return &BuildCounter().Name(name).Help(help).Register(r);
  };
  spec_counters_[0] = counter("specline_spec_decode_num_drafts_total",
                              "Chains of draft tokens started (one per speculation after a verified token)");
  spec_counters_[1] = counter("specline_spec_decode_num_draft_tokens_total", "Draft tokens sent down the pipeline");
  spec_counters_[2] = counter("specline_spec_decode_num_accepted_tokens_total", "Draft tokens verified and kept");
  spec_counters_[3] =
      counter("specline_spec_decode_num_flushes_total", "Rejected drafts: pipeline flushes with KV rollback");
  spec_counters_[4] = counter("specline_spec_decode_num_discarded_tokens_total",
                              "Draft tokens voided before verification (by a flush or the end of the request)");
  spec_length_ = &BuildHistogram()
                      .Name("specline_spec_decode_equivalent_acceptance_length")
                      .Help("Per request: L'acc = n * N / K (n stages, N tokens, K pipeline cycles)")
                      .Register(r);
  accepted_per_pos_ = &BuildCounter()
                           .Name("specline_spec_decode_num_accepted_tokens_per_pos_total")
                           .Help("Accepted draft tokens by position in their chain")
                           .Register(r);
  drafts_by_source_ = counter("specline_spec_decode_num_drafts_by_source_total",
                              "Draft proposals sent, by the drafter's source (prompt_lookup, "
                              "recent_requests, token_recycling)");
  draft_tokens_by_source_ = counter("specline_spec_decode_num_draft_tokens_by_source_total",
                                    "Draft tokens sent, by the drafter's source");
  token_interval_ = &BuildGauge()
                         .Name("specline_spec_decode_token_interval_seconds")
                         .Help("Pipeline speculation: mean gap to a sequence's next token after one "
                               "decided plainly, by an accepted draft, or as a replacement")
                         .Register(r);
  break_even_ = &BuildGauge()
                     .Name("specline_spec_decode_break_even_acceptance")
                     .Help("Pipeline speculation: the acceptance above which drafting beats plain "
                           "decoding on this deployment's measured pace (above 1: never)")
                     .Register(r);
  // Series exist from the start for the built-in speculative policies, so
  // rate() over them is 0 rather than absent before the first draft.
  ForPolicy("ppsd");
  ForPolicy("spd");
}

SchedulerMetrics::Spec& SchedulerMetrics::ForPolicy(const std::string& policy) {
  std::lock_guard<std::mutex> lock(mu_);
  std::unique_ptr<Spec>& spec = spec_[policy];
  if (!spec) {
    const std::map<std::string, std::string> label = {{"policy", policy}};
    spec = std::make_unique<Spec>();
    spec->drafts = &spec_counters_[0]->Add(label);
    spec->draft_tokens = &spec_counters_[1]->Add(label);
    spec->accepted_tokens = &spec_counters_[2]->Add(label);
    spec->flushes = &spec_counters_[3]->Add(label);
    spec->discarded_tokens = &spec_counters_[4]->Add(label);
    spec->equivalent_acceptance_length = &spec_length_->Add(
        label, prometheus::Histogram::BucketBoundaries{1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 5, 6, 8, 12, 16});
    spec->policy = policy;
    spec->accepted_per_pos = accepted_per_pos_;
    spec->token_interval = token_interval_;
    spec->drafts_by_source = drafts_by_source_;
    spec->draft_tokens_by_source = draft_tokens_by_source_;
    spec->break_even_acceptance = &break_even_->Add(label);
    spec->break_even_acceptance->Set(std::numeric_limits<double>::quiet_NaN());  // not measured yet
  }
  return *spec;
}

prometheus::Counter* SchedulerMetrics::Spec::AcceptedAtPosition(int position) {
  return &accepted_per_pos->Add({{"policy", policy}, {"position", std::to_string(position)}});
}

prometheus::Counter* SchedulerMetrics::Spec::DraftsFrom(const std::string& source) {
  return &drafts_by_source->Add({{"policy", policy}, {"source", source}});
}

prometheus::Counter* SchedulerMetrics::Spec::DraftTokensFrom(const std::string& source) {
  return &draft_tokens_by_source->Add({{"policy", policy}, {"source", source}});
}

prometheus::Gauge* SchedulerMetrics::Spec::TokenInterval(const std::string& after) {
  return &token_interval->Add({{"policy", policy}, {"after", after}});
}

}  // namespace specline::scheduler
