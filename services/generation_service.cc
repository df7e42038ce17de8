#include "services/generation_service.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/tokenizer.h"
#include "common/cluster_secret.h"
#include "common/flag_map.h"
#include "services/async_generation.h"
#include "services/choice_fanout.h"
#include "services/request_parser.h"

namespace specline {
namespace {

// An error code the request builder attached (context_length_exceeded)
// travels as the status's details: the OpenAI API reads it from there.
grpc::Status ToGrpc(const absl::Status& s) {
  auto code = s.GetPayload(kErrorCodePayload);  // absl::optional on Debian
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()),
                      code ? std::string(*code) : std::string());
}

}  // namespace

GenerationService::GenerationService(ServedModel model, std::shared_ptr<grpc::ChannelInterface> scheduler,
                                     GatewayMetrics& metrics, Options options)
    : model_(std::move(model)),
      scheduler_(internal::Scheduler::NewStub(std::move(scheduler))),
      metrics_(metrics),
      options_(std::move(options)),
      active_(options_.max_concurrent_streams, options_.max_streams_per_principal),
      quota_(options_.max_tokens_per_minute_per_principal) {
  // Method indices follow specline/v1/generation.proto: Generate, Abort,
  // GetModelInfo. Each takes raw bytes (see the header).
  MarkMethodStreamed(0, new grpc::internal::SplitServerStreamingHandler<grpc::ByteBuffer,
                                                                      v1::GenerateResponse>(
                            [this](grpc::ServerContext* ctx, auto* stream) {
                              return GenerateRaw(ctx, stream);
                            }));
  MarkMethodStreamed(1, new grpc::internal::StreamedUnaryHandler<grpc::ByteBuffer, v1::AbortResponse>(
                            [this](grpc::ServerContext* ctx, auto* stream) {
                              return UnaryRaw<v1::AbortRequest, v1::AbortResponse>(
                                  ctx, stream,
                                  [this](const std::string& principal, grpc::ServerContext*,
                                         const v1::AbortRequest& req, v1::AbortResponse* resp) {
                                    return HandleAbort(principal, req, resp);
                                  });
                            }));
  MarkMethodStreamed(2, new grpc::internal::StreamedUnaryHandler<grpc::ByteBuffer, v1::ModelInfo>(
                            [this](grpc::ServerContext* ctx, auto* stream) {
                              return UnaryRaw<v1::ModelInfoRequest, v1::ModelInfo>(
                                  ctx, stream,
                                  [this](const std::string&, grpc::ServerContext* c,
                                         const v1::ModelInfoRequest&, v1::ModelInfo* resp) {
                                    return HandleGetModelInfo(c, resp);
                                  });
                            }));
}

grpc::Status GenerationService::CheckAuth(const grpc::ServerContext& ctx,
                                          std::string* principal) const {
  principal->clear();
  if (!options_.principals) return grpc::Status::OK;
  const auto& md = ctx.client_metadata();
  auto it = md.find("authorization");
  if (it == md.end())
    return grpc::Status(grpc::UNAUTHENTICATED, "missing 'authorization: Bearer <token>' metadata");
  std::optional<std::string> who =
      options_.principals->Authenticate(std::string_view(it->second.data(), it->second.size()));
  if (!who) return grpc::Status(grpc::UNAUTHENTICATED, "invalid bearer token");
  *principal = *std::move(who);
  return grpc::Status::OK;
}

grpc::Status GenerationService::GenerateRaw(
    grpc::ServerContext* ctx, grpc::ServerSplitStreamer<grpc::ByteBuffer, v1::GenerateResponse>* stream) {
  std::string principal;
  if (grpc::Status s = CheckAuth(*ctx, &principal); !s.ok()) return Fail(Api::kGrpc, s);
  grpc::ByteBuffer bytes;
  if (!stream->Read(&bytes)) {
    return Fail(Api::kGrpc, grpc::Status(grpc::INVALID_ARGUMENT, "request: no GenerateRequest message received"));
  }
  v1::GenerateRequest request;
  if (absl::Status st = ParseRequestBuffer(bytes, &request); !st.ok()) return Fail(Api::kGrpc, ToGrpc(st));
  return HandleGenerate(ctx, principal, request, stream);
}

