#include "services/openai/render_response.h"

#include <algorithm>
#include <vector>

namespace specline::openai {

using nlohmann::json;

json RenderedPromptJson(const std::string& request_id, const std::string& model,
                        const ParsedRequest& parsed, const v1::GenerateRequest& request,
                        const PreparedRequest& prepared) {
  const internal::SubmitRequest& submit = prepared.submit;
  const v1::SamplingParams& s = request.sampling();
  // vLLM's SamplingParams, in its names and with its "off" values, for what
  // this server does with the request; a router reads token_ids alone.
  json sampling = {
      {"n", std::max(1, parsed.n)},
      {"temperature", s.temperature()},
      {"top_p", s.top_p() > 0 ? s.top_p() : 1.0f},
      {"top_k", s.top_k() > 0 ? s.top_k() : 0},
      {"min_p", s.min_p()},
      {"seed", s.has_seed() ? json(s.seed()) : json(nullptr)},
      {"presence_penalty", s.presence_penalty()},
      {"frequency_penalty", s.frequency_penalty()},
      {"repetition_penalty", s.repetition_penalty() > 0 ? s.repetition_penalty() : 1.0f},
      {"stop", json(std::vector<std::string>(request.stop().begin(), request.stop().end()))},
      {"stop_token_ids",
       json(std::vector<int32_t>(request.stop_token_ids().begin(), request.stop_token_ids().end()))},
      {"ignore_eos", request.ignore_eos()},
      {"max_tokens", submit.max_tokens()},
      {"min_tokens", 0},
      {"logprobs", request.logprobs().enabled() ? json(request.logprobs().top_logprobs()) : json(nullptr)},
      {"skip_special_tokens", !request.keep_special_tokens()},
      {"include_stop_str_in_output", request.include_stop_str_in_output()},
  };
  json out = {
      {"request_id", request_id},
      {"token_ids", json(std::vector<int32_t>(submit.prompt().begin(), submit.prompt().end()))},
      {"features", nullptr},
      {"sampling_params", std::move(sampling)},
      {"model", model.empty() ? json(nullptr) : json(model)},
      {"stream", parsed.stream},
      {"stream_options", parsed.stream ? json{{"include_usage", parsed.include_usage}} : json(nullptr)},
      {"cache_salt", request.cache_salt().empty() ? json(nullptr) : json(request.cache_salt())},
      {"priority", 0},
      {"kv_transfer_params", nullptr},
  };
  return out;
}

}  // namespace specline::openai
