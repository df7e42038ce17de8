#include "services/gateway_metrics.h"

#include <stdexcept>

namespace specline {
namespace {

using prometheus::Histogram;


// vLLM's buckets with finer low ones in front (docs/metrics.md).
const Histogram::BucketBoundaries kTtftBuckets = {
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0,    2.5,   5.0,   7.5,   10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
const Histogram::BucketBoundaries kTokenGapBuckets = {
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
    0.4,    0.5,   0.75,  1.0,   2.5,  5.0,   7.5,  10.0,  20.0, 40.0, 80.0};
const Histogram::BucketBoundaries kRequestBuckets = {
    0.01, 0.025, 0.05, 0.1,  0.2,  0.3,  0.5,  0.8,   1.0,   1.5,   2.0,   2.5,   5.0,   10.0,
    15.0, 20.0,  30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
// Queue time can be far below e2e on an idle server: finer still.
const Histogram::BucketBoundaries kQueueBuckets = {
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1,  0.2,  0.3,   0.5,   0.8,   1.0,
    1.5,    2.0,    2.5,   5.0,   10.0, 15.0,  20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0,  960.0,  1920.0, 7680.0};

}  // namespace

GatewayMetrics::GatewayMetrics(bool per_principal)
    : registry_(std::make_shared<prometheus::Registry>()) {
  auto& r = *registry_;
  auto histogram = [&](const char* name, const char* help) -> prometheus::Family<Histogram>& {
    return prometheus::BuildHistogram().Name(name).Help(help).Register(r);
  };
  auto counter = [&](const char* name, const char* help) -> prometheus::Family<prometheus::Counter>& {
    return prometheus::BuildCounter().Name(name).Help(help).Register(r);
  };
  auto& ttft = histogram("specline_time_to_first_token_seconds",
                         "Request received to first token sent, in seconds.");
  auto& itl = histogram("specline_inter_token_latency_seconds",
                        "Gap between streamed messages divided by the tokens in the later "
                        "message, observed once per token, in seconds.");
  auto& tpot = histogram("specline_request_time_per_output_token_seconds",
                         "Per request (e2e - ttft) / (completion tokens - 1), in seconds.");
  auto& e2e = histogram("specline_e2e_request_latency_seconds",
                        "Request received to last message sent, successful requests, in seconds.");
  auto& queue = histogram("specline_request_queue_time_seconds",
                          "Time a request waited in the scheduler queue, in seconds.");
  auto& prompt = counter("specline_prompt_tokens_total",
                         "Prompt tokens of requests admitted to the scheduler.");
  auto& generation = counter("specline_generation_tokens_total", "Generated tokens streamed to clients.");
  auto& running = prometheus::BuildGauge()
                      .Name("specline_num_requests_running")
                      .Help("Generate streams open at the gateway.")
                      .Register(r);
  auto& success = counter("specline_request_success_total",
                          "Requests that finished normally, by finish reason.");
  auto& failure = counter("specline_request_failure_total",
                          "Requests that ended with an error, by gRPC status code.");
  for (auto [series, name] : {std::pair{&grpc_, "grpc"}, std::pair{&openai_, "openai"}}) {
    const prometheus::Labels api = {{"api", name}};
    series->api_ = name;
    series->ttft_ = &ttft.Add(api, kTtftBuckets);
    series->itl_ = &itl.Add(api, kTokenGapBuckets);
    series->tpot_ = &tpot.Add(api, kTokenGapBuckets);
    series->e2e_ = &e2e.Add(api, kRequestBuckets);
    series->queue_ = &queue.Add(api, kQueueBuckets);
    series->prompt_tokens_ = &prompt.Add(api);
    series->generation_tokens_ = &generation.Add(api);
    series->running_ = &running.Add(api);
    series->success_ = &success;
    series->failure_ = &failure;
    // The common series up front, so dashboards see zeros, not gaps.
    for (const char* reason : {"stop", "length", "abort"})
      success.Add({{"api", name}, {"finished_reason", reason}});
  }
  rejections_ = &counter("specline_request_rejections_total",
                         "Requests refused by a limit, by the flag that set it (limit).");
  if (!per_principal) return;
  principal_requests_ = &counter("specline_principal_requests_total",
                                 "Requests sent to the scheduler, by principal.");
  principal_prompt_tokens_ = &counter("specline_principal_prompt_tokens_total",
                                      "Prompt tokens of requests sent to the scheduler, by principal.");
  principal_generation_tokens_ = &counter(
      "specline_principal_generation_tokens_total",
      "Tokens generated for a principal's requests, counted when each request ends.");
  principal_rejections_ = &counter("specline_principal_rejections_total",
                                   "Requests refused by a limit, by principal and limit.");
  principal_draft_tokens_ = &counter(
      "specline_principal_draft_tokens_total",
      "Draft tokens sent for a principal's requests by drafter source, counted when each ends.");
}

void GatewayMetrics::CountPrincipalRequest(const std::string& principal, int prompt_tokens) {
  if (!principal_requests_) return;
  principal_requests_->Add({{"principal", principal}}).Increment();
  principal_prompt_tokens_->Add({{"principal", principal}}).Increment(prompt_tokens);
}

void GatewayMetrics::CountPrincipalGenerated(const std::string& principal, int completion_tokens) {
  if (!principal_generation_tokens_) return;
  principal_generation_tokens_->Add({{"principal", principal}}).Increment(completion_tokens);
}

void GatewayMetrics::CountPrincipalDraftTokens(const std::string& principal,
                                               const std::map<std::string, int64_t>& by_source) {
  if (!principal_draft_tokens_) return;
  for (const auto& [source, n] : by_source) {
    principal_draft_tokens_->Add({{"principal", principal}, {"source", source}})
        .Increment(static_cast<double>(n));
  }
}

void GatewayMetrics::CountRejection(const std::string& principal, const std::string& limit) {
  rejections_->Add({{"limit", limit}}).Increment();
  if (principal_rejections_) {
    principal_rejections_->Add({{"principal", principal}, {"limit", limit}}).Increment();
  }
}

void GatewayMetrics::Expose(const std::string& host, int port) {
  server_ = std::make_unique<MetricsServer>(host, port);
  server_->Register(registry_);
  port_ = server_->port();
}

void GatewayMetrics::Series::CountSuccess(const std::string& finished_reason) {
  success_->Add({{"api", api_}, {"finished_reason", finished_reason}}).Increment();
}

void GatewayMetrics::Series::CountFailure(const std::string& code) {
  failure_->Add({{"api", api_}, {"code", code}}).Increment();
}

}  // namespace specline