template <class Request, class Response, class Handler>
grpc::Status GenerationService::UnaryRaw(grpc::ServerContext* ctx,
                                         grpc::ServerUnaryStreamer<grpc::ByteBuffer, Response>* stream,
                                         Handler handle) {
  std::string principal;
  if (grpc::Status s = CheckAuth(*ctx, &principal); !s.ok()) return s;
  grpc::ByteBuffer bytes;
  Request request;
  if (!stream->Read(&bytes)) {
    return grpc::Status(grpc::INVALID_ARGUMENT,
                        "request: no " + Request::descriptor()->full_name() + " message received");
  }
  if (absl::Status st = ParseRequestBuffer(bytes, &request); !st.ok()) return ToGrpc(st);
  Response response;
  grpc::Status s = handle(principal, ctx, request, &response);
  if (s.ok()) stream->Write(response);
  return s;
}

grpc::Status GenerationService::Fail(Api api, const grpc::Status& status) {
  metrics_.For(api).CountFailure(StatusCodeName(status.error_code()));
  return status;
}

grpc::Status GenerationService::Prepare(Api api, const v1::GenerateRequest& request, std::string* id,
                                       PreparedRequest* prepared) {
  if (draining_)
    return Fail(api, grpc::Status(grpc::UNAVAILABLE,
                             "gateway is draining for shutdown; retry on another replica"));
  RequestRules rules;
  rules.kv_capacity_tokens = kv_capacity_tokens_;
  rules.openai = api == Api::kOpenAi;
  auto result = PrepareRequest(request, model_, rules);
  if (!result.ok()) {
    spdlog::debug("req={} rejected: {}", request.request_id(), std::string(result.status().message()));
    return Fail(api, ToGrpc(result.status()));
  }
  *prepared = *std::move(result);
  // Server-made ids are unguessable; a client's own id is scoped to its
  // principal anyway (Abort never reaches another principal's request).
  *id = request.request_id();
  if (id->empty()) *id = "req-" + RandomHex(16);
  return grpc::Status::OK;
}

grpc::Status GenerationService::StartChoices(Api api, const std::string& principal,
                                             const std::vector<v1::GenerateRequest>& requests,
                                             std::shared_ptr<GenerationSink> sink,
                                             std::shared_ptr<grpc::ClientContext>* call,
                                             int64_t* retry_after_seconds) {
  *retry_after_seconds = 0;
  if (requests.empty() || static_cast<int>(requests.size()) > kMaxChoices) {
    return Fail(api, grpc::Status(grpc::INVALID_ARGUMENT,
                                  absl::StrCat("n: at most ", kMaxChoices,
                                               " choices (prompts x n) per request, got ",
                                               requests.size())));
  }
  std::vector<ChoiceFanout::Choice> choices(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    if (grpc::Status s = Prepare(api, requests[i], &choices[i].id, &choices[i].prepared); !s.ok())
      return s;
  }
  if (choices.size() == 1) {
    auto upstream = std::make_shared<grpc::ClientContext>();
    std::shared_ptr<ActiveRequests::Entry> entry;
    if (grpc::Status s = Admit(api, principal, choices[0].id, choices[0].prepared, upstream.get(),
                               &entry, retry_after_seconds);
        !s.ok()) {
      return s;
    }
    *call = upstream;
    AsyncGeneration::Start(*this, api, principal, std::move(choices[0].id),
                           std::move(choices[0].prepared), std::move(upstream), std::move(entry),
                           std::move(sink));
    return grpc::Status::OK;
  }
  auto fan = std::make_shared<ChoiceFanout>(*this, api, principal, std::move(choices), std::move(sink));
  return fan->Start(call, retry_after_seconds);
}

grpc::Status GenerationService::PromptTokens(const v1::GenerateRequest& request, int* tokens) {
  PreparedRequest prepared;
  if (grpc::Status s = PrepareOnly(request, &prepared); !s.ok()) return s;
  *tokens = prepared.submit.prompt_size();
  return grpc::Status::OK;
}

grpc::Status GenerationService::PrepareOnly(const v1::GenerateRequest& request,
                                            PreparedRequest* prepared) {
  std::string id;
  return Prepare(Api::kOpenAi, request, &id, prepared);
}

