#include "services/llama_server/completion_generation.h"

#include <cmath>

#include "services/llama_server/server_errors.h"
#include "services/llama_server/token_pieces.h"
#include "services/openai/openai_response.h"

namespace specline::llama_server {
namespace {

using nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json Bytes(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

// JSON has no infinities: an impossible token's logprob is written as
// -9999 (OpenAI's convention, which the OpenAI API here uses too).
double Logprob(float v) { return std::isfinite(v) ? std::max(v, -9999.0f) : -9999.0; }

// llama-server's timings from the gateway's: prompt processing is the time
// to the first token after the queue, prediction the rest.
json Timings(const v1::GenerateResponse& last) {
  const v1::Timings& t = last.timings();
  const int cached = last.usage().cached_tokens();
  const int prompt_n = last.usage().prompt_tokens() - cached;
  const int predicted_n = last.usage().completion_tokens();
  const double prompt_ms = std::max(0.0, t.ttft_seconds() - t.queue_seconds()) * 1e3;
  const double predicted_ms = std::max(0.0, t.e2e_seconds() - t.ttft_seconds()) * 1e3;
  const auto per_token = [](double ms, int n) { return n > 0 ? ms / n : 0.0; };
  const auto per_second = [](double ms, int n) { return ms > 0 ? 1e3 * n / ms : 0.0; };
  return {{"cache_n", cached},
          {"prompt_n", prompt_n},
          {"prompt_ms", prompt_ms},
          {"prompt_per_token_ms", per_token(prompt_ms, prompt_n)},
          {"prompt_per_second", per_second(prompt_ms, prompt_n)},
          {"predicted_n", predicted_n},
          {"predicted_ms", predicted_ms},
          {"predicted_per_token_ms", per_token(predicted_ms, predicted_n)},
          {"predicted_per_second", per_second(predicted_ms, predicted_n)}};
}

}  // namespace

CompletionGeneration::CompletionGeneration(std::shared_ptr<openai::HttpExchange> exchange, Options options,
                                           const std::vector<std::vector<int32_t>>& prompts)
    : HttpGeneration(std::move(exchange), options.id), options_(std::move(options)), choices_(prompts.size()) {
  for (size_t i = 0; i < prompts.size(); ++i) {
    choices_[i].prompt_tokens = static_cast<int>(prompts[i].size());
    if (options_.tokenizer) choices_[i].prompt_text = Detokenize(*options_.tokenizer, prompts[i]);
  }
}

void CompletionGeneration::Event(const json& payload) { exchange_->SendChunk("data: " + Dump(payload) + "\n\n"); }

void CompletionGeneration::Begin() {
  HoldExchange();
  if (options_.stream) exchange_->StartStream("text/event-stream");
}

// completion_probabilities for the message's tokens: each token and its
// n_probs most likely alternatives, as id, piece, bytes and logprob.
json CompletionGeneration::Probs(const v1::GenerateResponse& message) const {
  json out = json::array();
  const auto entry = [&](int32_t id, float logprob) {
    const std::string piece = options_.tokenizer ? TokenPiece(*options_.tokenizer, id) : std::string();
    return json{{"id", id}, {"token", piece}, {"bytes", Bytes(piece)}, {"logprob", Logprob(logprob)}};
  };
  for (const v1::TokenLogprob& lp : message.logprobs()) {
    json token = entry(lp.token_id(), lp.logprob());
    json top = json::array();
    for (const v1::TopLogprob& t : lp.top()) top.push_back(entry(t.token_id(), t.logprob()));
    token["top_logprobs"] = std::move(top);
    out.push_back(std::move(token));
  }
  return out;
}

void CompletionGeneration::HandleMessage(const v1::GenerateResponse& message) {
  if (ended_) return;
  const int i = static_cast<int>(message.index());
  if (i < 0 || i >= static_cast<int>(choices_.size())) return;
  Choice& c = choices_[i];
  c.content += message.text();
  c.tokens.insert(c.tokens.end(), message.token_ids().begin(), message.token_ids().end());
  const json probs = options_.n_probs > 0 ? Probs(message) : json::array();
  if (!options_.stream) {
    for (const json& p : probs) c.probs.push_back(p);
  } else if (!message.text().empty() || message.token_ids_size() > 0) {
    json chunk = {{"index", i},
                  {"content", message.text()},
                  {"tokens", std::vector<int32_t>(message.token_ids().begin(), message.token_ids().end())},
                  {"stop", false},
                  {"id_slot", -1},
                  {"tokens_predicted", c.tokens.size()},
                  {"tokens_evaluated", c.prompt_tokens}};
    if (options_.n_probs > 0) chunk["completion_probabilities"] = probs;
    Event(chunk);
  }
  if (message.finish_reason() == v1::FINISH_REASON_UNSPECIFIED) return;
  c.last = message;
  c.done = true;
  if (options_.stream) {
    json last = Final(i, c);
    last["content"] = "";
    last["tokens"] = json::array();
    last.erase("completion_probabilities");
    Event(last);
  }
}

// The final object: the whole content (not streamed), why it stopped, the
// counts, timings and the settings the request ran with.
json CompletionGeneration::Final(int index, const Choice& c) const {
  const v1::GenerateResponse& last = c.last;
  // The stop string that ended the output, as the gateway matched it.
  const std::string& stop_word = last.stop_string();
  const char* stop_type = last.finish_reason() == v1::FINISH_REASON_LENGTH ? "limit"
                          : !stop_word.empty()                              ? "word"
                                                                            : "eos";
  json out = {{"index", index},
              {"content", c.content},
              {"tokens", options_.return_tokens ? json(c.tokens) : json::array()},
              {"id_slot", 0},
              {"stop", true},
              {"model", options_.model},
              {"tokens_predicted", last.usage().completion_tokens()},
              {"tokens_evaluated", c.prompt_tokens},
              {"generation_settings", options_.settings},
              {"prompt", c.prompt_text},
              {"has_new_line", c.content.find('\n') != std::string::npos},
              {"truncated", false},
              {"stop_type", stop_type},
              {"stopping_word", stop_word},
              {"tokens_cached", last.usage().cached_tokens()},
              {"timings", Timings(last)}};
  if (options_.n_probs > 0) out["completion_probabilities"] = c.probs;
  return out;
}

void CompletionGeneration::HandleEnd(const grpc::Status& status, int64_t retry_after_seconds) {
  if (ended_) return;
  ended_ = true;
  const openai::ApiError error =
      status.ok() ? openai::ApiError() : EndError(openai::Endpoint::kCompletions, status, retry_after_seconds);
  if (options_.stream) {
    if (!status.ok()) exchange_->SendChunk("data: " + NativeErrorBody(error) + "\n\n");
    exchange_->EndStream();
    return;
  }
  if (!status.ok())
    return exchange_->SendJson(static_cast<openai::http::status>(error.http_status), NativeErrorBody(error),
                               error.retry_after_seconds);
  json whole = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) whole.push_back(Final(static_cast<int>(i), choices_[i]));
  exchange_->SendJson(openai::http::status::ok, Dump(options_.several ? whole : whole[0]));
}

}  // namespace specline::llama_server
