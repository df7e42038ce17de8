// specline.v1.Generation: the public API. Each Generate call becomes one
// scheduler Submit call; tokens coming back are detokenized, cut at stop
// strings and streamed on (generation_stream.h). Synchronous gRPC: one
// handler thread per open stream, bounded by --max-concurrent-streams. The
// OpenAI HTTP API enters through StartChoices: the same admission,
// validation and stream, driven by callbacks (async_generation.h).
//
// The handlers take the requests' raw bytes and parse them here
// (request_parser.h): a malformed request gets INVALID_ARGUMENT naming the
// field, never gRPC's empty INTERNAL.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <optional>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/sync_stream.h>

#include "services/active_requests.h"
#include "services/cache_scopes.h"
#include "services/generation_sink.h"
#include "services/generation_stream.h"
#include "services/gateway_metrics.h"
#include "services/principals.h"
#include "services/request_builder.h"
#include "services/scheduler_load.h"
#include "services/token_quota.h"
#include "specline/internal/scheduler.grpc.pb.h"
#include "specline/v1/generation.grpc.pb.h"

namespace specline {

class GenerationService final : public v1::Generation::Service {
 public:
  struct Options {
    std::string model_name;  // reported by GetModelInfo (a name, never a path)
    std::optional<Principals> principals;  // none: no authentication
    int max_concurrent_streams = 256;
    int max_streams_per_principal = 0;  // 0: only the overall cap
    // Prefix-cache namespaces (--cache-share-group); the default: one
    // namespace, for a deployment without authentication.
    CacheScopes cache_scopes;
    int64_t max_tokens_per_minute_per_principal = 0;  // 0: no token quota
    // The HTTP APIs answer a request naming any model (--accept-any-model).
    bool accept_any_model = false;
  };

  GenerationService(ServedModel model, std::shared_ptr<grpc::ChannelInterface> scheduler,
                    GatewayMetrics& metrics, Options options);

  using ResponseWriter = grpc::internal::WriterInterface<v1::GenerateResponse>;
  // The typed handlers, after the raw bytes were parsed and the caller
  // authenticated as `principal`.
  grpc::Status HandleGenerate(grpc::ServerContext* ctx, const std::string& principal,
                              const v1::GenerateRequest& request, ResponseWriter* writer);
  grpc::Status HandleAbort(const std::string& principal, const v1::AbortRequest& request,
                           v1::AbortResponse* response);
  grpc::Status HandleGetModelInfo(grpc::ServerContext* ctx, v1::ModelInfo* response);

  // The HTTP API's entry: validates and admits requests like Generate and
  // starts their scheduler calls. An error before the stream starts is
  // returned (nothing was started), with `retry_after_seconds` set when a
  // quota says when to retry; on OK the sink gets the messages and then
  // exactly one OnEnd (once all choices have ended), and `call` can cancel
  // it (client gone).
  // Several requests as the choices of one response (the completions API's
  // list of prompts, each expanded by its n): choice i is `choices[i]`.
  // Every choice is validated before any starts.
  grpc::Status StartChoices(Api api, const std::string& principal,
                            const std::vector<v1::GenerateRequest>& choices,
                            std::shared_ptr<GenerationSink> sink,
                            std::shared_ptr<grpc::ClientContext>* call,
                            int64_t* retry_after_seconds);

  // The OpenAI API's request `request` would have, validated as
  // StartChoices validates it, with nothing started (max_tokens: 0).
  grpc::Status PromptTokens(const v1::GenerateRequest& request, int* tokens);
  // The same, whole: the prompt's token ids and the limits a generation
  // would get (the render endpoints, docs/routers.md).
  grpc::Status PrepareOnly(const v1::GenerateRequest& request, PreparedRequest* prepared);