grpc::Status GenerationService::GenerateChoices(grpc::ServerContext* ctx,
                                                const std::string& principal,
                                                const v1::GenerateRequest& request,
                                                ResponseWriter* writer) {
  // The choices' messages arrive on gRPC's callback threads; this handler's
  // thread writes them (a sync writer takes one writer at a time) and
  // watches the client's cancellation.
  struct WriterSink final : GenerationSink {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<v1::GenerateResponse> pending;
    std::optional<grpc::Status> end;
    std::atomic<bool> gone{false};
    void OnMessage(const v1::GenerateResponse& m) override {
      std::lock_guard<std::mutex> lock(mu);
      pending.push_back(m);
      cv.notify_all();
    }
    void OnEnd(const grpc::Status& s, int64_t) override {
      std::lock_guard<std::mutex> lock(mu);
      end = s;
      cv.notify_all();
    }
    bool ClientGone() const override { return gone; }
  };
  auto sink = std::make_shared<WriterSink>();
  std::shared_ptr<grpc::ClientContext> call;
  int64_t retry_after = 0;
  grpc::Status started = StartChoices(Api::kGrpc, principal, ExpandChoices(request), sink, &call,
                                      &retry_after);
  if (!started.ok()) {
    if (retry_after > 0) ctx->AddTrailingMetadata("retry-after", std::to_string(retry_after));
    return started;
  }
  std::unique_lock<std::mutex> lock(sink->mu);
  while (true) {
    sink->cv.wait_for(lock, std::chrono::milliseconds(100),
                      [&] { return !sink->pending.empty() || sink->end.has_value(); });
    while (!sink->pending.empty()) {
      v1::GenerateResponse m = std::move(sink->pending.front());
      sink->pending.pop_front();
      lock.unlock();
      if (!sink->gone && !writer->Write(m)) sink->gone = true;
      lock.lock();
    }
    if (sink->end) return *sink->end;
    if (!sink->gone && ctx->IsCancelled()) sink->gone = true;
    // Choice 0's call is cancelled at once; the others notice `gone` at
    // their next event.
    if (sink->gone) call->TryCancel();
  }
}

grpc::Status GenerationService::HandleGenerate(grpc::ServerContext* ctx, const std::string& principal,
                                               const v1::GenerateRequest& request,
                                               ResponseWriter* writer) {
  if (request.n() > 1 && request.n() <= kMaxChoices) return GenerateChoices(ctx, principal, request, writer);
  std::string id;
  PreparedRequest prepared;
  if (grpc::Status s = Prepare(Api::kGrpc, request, &id, &prepared); !s.ok()) return s;
  return Stream(ctx, principal, id, std::move(prepared), writer);
}

grpc::Status GenerationService::Admit(Api api, const std::string& principal, const std::string& id,
                                      const PreparedRequest& prepared, grpc::ClientContext* upstream,
                                      std::shared_ptr<ActiveRequests::Entry>* entry,
                                      int64_t* retry_after_seconds) {
  *retry_after_seconds = 0;
  // The worst case: the gateway cannot know how many tokens it will
  // generate (Release gives back the rest).
  const int64_t charge = int64_t{prepared.submit.prompt_size()} + prepared.submit.max_tokens();
  const auto now = TokenQuota::Clock::now();
  if (TokenQuota::Decision d = quota_.Take(principal, charge, now); !d.ok) {
    metrics_.CountRejection(principal, "max-tokens-per-minute-per-principal");
    const int64_t limit = quota_.tokens_per_minute();
    if (d.retry_after_seconds == 0) {
      return Fail(api, grpc::Status(grpc::RESOURCE_EXHAUSTED, absl::StrCat(
          "gateway: the request may use ", charge, " tokens (prompt + max_tokens), more than "
          "principal '", principal, "' may use in a minute (--max-tokens-per-minute-per-principal ",
          limit, "); lower max_tokens")));
    }
    *retry_after_seconds = d.retry_after_seconds;
    return Fail(api, grpc::Status(grpc::RESOURCE_EXHAUSTED, absl::StrCat(
        "gateway: principal '", principal, "' is over its quota of ", limit,
        " tokens per minute (--max-tokens-per-minute-per-principal); this request may use ",
        charge, " (prompt + max_tokens): retry after ", d.retry_after_seconds, " s")));
  }
  auto refuse = [&](const grpc::Status& status, const char* limit) {
    quota_.Return(principal, charge, now);
    if (limit) metrics_.CountRejection(principal, limit);
    return Fail(api, status);
  };
  switch (active_.Add(principal, id, upstream, entry)) {
    case ActiveRequests::AddResult::kFull:
      return refuse(grpc::Status(grpc::RESOURCE_EXHAUSTED,
                                 absl::StrCat("gateway: ", options_.max_concurrent_streams,
                                              " streams already open (--max-concurrent-streams)")),
                    "max-concurrent-streams");
    case ActiveRequests::AddResult::kPrincipalFull:
      return refuse(grpc::Status(grpc::RESOURCE_EXHAUSTED,
                                 absl::StrCat("gateway: principal '", principal, "' has ",
                                              options_.max_streams_per_principal,
                                              " streams open (--max-streams-per-principal)")),
                    "max-streams-per-principal");
    case ActiveRequests::AddResult::kDuplicate:
      return refuse(grpc::Status(grpc::ALREADY_EXISTS,
                                 absl::StrCat("request_id: '", id, "' is already running")),
                    nullptr);
    case ActiveRequests::AddResult::kOk:
      break;
  }
  (*entry)->quota_tokens = charge;
  metrics_.For(api).running().Increment();
  metrics_.CountPrincipalRequest(principal, prepared.submit.prompt_size());
  return grpc::Status::OK;
}

