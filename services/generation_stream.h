// One request's way from scheduler events to client messages, shared by
// the gRPC API and the OpenAI HTTP API: incremental detokenization, stop
// strings, usage, timings and the request-level metrics. The caller moves
// the events (a blocking gRPC reader, or a callback reactor); this class
// decides what each one becomes, so both APIs give the same text, the same
// token counts and the same metrics for the same request.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status_names.h"
#include "model/tokenizer/tokenizer.h"
#include "services/gateway_metrics.h"
#include "services/request_builder.h"
#include "services/stop_matcher.h"
#include "specline/internal/scheduler.pb.h"
#include "specline/v1/generation.pb.h"

namespace specline {

class GenerationStream {
 public:
  using Clock = std::chrono::steady_clock;

  // `t0` is when the request arrived (TTFT and e2e count from it).
  GenerationStream(const ServedModel& model, GatewayMetrics::Series& metrics, std::string id,
                   const PreparedRequest& prepared, Clock::time_point t0);

  struct Step {
    // The message to send; none when the event carried nothing visible.
    std::optional<v1::GenerateResponse> message;
    bool last = false;     // the request is over (finish reason set)
    bool stopped = false;  // ended by a stop string: cancel the scheduler call
  };
  // One scheduler event. After a step with `last`, further events are
  // ignored (they are what is left after a cancel).
  Step OnEvent(const internal::SubmitEvent& event);

  // The final message of a request ended by Abort, flushing held-back text.
  v1::GenerateResponse AbortMessage();

  bool finished() const { return finish_ != v1::FINISH_REASON_UNSPECIFIED; }
  int completion_tokens() const { return completion_; }
  int prompt_tokens() const { return prompt_tokens_; }
  const std::string& id() const { return id_; }
  // The request's draft tokens by drafter source, once it has ended
  // (the final event's SpecDecodeStats).
  const std::map<std::string, int64_t>& draft_tokens_by_source() const {
    return draft_tokens_by_source_;
  }

 private:
  // Fills a last message's finish reason, usage and timings; records the
  // request's metrics.
  void FinishMessage(v1::GenerateResponse* resp, Clock::time_point now);

  const ServedModel& model_;
  GatewayMetrics::Series& metrics_;
  const std::string id_;
  const Clock::time_point t0_;
  const int prompt_tokens_;
  std::optional<IncrementalDetokenizer> detok_;
  // The text of one generated token (special tokens' per keep_special_),
  // appended to `text`.
  void Detokenize(int32_t token, bool final_stop_token, std::string* text);
  const bool keep_special_;
  const bool include_stop_;
  std::vector<int32_t> stop_ids_;  // the ids that end the output (sorted)
  StopMatcher stops_;
  int completion_ = 0;
  double queue_seconds_ = 0;
  int32_t cached_tokens_ = 0;  // prompt tokens reused from the prefix cache
  std::map<std::string, int64_t> draft_tokens_by_source_;
  bool first_event_ = true;
  bool lossless_ = true;
  Clock::time_point first_token_time_{}, last_message_time_{};
  v1::FinishReason finish_ = v1::FINISH_REASON_UNSPECIFIED;
};

}  // namespace specline
