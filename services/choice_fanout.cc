#include "services/choice_fanout.h"

#include "absl/strings/str_cat.h"
#include "services/async_generation.h"

namespace specline {

std::vector<v1::GenerateRequest> ExpandChoices(const v1::GenerateRequest& request) {
  const int n = std::max(1, request.n());
  std::vector<v1::GenerateRequest> out(n, request);
  for (int i = 0; i < n; ++i) {
    out[i].set_n(0);
    if (request.sampling().has_seed()) {
      out[i].mutable_sampling()->set_seed(request.sampling().seed() + static_cast<uint64_t>(i));
    }
    // Choice 0 keeps the request's id (Abort finds it); the others get
    // their own, derived from it (empty: the gateway makes each one).
    if (i > 0 && !request.request_id().empty())
      out[i].set_request_id(absl::StrCat(request.request_id(), ".", i));
  }
  return out;
}

class ChoiceFanout::ChoiceSink final : public GenerationSink {
 public:
  ChoiceSink(std::shared_ptr<ChoiceFanout> fan, int index) : fan_(std::move(fan)), index_(index) {}
  void OnMessage(const v1::GenerateResponse& message) override { fan_->OnMessage(index_, message); }
  void OnEnd(const grpc::Status& status, int64_t retry_after_seconds) override {
    fan_->OnEnd(index_, status, retry_after_seconds);
  }
  bool ClientGone() const override { return fan_->ClientGone(); }

 private:
  std::shared_ptr<ChoiceFanout> fan_;
  const int index_;
};

ChoiceFanout::ChoiceFanout(GenerationService& service, Api api, std::string principal,
                           std::vector<Choice> choices, std::shared_ptr<GenerationSink> sink)
    : service_(service),
      api_(api),
      principal_(std::move(principal)),
      choices_(std::move(choices)),
      sink_(std::move(sink)) {}

grpc::Status ChoiceFanout::StartChoice(int index, std::shared_ptr<grpc::ClientContext>* call,
                                       int64_t* retry_after_seconds) {
  Choice& c = choices_[index];
  auto upstream = std::make_shared<grpc::ClientContext>();
  std::shared_ptr<ActiveRequests::Entry> entry;
  if (grpc::Status s = service_.Admit(api_, principal_, c.id, c.prepared, upstream.get(), &entry,
                                      retry_after_seconds);
      !s.ok()) {
    return s;
  }
  if (call) *call = upstream;
  AsyncGeneration::Start(service_, api_, principal_, c.id, std::move(c.prepared), std::move(upstream),
                         std::move(entry), std::make_shared<ChoiceSink>(shared_from_this(), index));
  return grpc::Status::OK;
}

grpc::Status ChoiceFanout::Start(std::shared_ptr<grpc::ClientContext>* call,
                                 int64_t* retry_after_seconds) {
  return StartChoice(0, call, retry_after_seconds);
}

void ChoiceFanout::StartRest() {
  for (int i = 1; i < static_cast<int>(choices_.size()); ++i) {
    int64_t retry_after = 0;
    grpc::Status s = ClientGone() ? grpc::Status(grpc::CANCELLED, "client went away")
                                  : StartChoice(i, nullptr, &retry_after);
    if (!s.ok()) OnEnd(i, s, retry_after);
  }
}

void ChoiceFanout::OnMessage(int index, v1::GenerateResponse message) {
  message.set_index(index);
  bool start_rest = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (index == 0 && !rest_started_) start_rest = rest_started_ = true;
  }
  sink_->OnMessage(message);
  // After choice 0's first message: its prompt is in the prefix cache now.
  if (start_rest) StartRest();
}

void ChoiceFanout::OnEnd(int index, const grpc::Status& status, int64_t retry_after_seconds) {
  bool all_ended = false;
  grpc::Status end;
  int64_t retry = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.ok() && first_error_.ok()) {
      first_error_ = status;
      retry_after_seconds_ = retry_after_seconds;
    }
    ++ended_;
    // Choice 0 ended before it sent anything (an error): the others were
    // never started and end with it.
    if (index == 0 && !rest_started_) {
      rest_started_ = true;
      ended_ = static_cast<int>(choices_.size());
    }
    all_ended = ended_ == static_cast<int>(choices_.size());
    end = first_error_;
    retry = retry_after_seconds_;
  }
  if (all_ended) sink_->OnEnd(end, retry);
}

}  // namespace specline