void GenerationService::Release(Api api, const std::string& principal, const std::string& id,
                                const ActiveRequests::Entry& entry,
                                const GenerationStream& stream) {
  const int64_t used = int64_t{stream.prompt_tokens()} + stream.completion_tokens();
  quota_.Return(principal, entry.quota_tokens - used, TokenQuota::Clock::now());
  metrics_.CountPrincipalGenerated(principal, stream.completion_tokens());
  metrics_.CountPrincipalDraftTokens(principal, stream.draft_tokens_by_source());
  active_.Remove(principal, id);
  metrics_.For(api).running().Decrement();
}

int64_t GenerationService::SchedulerRejection(const std::string& principal,
                                              const grpc::ClientContext& call,
                                              const grpc::Status& status) {
  if (status.error_code() != grpc::RESOURCE_EXHAUSTED) return 0;
  const auto& trailers = call.GetServerTrailingMetadata();
  auto value = [&](const char* key) -> std::string {
    auto it = trailers.find(key);
    return it == trailers.end() ? std::string() : std::string(it->second.data(), it->second.size());
  };
  const std::string limit = value("specline-limit");
  metrics_.CountRejection(principal, limit.empty() ? "scheduler" : limit);
  int64_t seconds = 0;
  const std::string retry = value("retry-after");
  if (!retry.empty() && !ParseNumber("retry-after", retry, &seconds).ok()) seconds = 0;
  return seconds;
}

internal::SubmitRequest GenerationService::StartSubmit(Api api, const std::string& principal,
                                                       const std::string& id,
                                                       PreparedRequest& prepared) {
  internal::SubmitRequest submit = std::move(prepared.submit);
  submit.set_request_id(id);
  submit.set_tenant(principal);
  submit.set_cache_scope(options_.cache_scopes.Scope(principal, prepared.cache_salt));
  metrics_.For(api).prompt_tokens().Increment(submit.prompt_size());
  spdlog::info("req={} start prompt_tokens={} max_tokens={} temperature={} seed={}", id,
               submit.prompt_size(), submit.max_tokens(), submit.sampling().temperature(),
               submit.sampling().seed());
  return submit;
}

grpc::Status GenerationService::EndStatus(Api api, GenerationStream& stream, const grpc::Status& scheduler,
                                          bool client_gone, bool aborted,
                                          std::optional<v1::GenerateResponse>* final_message) {
  if (stream.finished()) {
    return client_gone ? Fail(api, grpc::Status(grpc::CANCELLED, "client went away")) : grpc::Status::OK;
  }
  if (aborted) {
    *final_message = stream.AbortMessage();
    return grpc::Status::OK;
  }
  if (client_gone) {
    spdlog::info("req={} cancelled by the client after {} tokens", stream.id(),
                 stream.completion_tokens());
    return Fail(api, grpc::Status(grpc::CANCELLED, "cancelled by the client"));
  }
  grpc::Status status;
  if (scheduler.ok()) {
    status = grpc::Status(grpc::INTERNAL, "scheduler ended the stream without a finish reason");
  } else if (scheduler.error_code() == grpc::DEADLINE_EXCEEDED) {
    status = grpc::Status(grpc::DEADLINE_EXCEEDED,
                          absl::StrCat("deadline exceeded after ", stream.completion_tokens(), " tokens"));
  } else {
    status = grpc::Status(scheduler.error_code(), "scheduler: " + scheduler.error_message());
  }
  spdlog::warn("req={} failed after {} tokens: {} {}", stream.id(), stream.completion_tokens(),
               StatusCodeName(status.error_code()), status.error_message());
  return Fail(api, status);
}

