#include "scheduler/scheduler_service.h"

#include "absl/strings/cord.h"
#include "common/cluster_secret.h"
#include "spdlog/spdlog.h"

namespace specline::scheduler {
namespace {

v1::FinishReason ToProto(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return v1::FINISH_REASON_STOP;
    case FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case FinishReason::kAbort: return v1::FINISH_REASON_ABORT;
    default: return v1::FINISH_REASON_UNSPECIFIED;
  }
}

// How often a waiting handler looks for client cancellation.
constexpr std::chrono::milliseconds kPoll{5};

}  // namespace

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

grpc::Status SchedulerService::Submit(grpc::ServerContext* ctx,
                                      const internal::SubmitRequest* req,
                                      grpc::ServerWriter<internal::SubmitEvent>* writer) {
  if (grpc::Status st = CheckClusterSecret(*ctx, cluster_secret_); !st.ok()) {
    spdlog::warn("refused a Submit without the cluster secret from {}", ctx->peer());
    return st;
  }
  absl::StatusOr<RequestOptions> spec = ToRequestOptions(*req, engine_.default_mode());
  if (!spec.ok()) return ToGrpc(spec.status());
  if (req->has_response_format()) {
    if (!formats_) {
      return ToGrpc(absl::FailedPreconditionError(
          "response_format: this deployment has no tokenizer to compile grammars with"));
    }
    // On this gRPC thread, not the engine's: a new schema takes
    // milliseconds to compile (cached after).
    auto grammar = formats_->Compile(req->response_format());
    if (!grammar.ok()) return ToGrpc(grammar.status());
    spec->grammar = *std::move(grammar);
  }
  const std::string rid = req->request_id();
  // Every event names the policy, so the gateway can mark each response
  // lossless or not (PIPO) as it streams.
  const v1::DecodingPolicy policy = spec->mode;
  absl::StatusOr<std::shared_ptr<RequestStream>> stream = engine_.Submit(*std::move(spec));
  if (!stream.ok()) {
    spdlog::info("request {}: rejected: {}", rid, stream.status().ToString());
    // Which limit refused it, for the gateway's rejection counts; a full
    // queue drains as requests are admitted, so a retry soon may succeed
    // (a request too large for its tenant's KV quota never will).
    if (const auto limit = stream.status().GetPayload(kLimitPayload)) {
      const std::string flag(*limit);
      ctx->AddTrailingMetadata("specline-limit", flag);
      if (flag == "max-waiting") ctx->AddTrailingMetadata("retry-after", "1");
    }
    return ToGrpc(stream.status());
  }
  const uint64_t id = (*stream)->id();
  for (;;) {
    if (ctx->IsCancelled()) {
      engine_.Cancel(id);
      spdlog::info("request {}: cancelled by the client", rid);
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client");
    }
    std::optional<StreamEvent> e = (*stream)->Next(kPoll);
    if (!e) continue;
    if (e->finish == FinishReason::kError) return ToGrpc(e->error);
    internal::SubmitEvent out;
    out.mutable_tokens()->Add(e->tokens.begin(), e->tokens.end());
    for (v1::TokenLogprob& lp : e->logprobs) *out.add_logprobs() = std::move(lp);
    out.set_finish_reason(ToProto(e->finish));
    if (e->queue_seconds >= 0) {
      out.set_queue_seconds(e->queue_seconds);
      out.set_cached_prompt_tokens(e->cached_prompt_tokens);
    }
    out.set_policy(policy);
    if (e->last()) {
      ToProto(e->spec, engine_.n_stages(), e->generated, out.mutable_spec_decode());
    }
    // An abort not caused by this client (the engine's Cancel) ends the
    // stream normally with finish_reason ABORT.
    if (!writer->Write(out) && !e->last()) {
      engine_.Cancel(id);
      return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
    }
    if (e->last()) return grpc::Status::OK;
  }
}

grpc::Status SchedulerService::GetStats(grpc::ServerContext* ctx, const internal::StatsRequest*,
                                        internal::SchedulerStats* out) {
  if (grpc::Status st = CheckClusterSecret(*ctx, cluster_secret_); !st.ok()) return st;
  EngineStats s = engine_.Stats();
  out->set_running(s.running);
  out->set_waiting(s.waiting);
  out->set_kv_capacity_tokens(s.kv_capacity_tokens);
  out->set_kv_free_tokens(s.kv_free_tokens);
  out->set_kv_block_size(s.kv_block_size);
  out->set_n_stages(s.n_stages);
  for (bool up : s.stage_up) out->add_stage_up(up);
  out->set_steps(s.steps);
  out->set_kv_cached_tokens(s.kv_cached_tokens);
  out->set_prefix_cache_queries(s.prefix_cache_queries);
  out->set_prefix_cache_hits(s.prefix_cache_hits);
  if (kv_events_) *out->mutable_kv_events() = *kv_events_;
  return grpc::Status::OK;
}

grpc::Status SchedulerService::GetModel(grpc::ServerContext* ctx, const internal::ModelRequest*,
                                        internal::ModelSummary* out) {
  if (grpc::Status st = CheckClusterSecret(*ctx, cluster_secret_); !st.ok()) return st;
  const ModelConfig& c = engine_.config();
  out->set_model(engine_.model_path());
  out->set_arch(c.arch);
  out->set_vocab_size(c.vocab_size);
  out->set_context_length(c.max_seq_len);
  out->set_n_layers(c.n_layers);
  out->set_n_stages(engine_.n_stages());
  for (v1::DecodingPolicy m : engine_.modes()) out->add_policies(m);
  out->set_default_policy(engine_.default_mode());
  return grpc::Status::OK;
}

}  // namespace specline::scheduler
