#include "services/async_generation.h"

namespace specline {

AsyncGeneration::AsyncGeneration(GenerationService& service, Api api, std::string principal,
                                 std::string id, PreparedRequest prepared,
                                 std::shared_ptr<grpc::ClientContext> call,
                                 std::shared_ptr<ActiveRequests::Entry> entry,
                                 std::shared_ptr<GenerationSink> sink)
    : service_(service),
      api_(api),
      principal_(std::move(principal)),
      id_(std::move(id)),
      call_(std::move(call)),
      entry_(std::move(entry)),
      sink_(std::move(sink)),
      stream_(service.model_, service.metrics_.For(api), id_, prepared,
              GenerationStream::Clock::now()),
      submit_(service.StartSubmit(api, principal_, id_, prepared)) {}

void AsyncGeneration::Start(GenerationService& service, Api api, std::string principal, std::string id,
                            PreparedRequest prepared, std::shared_ptr<grpc::ClientContext> call,
                            std::shared_ptr<ActiveRequests::Entry> entry,
                            std::shared_ptr<GenerationSink> sink) {
  auto* self = new AsyncGeneration(service, api, std::move(principal), std::move(id),
                                   std::move(prepared), std::move(call), std::move(entry),
                                   std::move(sink));
  service.scheduler_->async()->Submit(self->call_.get(), &self->submit_, self);
  self->StartRead(&self->event_);
  self->StartCall();
}

void AsyncGeneration::OnReadDone(bool ok) {
  if (!ok) return;  // the call is over; OnDone follows
  if (!stream_.finished()) {
    GenerationStream::Step step = stream_.OnEvent(event_);
    if (step.message) sink_->OnMessage(*step.message);
    // A stop string ends the request here: cancel so the scheduler frees
    // the KV. A finished request's call ends by itself.
    if (step.stopped) call_->TryCancel();
  }
  if (sink_->ClientGone()) call_->TryCancel();
  StartRead(&event_);  // drains what is left after a cancel
}

void AsyncGeneration::OnDone(const grpc::Status& status) {
  std::optional<v1::GenerateResponse> final_message;
  const bool gone = sink_->ClientGone();
  const int64_t retry_after = service_.SchedulerRejection(principal_, *call_, status);
  grpc::Status end = service_.EndStatus(api_, stream_, status, gone, entry_->aborted, &final_message);
  if (final_message) sink_->OnMessage(*final_message);
  service_.Release(api_, principal_, id_, *entry_, stream_);
  sink_->OnEnd(end, retry_after);
  delete this;
}

}  // namespace specline