grpc::Status GenerationService::Stream(grpc::ServerContext* ctx, const std::string& principal,
                                       const std::string& id, PreparedRequest prepared,
                                       ResponseWriter* writer) {
  const GenerationStream::Clock::time_point t0 = GenerationStream::Clock::now();
  // A child call: the client's deadline and cancellation propagate to the
  // scheduler, which frees the request's KV when its call ends.
  std::unique_ptr<grpc::ClientContext> upstream = grpc::ClientContext::FromServerContext(*ctx);
  std::shared_ptr<ActiveRequests::Entry> entry;
  GenerationStream stream(model_, metrics_.For(Api::kGrpc), id, prepared, t0);
  int64_t retry_after = 0;
  if (grpc::Status s = Admit(Api::kGrpc, principal, id, prepared, upstream.get(), &entry,
                             &retry_after);
      !s.ok()) {
    if (retry_after > 0) ctx->AddTrailingMetadata("retry-after", std::to_string(retry_after));
    return s;
  }
  struct Cleanup {
    GenerationService* self;
    const std::string& principal;
    const std::string& id;
    const ActiveRequests::Entry& entry;
    const GenerationStream& stream;
    ~Cleanup() { self->Release(Api::kGrpc, principal, id, entry, stream); }
  } cleanup{this, principal, id, *entry, stream};

  const internal::SubmitRequest submit = StartSubmit(Api::kGrpc, principal, id, prepared);
  auto reader = scheduler_->Submit(upstream.get(), submit);
  internal::SubmitEvent event;
  bool client_gone = false;
  while (reader->Read(&event)) {
    GenerationStream::Step step = stream.OnEvent(event);
    if (step.message && !writer->Write(*step.message)) {
      client_gone = true;
      upstream->TryCancel();
      break;
    }
    if (step.last) {
      // A stop string ends the request here: cancel so the scheduler frees the KV.
      if (step.stopped) upstream->TryCancel();
      break;
    }
  }
  // Drain whatever is left after a cancel, then collect the status.
  while (stream.finished() && reader->Read(&event)) {
  }
  const grpc::Status status = reader->Finish();
  if (const int64_t seconds = SchedulerRejection(principal, *upstream, status); seconds > 0) {
    ctx->AddTrailingMetadata("retry-after", std::to_string(seconds));
  }
  std::optional<v1::GenerateResponse> final_message;
  grpc::Status end =
      EndStatus(Api::kGrpc, stream, status, client_gone || (!stream.finished() && ctx->IsCancelled()),
                entry->aborted, &final_message);
  if (final_message) writer->Write(*final_message);
  return end;
}

grpc::Status GenerationService::HandleAbort(const std::string& principal, const v1::AbortRequest& request,
                                            v1::AbortResponse* response) {
  if (request.request_id().empty())
    return grpc::Status(grpc::INVALID_ARGUMENT, "request_id: is empty");
  // Only the principal's own requests: another's id is simply not found.
  const bool found = active_.Abort(principal, request.request_id());
  spdlog::info("req={} abort requested (found={})", request.request_id(), found);
  response->set_found(found);
  return grpc::Status::OK;
}

void GenerationService::set_pipeline_ready(bool ready) {
  if (ready != pipeline_ready_.exchange(ready))
    spdlog::info("gateway: pipeline {}", ready ? "ready" : "not ready (HTTP /health answers 503)");
}

grpc::Status GenerationService::HandleGetModelInfo(grpc::ServerContext* ctx, v1::ModelInfo* info) {
  auto upstream = grpc::ClientContext::FromServerContext(*ctx);
  const auto limit = std::chrono::system_clock::now() + std::chrono::seconds(5);
  if (upstream->deadline() > limit) upstream->set_deadline(limit);
  internal::ModelSummary summary;
  grpc::Status s = scheduler_->GetModel(upstream.get(), internal::ModelRequest(), &summary);
  if (!s.ok()) return grpc::Status(s.error_code(), "scheduler: " + s.error_message());
  info->set_model(options_.model_name);
  info->set_arch(summary.arch());
  info->set_vocab_size(summary.vocab_size());
  info->set_context_length(summary.context_length());
  info->set_n_layers(summary.n_layers());
  info->set_n_stages(summary.n_stages());
  for (int p : summary.policies()) info->add_policies(static_cast<v1::DecodingPolicy>(p));
  info->set_default_policy(summary.default_policy());
  info->set_default_max_tokens(model_.default_max_tokens);
  info->set_has_chat_template(model_.chat_template.has_value() && model_.tokenizer);
  info->set_bos_id(model_.tokenizer ? model_.tokenizer->bos_id() : -1);
  info->set_eos_id(model_.tokenizer ? model_.tokenizer->eos_id() : -1);
  return grpc::Status::OK;
}

}  // namespace specline
