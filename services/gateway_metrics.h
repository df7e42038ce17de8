// The gateway's Prometheus metrics (docs/metrics.md defines each one).
// Names follow vLLM's with a specline_ prefix; buckets are vLLM's plus finer
// low buckets, because a CPU engine on a small model answers in milliseconds.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/exposer.h>

#include "common/metrics_server.h"
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace specline {

// The API a request came through: every request series carries it as the
// `api` label ("grpc" or "openai"), so dashboards sum over it or split by it.
enum class Api { kGrpc, kOpenAi };

class GatewayMetrics {
 public:
  // per_principal: also count requests, tokens and rejections by principal
  // (--metrics-per-principal), a label as many-valued as the token file.
  explicit GatewayMetrics(bool per_principal = false);

  // Serves /metrics on host:port (port 0 picks one; see port()).
  void Expose(const std::string& host, int port);
  int port() const { return port_; }
  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // One API's series.
  class Series {
   public:
    prometheus::Histogram& ttft() { return *ttft_; }
    prometheus::Histogram& itl() { return *itl_; }
    prometheus::Histogram& tpot() { return *tpot_; }
    prometheus::Histogram& e2e() { return *e2e_; }
    prometheus::Histogram& queue() { return *queue_; }
    prometheus::Counter& prompt_tokens() { return *prompt_tokens_; }
    prometheus::Counter& generation_tokens() { return *generation_tokens_; }
    prometheus::Gauge& running() { return *running_; }
    // finished_reason: "stop", "length", "abort".
    void CountSuccess(const std::string& finished_reason);
    // code: the gRPC status name, e.g. "INVALID_ARGUMENT".
    void CountFailure(const std::string& code);

   private:
    friend class GatewayMetrics;
    std::string api_;
    prometheus::Histogram* ttft_;
    prometheus::Histogram* itl_;
    prometheus::Histogram* tpot_;
    prometheus::Histogram* e2e_;
    prometheus::Histogram* queue_;
    prometheus::Counter* prompt_tokens_;
    prometheus::Counter* generation_tokens_;
    prometheus::Gauge* running_;
    prometheus::Family<prometheus::Counter>* success_;
    prometheus::Family<prometheus::Counter>* failure_;
  };
  Series& For(Api api) { return api == Api::kGrpc ? grpc_ : openai_; }

  // Per principal (only with per_principal; no-ops otherwise): a request
  // the gateway sent to the scheduler and its prompt tokens, and the
  // tokens it generated, counted when it ends.
  void CountPrincipalRequest(const std::string& principal, int prompt_tokens);
  void CountPrincipalGenerated(const std::string& principal, int completion_tokens);
  // The draft tokens a principal's ended request sent, by drafter source
  // (the scheduler counts them without a principal label).
  void CountPrincipalDraftTokens(const std::string& principal,
                                 const std::map<std::string, int64_t>& by_source);
  // A request refused by a limit; `limit` is the flag that set it
  // ("max-tokens-per-minute-per-principal", "max-kv-blocks-per-tenant",
  // ...). Counted by limit always, and by principal with per_principal.
  void CountRejection(const std::string& principal, const std::string& limit);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* rejections_;
  // Null unless per_principal.
  prometheus::Family<prometheus::Counter>* principal_requests_ = nullptr;
  prometheus::Family<prometheus::Counter>* principal_prompt_tokens_ = nullptr;
  prometheus::Family<prometheus::Counter>* principal_generation_tokens_ = nullptr;
  prometheus::Family<prometheus::Counter>* principal_rejections_ = nullptr;
  prometheus::Family<prometheus::Counter>* principal_draft_tokens_ = nullptr;
  std::unique_ptr<MetricsServer> server_;
  int port_ = 0;
  Series grpc_, openai_;
};

}  // namespace specline
