#include "services/generation_stream.h"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "proto/policy_names.h"

namespace specline {
namespace {

double Seconds(GenerationStream::Clock::time_point a, GenerationStream::Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

const char* ReasonLabel(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_STOP: return "stop";
    case v1::FINISH_REASON_LENGTH: return "length";
    case v1::FINISH_REASON_ABORT: return "abort";
    default: return "unknown";
  }
}

}  // namespace

GenerationStream::GenerationStream(const ServedModel& model, GatewayMetrics::Series& metrics,
                                   std::string id, const PreparedRequest& prepared,
                                   Clock::time_point t0)
    : model_(model),
      metrics_(metrics),
      id_(std::move(id)),
      t0_(t0),
      prompt_tokens_(prepared.submit.prompt_size()),
      keep_special_(prepared.keep_special_tokens),
      include_stop_(prepared.include_stop_str_in_output),
      stop_ids_(prepared.submit.stop_token_ids().begin(), prepared.submit.stop_token_ids().end()),
      stops_(prepared.stop_strings, prepared.include_stop_str_in_output) {
  if (model_.tokenizer) detok_.emplace(*model_.tokenizer, prepared.detok_prev);
  std::sort(stop_ids_.begin(), stop_ids_.end());
}

void GenerationStream::Detokenize(int32_t t, bool final_stop_token, std::string* text) {
  const Tokenizer& tok = *model_.tokenizer;
  // Control tokens decode to nothing (skip_special_tokens) unless they are
  // kept; the stop token that ends the output only when it is asked for
  // too (vLLM's include_stop_str_in_output).
  if (keep_special_ && tok.IsControl(t) && (!final_stop_token || include_stop_)) {
    // A control token ends any character whose bytes came before it; then
    // comes its text as the vocabulary spells it ("<|im_end|>"). It is
    // pushed too, for the tokenizers that decode relative to the previous
    // token.
    *text += detok_->Flush();
    *text += tok.Piece(t);
  }
  *text += detok_->Push(t);
}

void GenerationStream::FinishMessage(v1::GenerateResponse* resp, Clock::time_point now) {
  const double e2e = Seconds(t0_, now);
  const double ttft = completion_ > 0 ? Seconds(t0_, first_token_time_) : e2e;
  const double tpot = completion_ > 1 ? (e2e - ttft) / (completion_ - 1) : 0.0;
  resp->set_finish_reason(finish_);
  resp->mutable_usage()->set_prompt_tokens(prompt_tokens_);
  resp->mutable_usage()->set_completion_tokens(completion_);
  resp->mutable_usage()->set_cached_tokens(cached_tokens_);
  auto* t = resp->mutable_timings();
  t->set_queue_seconds(queue_seconds_);
  t->set_ttft_seconds(ttft);
  t->set_e2e_seconds(e2e);
  t->set_tpot_seconds(tpot);
  metrics_.e2e().Observe(e2e);
  if (completion_ > 1) metrics_.tpot().Observe(tpot);
  metrics_.CountSuccess(ReasonLabel(finish_));
  spdlog::info("req={} done finish={} completion_tokens={} queue={:.4f}s ttft={:.4f}s "
               "tpot={:.5f}s e2e={:.4f}s",
               id_, ReasonLabel(finish_), completion_, queue_seconds_, ttft, tpot, e2e);
}

GenerationStream::Step GenerationStream::OnEvent(const internal::SubmitEvent& event) {
  Step step;
  if (finished()) return step;
  if (first_event_) {
    first_event_ = false;
    queue_seconds_ = event.queue_seconds();
    cached_tokens_ = event.cached_prompt_tokens();
    metrics_.queue().Observe(queue_seconds_);
  }
  // Declared on the policy's enum value (generation.proto). A scheduler
  // that reports no policy ran plain decoding.
  lossless_ = event.policy() == v1::DECODING_POLICY_UNSPECIFIED ||
              PolicyIsLossless(event.policy());
  v1::GenerateResponse resp;
  resp.set_request_id(id_);
  resp.set_lossless(lossless_);
  const int32_t tok_vocab = model_.tokenizer ? model_.tokenizer->vocab_size() : 0;
  std::string text;
  const bool finished_here = event.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
  for (int i = 0; i < event.tokens_size(); ++i) {
    const int32_t t = event.tokens(i);
    resp.add_token_ids(t);
    if (!detok_ || t < 0 || t >= tok_vocab) continue;
    // The last token of an output ended by a stop token is that token.
    const bool final_stop_token = finished_here && i + 1 == event.tokens_size() &&
                                  event.finish_reason() == v1::FINISH_REASON_STOP &&
                                  std::binary_search(stop_ids_.begin(), stop_ids_.end(), t);
    Detokenize(t, final_stop_token, &text);
  }
  // Aligned with token_ids (the scheduler sends one per token when asked).
  *resp.mutable_logprobs() = event.logprobs();
  if (finished_here && detok_) text += detok_->Flush();
  bool stopped = false;
  std::string visible = stops_.Push(text, &stopped);
  if (finished_here && !stopped) visible += stops_.Flush();
  resp.set_text(std::move(visible));

  const Clock::time_point now = Clock::now();
  const int k = event.tokens_size();
  if (k > 0) {
    if (completion_ == 0) {
      // The first tokens carry the prompt's usage, so a stream can say it
      // before the output (Anthropic's message_start); the last message
      // carries it all.
      resp.mutable_usage()->set_prompt_tokens(prompt_tokens_);
      resp.mutable_usage()->set_cached_tokens(cached_tokens_);
      first_token_time_ = now;
      metrics_.ttft().Observe(Seconds(t0_, now));
    } else {
      // genai-perf's ITL: the gap spread over the tokens it delivered.
      const double per_token = Seconds(last_message_time_, now) / k;
      for (int i = 0; i < k; ++i) metrics_.itl().Observe(per_token);
    }
    last_message_time_ = now;
    completion_ += k;
    metrics_.generation_tokens().Increment(k);
  }
  if (stopped || finished_here) {
    finish_ = stopped ? v1::FINISH_REASON_STOP : event.finish_reason();
    if (stopped) resp.set_stop_string(stops_.matched());
    if (finished_here) {
      resp.set_policy(event.policy());
      *resp.mutable_spec_decode() = event.spec_decode();
      for (const auto& [source, n] : event.spec_decode().num_draft_tokens_by_source()) {
        draft_tokens_by_source_[source] = n;
      }
    }
    FinishMessage(&resp, now);
    step.last = true;
    step.stopped = stopped;
    step.message = std::move(resp);
    return step;
  }
  if (k == 0 && resp.text().empty()) return step;
  step.message = std::move(resp);
  return step;
}

v1::GenerateResponse GenerationStream::AbortMessage() {
  v1::GenerateResponse resp;
  resp.set_request_id(id_);
  resp.set_lossless(lossless_);
  std::string text = detok_ ? detok_->Flush() : std::string();
  bool stopped = false;
  resp.set_text(stops_.Push(text, &stopped) + (stopped ? "" : stops_.Flush()));
  finish_ = v1::FINISH_REASON_ABORT;
  FinishMessage(&resp, Clock::now());
  return resp;
}

}  // namespace specline
