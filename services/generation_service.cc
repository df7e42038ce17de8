#include "services/generation_service.h"

#include <unistd.h>

#include <chrono>

#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/tokenizer.h"
#include "common/cluster_secret.h"
#include "services/request_parser.h"
#include "services/stop_matcher.h"

namespace specline {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::OK: return "OK";
    case grpc::CANCELLED: return "CANCELLED";
    case grpc::UNKNOWN: return "UNKNOWN";
    case grpc::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::NOT_FOUND: return "NOT_FOUND";
    case grpc::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::ABORTED: return "ABORTED";
    case grpc::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::INTERNAL: return "INTERNAL";
    case grpc::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::DATA_LOSS: return "DATA_LOSS";
    case grpc::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

const char* ReasonLabel(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_STOP: return "stop";
    case v1::FINISH_REASON_LENGTH: return "length";
    case v1::FINISH_REASON_ABORT: return "abort";
    default: return "unknown";
  }
}

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

}  // namespace

GenerationService::GenerationService(ServedModel model, std::shared_ptr<grpc::ChannelInterface> scheduler,
                                     GatewayMetrics& metrics, Options options)
    : model_(std::move(model)),
      scheduler_(internal::Scheduler::NewStub(std::move(scheduler))),
      metrics_(metrics),
      options_(std::move(options)),
      active_(options_.max_concurrent_streams, options_.max_streams_per_principal) {
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
                                    return Abort(principal, req, resp);
                                  });
                            }));
  MarkMethodStreamed(2, new grpc::internal::StreamedUnaryHandler<grpc::ByteBuffer, v1::ModelInfo>(
                            [this](grpc::ServerContext* ctx, auto* stream) {
                              return UnaryRaw<v1::ModelInfoRequest, v1::ModelInfo>(
                                  ctx, stream,
                                  [this](const std::string&, grpc::ServerContext* c,
                                         const v1::ModelInfoRequest&, v1::ModelInfo* resp) {
                                    return GetModelInfo(c, resp);
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
  if (grpc::Status s = CheckAuth(*ctx, &principal); !s.ok()) return Fail(s);
  grpc::ByteBuffer bytes;
  if (!stream->Read(&bytes)) {
    return Fail(grpc::Status(grpc::INVALID_ARGUMENT, "request: no GenerateRequest message received"));
  }
  v1::GenerateRequest request;
  if (absl::Status st = ParseRequestBuffer(bytes, &request); !st.ok()) return Fail(ToGrpc(st));
  return Generate(ctx, principal, request, stream);
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

grpc::Status GenerationService::Fail(const grpc::Status& status) {
  metrics_.CountFailure(CodeName(status.error_code()));
  return status;
}

grpc::Status GenerationService::Generate(grpc::ServerContext* ctx, const std::string& principal,
                                         const v1::GenerateRequest& request,
                                         ResponseWriter* writer) {
  if (draining_)
    return Fail(grpc::Status(grpc::UNAVAILABLE,
                             "gateway is draining for shutdown; retry on another replica"));
  auto prepared = PrepareRequest(request, model_);
  if (!prepared.ok()) {
    spdlog::debug("req={} rejected: {}", request.request_id(), std::string(prepared.status().message()));
    return Fail(ToGrpc(prepared.status()));
  }
  // Server-made ids are unguessable; a client's own id is scoped to its
  // principal anyway (Abort never reaches another principal's request).
  std::string id = request.request_id();
  if (id.empty()) id = "req-" + RandomHex(16);
  return Stream(ctx, principal, id, *std::move(prepared), writer);
}

grpc::Status GenerationService::Stream(grpc::ServerContext* ctx, const std::string& principal,
                                       const std::string& id, PreparedRequest prepared,
                                       ResponseWriter* writer) {
  const Clock::time_point t0 = Clock::now();
  // A child call: the client's deadline and cancellation propagate to the
  // scheduler, which frees the request's KV when its call ends.
  std::unique_ptr<grpc::ClientContext> upstream = grpc::ClientContext::FromServerContext(*ctx);
  std::shared_ptr<ActiveRequests::Entry> entry;
  switch (active_.Add(principal, id, upstream.get(), &entry)) {
    case ActiveRequests::AddResult::kFull:
      return Fail(grpc::Status(grpc::RESOURCE_EXHAUSTED,
                               absl::StrCat("gateway: ", options_.max_concurrent_streams,
                                            " streams already open (--max-concurrent-streams)")));
    case ActiveRequests::AddResult::kPrincipalFull:
      return Fail(grpc::Status(grpc::RESOURCE_EXHAUSTED,
                               absl::StrCat("gateway: principal '", principal, "' has ",
                                            options_.max_streams_per_principal,
                                            " streams open (--max-streams-per-principal)")));
    case ActiveRequests::AddResult::kDuplicate:
      return Fail(grpc::Status(grpc::ALREADY_EXISTS,
                               absl::StrCat("request_id: '", id, "' is already running")));
    case ActiveRequests::AddResult::kOk:
      break;
  }
  metrics_.running().Increment();
  struct Cleanup {
    GenerationService* self;
    const std::string& principal;
    const std::string& id;
    ~Cleanup() {
      self->active_.Remove(principal, id);
      self->metrics_.running().Decrement();
    }
  } cleanup{this, principal, id};

  internal::SubmitRequest& submit = prepared.submit;
  submit.set_request_id(id);
  const int prompt_tokens = submit.prompt_size();
  metrics_.prompt_tokens().Increment(prompt_tokens);
  spdlog::info("req={} start prompt_tokens={} max_tokens={} temperature={} seed={}", id,
               prompt_tokens, submit.max_tokens(), submit.sampling().temperature(),
               submit.sampling().seed());

  auto reader = scheduler_->Submit(upstream.get(), submit);
  std::optional<IncrementalDetokenizer> detok;
  if (model_.tokenizer) detok.emplace(*model_.tokenizer, prepared.detok_prev);
  const int32_t tok_vocab = model_.tokenizer ? model_.tokenizer->vocab_size() : 0;
  StopMatcher stops(prepared.stop_strings);

  internal::SubmitEvent event;
  int completion = 0;
  double queue_seconds = 0;
  bool first_event = true;
  Clock::time_point first_token_time{}, last_message_time{};
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  bool client_gone = false;

  // Fills the last message's finish reason, usage and timings and records
  // the request's metrics.
  auto finish_message = [&](v1::GenerateResponse* resp, Clock::time_point now) {
    const double e2e = Seconds(t0, now);
    const double ttft = completion > 0 ? Seconds(t0, first_token_time) : e2e;
    const double tpot = completion > 1 ? (e2e - ttft) / (completion - 1) : 0.0;
    resp->set_finish_reason(finish);
    resp->mutable_usage()->set_prompt_tokens(prompt_tokens);
    resp->mutable_usage()->set_completion_tokens(completion);
    auto* t = resp->mutable_timings();
    t->set_queue_seconds(queue_seconds);
    t->set_ttft_seconds(ttft);
    t->set_e2e_seconds(e2e);
    t->set_tpot_seconds(tpot);
    metrics_.e2e().Observe(e2e);
    if (completion > 1) metrics_.tpot().Observe(tpot);
    metrics_.CountSuccess(ReasonLabel(finish));
    spdlog::info("req={} done finish={} completion_tokens={} queue={:.4f}s ttft={:.4f}s "
                 "tpot={:.5f}s e2e={:.4f}s",
                 id, ReasonLabel(finish), completion, queue_seconds, ttft, tpot, e2e);
  };

  while (reader->Read(&event)) {
    if (first_event) {
      first_event = false;
      queue_seconds = event.queue_seconds();
      metrics_.queue().Observe(queue_seconds);
    }
    v1::GenerateResponse resp;
    resp.set_request_id(id);
    // Every policy but PIPO gives exactly what plain decoding gives (greedy)
    // or its distribution (sampling); PIPO changes the model's output.
    resp.set_lossless(event.policy() != v1::DECODING_POLICY_PIPO);
    std::string text;
    for (int32_t t : event.tokens()) {
      resp.add_token_ids(t);
      if (detok && t >= 0 && t < tok_vocab) text += detok->Push(t);
    }
    const bool finished = event.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
    if (finished && detok) text += detok->Flush();
    bool stopped = false;
    std::string visible = stops.Push(text, &stopped);
    if (finished && !stopped) visible += stops.Flush();
    resp.set_text(std::move(visible));

    const Clock::time_point now = Clock::now();
    const int k = event.tokens_size();
    if (k > 0) {
      if (completion == 0) {
        first_token_time = now;
        metrics_.ttft().Observe(Seconds(t0, now));
      } else {
        // genai-perf's ITL: the gap spread over the tokens it delivered.
        const double per_token = Seconds(last_message_time, now) / k;
        for (int i = 0; i < k; ++i) metrics_.itl().Observe(per_token);
      }
      last_message_time = now;
      completion += k;
      metrics_.generation_tokens().Increment(k);
    }
    if (stopped || finished) {
      finish = stopped ? v1::FINISH_REASON_STOP : event.finish_reason();
      if (finished) {
        resp.set_policy(event.policy());
        *resp.mutable_spec_decode() = event.spec_decode();
      }
      finish_message(&resp, now);
      if (!writer->Write(resp)) client_gone = true;
      // A stop string ends the request here: cancel so the scheduler frees the KV.
      if (stopped) upstream->TryCancel();
      break;
    }
    if (k == 0 && resp.text().empty()) continue;
    if (!writer->Write(resp)) {
      client_gone = true;
      upstream->TryCancel();
      break;
    }
  }
  // Drain whatever is left after a cancel, then collect the status.
  while (finish != v1::FINISH_REASON_UNSPECIFIED && reader->Read(&event)) {
  }
  grpc::Status status = reader->Finish();

  if (finish != v1::FINISH_REASON_UNSPECIFIED) {
    return client_gone ? Fail(grpc::Status(grpc::CANCELLED, "client went away")) : grpc::Status::OK;
  }
  if (entry->aborted) {
    v1::GenerateResponse resp;
    resp.set_request_id(id);
    resp.set_lossless(event.policy() != v1::DECODING_POLICY_PIPO);
    std::string text = detok ? detok->Flush() : std::string();
    bool stopped = false;
    resp.set_text(stops.Push(text, &stopped) + (stopped ? "" : stops.Flush()));
    finish = v1::FINISH_REASON_ABORT;
    finish_message(&resp, Clock::now());
    writer->Write(resp);
    return grpc::Status::OK;
  }
  if (client_gone || ctx->IsCancelled()) {
    spdlog::info("req={} cancelled by the client after {} tokens", id, completion);
    return Fail(grpc::Status(grpc::CANCELLED, "cancelled by the client"));
  }
  if (status.ok()) {
    status = grpc::Status(grpc::INTERNAL, "scheduler ended the stream without a finish reason");
  } else if (status.error_code() == grpc::DEADLINE_EXCEEDED) {
    status = grpc::Status(grpc::DEADLINE_EXCEEDED,
                          absl::StrCat("deadline exceeded after ", completion, " tokens"));
  } else {
    status = grpc::Status(status.error_code(), "scheduler: " + status.error_message());
  }
  spdlog::warn("req={} failed after {} tokens: {} {}", id, completion,
               CodeName(status.error_code()), status.error_message());
  return Fail(status);
}

grpc::Status GenerationService::Abort(const std::string& principal, const v1::AbortRequest& request,
                                      v1::AbortResponse* response) {
  if (request.request_id().empty())
    return grpc::Status(grpc::INVALID_ARGUMENT, "request_id: is empty");
  // Only the principal's own requests: another's id is simply not found.
  const bool found = active_.Abort(principal, request.request_id());
  spdlog::info("req={} abort requested (found={})", request.request_id(), found);
  response->set_found(found);
  return grpc::Status::OK;
}

grpc::Status GenerationService::GetModelInfo(grpc::ServerContext* ctx, v1::ModelInfo* info) {
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
