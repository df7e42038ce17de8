#include "services/openai/http_generation.h"

#include <spdlog/spdlog.h>

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

}  // namespace specline::openai