  // Refuse new Generate calls (UNAVAILABLE) from now on.
  void StartDrain() { draining_ = true; }
  bool draining() const { return draining_; }
  // Whether the scheduler last said every stage is up (the gateway polls
  // it): the HTTP API's /health answers 503 until it is, and again whenever
  // the pipeline is down.
  bool pipeline_ready() const { return pipeline_ready_; }
  void set_pipeline_ready(bool ready);
  // KV positions a stage holds, from the same poll: requests are checked
  // against it before anything is streamed (0: not known yet).
  void set_kv_capacity_tokens(int64_t tokens) { kv_capacity_tokens_ = tokens; }
  int64_t kv_capacity_tokens() const { return kv_capacity_tokens_; }
  // The scheduler's whole answer to that poll (what the routers' metrics
  // and /get_server_info report).
  SchedulerLoad& scheduler_load() { return scheduler_load_; }
  const std::string& model_name() const { return options_.model_name; }
  // Streams served at once (--max-concurrent-streams).
  int max_concurrent_streams() const { return options_.max_concurrent_streams; }
  bool accept_any_model() const { return options_.accept_any_model; }
  const ServedModel& served_model() const { return model_; }
  // For failures counted outside the shared path (the HTTP API's own 4xx).
  GatewayMetrics::Series& metrics(Api api) { return metrics_.For(api); }
  const Principals* principals() const {
    return options_.principals ? &*options_.principals : nullptr;
  }
  ActiveRequests& active() { return active_; }

 private:
  // OK with the caller's principal ("" without authentication), or
  // UNAUTHENTICATED.
  grpc::Status CheckAuth(const grpc::ServerContext& ctx, std::string* principal) const;
  friend class AsyncGeneration;
  friend class ChoiceFanout;
  // The gRPC API's n > 1: the choices run as in StartChoices, written to
  // `writer` one message at a time.
  grpc::Status GenerateChoices(grpc::ServerContext* ctx, const std::string& principal,
                               const v1::GenerateRequest& request, ResponseWriter* writer);
  grpc::Status Fail(Api api, const grpc::Status& status);  // counts it, returns it
  // Validation shared by both APIs: draining, the request's fields.
  grpc::Status Prepare(Api api, const v1::GenerateRequest& request, std::string* id,
                       PreparedRequest* prepared);
  // Admission (the token quota, the stream caps, duplicate ids) and its
  // release, which returns the quota tokens the request did not use.
  // `retry_after_seconds` is set when the token quota refuses it.
  grpc::Status Admit(Api api, const std::string& principal, const std::string& id,
                     const PreparedRequest& prepared, grpc::ClientContext* upstream,
                     std::shared_ptr<ActiveRequests::Entry>* entry, int64_t* retry_after_seconds);
  void Release(Api api, const std::string& principal, const std::string& id,
               const ActiveRequests::Entry& entry, const GenerationStream& stream);
  // The scheduler refused the request with RESOURCE_EXHAUSTED (a queue or
  // KV limit): counts the rejection under the limit its `specline-limit`
  // trailing metadata names. Returns the `retry-after` seconds the
  // scheduler gave (0: none).
  int64_t SchedulerRejection(const std::string& principal, const grpc::ClientContext& call,
                             const grpc::Status& status);
  // The scheduler request, counted and logged.
  internal::SubmitRequest StartSubmit(Api api, const std::string& principal,
                                      const std::string& id, PreparedRequest& prepared);
  // The status a stream ends with once its scheduler call is over; an
  // aborted request gets its final message in `final_message`.
  grpc::Status EndStatus(Api api, GenerationStream& stream, const grpc::Status& scheduler, bool client_gone,
                         bool aborted, std::optional<v1::GenerateResponse>* final_message);
  grpc::Status Stream(grpc::ServerContext* ctx, const std::string& principal,
                      const std::string& id, PreparedRequest prepared, ResponseWriter* writer);
  // Raw handlers: authenticate, parse, then call the typed ones.
  grpc::Status GenerateRaw(grpc::ServerContext* ctx,
                           grpc::ServerSplitStreamer<grpc::ByteBuffer, v1::GenerateResponse>* stream);
  template <class Request, class Response, class Handler>
  grpc::Status UnaryRaw(grpc::ServerContext* ctx,
                        grpc::ServerUnaryStreamer<grpc::ByteBuffer, Response>* stream,
                        Handler handle);

  const ServedModel model_;
  std::unique_ptr<internal::Scheduler::Stub> scheduler_;
  GatewayMetrics& metrics_;
  const Options options_;
  ActiveRequests active_;
  TokenQuota quota_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> pipeline_ready_{false};
  std::atomic<int64_t> kv_capacity_tokens_{0};
  SchedulerLoad scheduler_load_;
};

}  // namespace specline
