#include "services/openai/http_generation.h"

#include <spdlog/spdlog.h>

#include "services/openai/openai_response.h"

namespace specline::openai {

void HttpGeneration::HoldExchange() {
  exchange_->Hold([weak = weak_from_this()] {
    const std::shared_ptr<HttpGeneration> g = weak.lock();
    if (!g || g->ended_) return;
    spdlog::info("req={} client disconnected; cancelling", g->id_);
    g->gone_ = true;
    if (g->call) g->call->TryCancel();
  });
}

void HttpGeneration::OnMessage(const v1::GenerateResponse& message) {
  exchange_->Post([self = shared_from_this(), message] { self->HandleMessage(message); });
}

void HttpGeneration::OnEnd(const grpc::Status& status, int64_t retry_after_seconds) {
  exchange_->Post([self = shared_from_this(), status, retry_after_seconds] {
    self->HandleEnd(status, retry_after_seconds);
  });
}

void HttpGeneration::FinishUngenerated(const std::vector<int>& prompt_tokens) {
  for (size_t i = 0; i < prompt_tokens.size(); ++i) {
    v1::GenerateResponse done;
    done.set_index(static_cast<int32_t>(i));
    done.set_finish_reason(v1::FINISH_REASON_LENGTH);
    done.mutable_usage()->set_prompt_tokens(prompt_tokens[i]);
    HandleMessage(done);
  }
  HandleEnd(grpc::Status::OK, 0);
}

ApiError HttpGeneration::EndError(Endpoint endpoint, const grpc::Status& status, int64_t retry_after_seconds) {
  ApiError e = ErrorFromStatus(endpoint, status.error_code(), status.error_message(), status.error_details());
  e.retry_after_seconds = retry_after_seconds;
  if (e.http_status >= 500) spdlog::warn("http {}: {}", e.http_status, e.message);
  return e;
}

}  // namespace specline::openai
