#include "services/openai/openai_endpoints.h"

#include <chrono>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/cluster_secret.h"
#include "services/choice_fanout.h"
#include "services/openai/openai_generation.h"
#include "services/openai/render_response.h"

namespace specline::openai {
namespace {

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* IdPrefix(Endpoint endpoint) {
  static constexpr const char* kIdPrefix[] = {"cmpl-", "chatcmpl-", "resp_"};
  return kIdPrefix[static_cast<int>(endpoint)];
}

}  // namespace

OpenAiEndpoints::OpenAiEndpoints(const RequestPipeline& pipeline)
    : pipeline_(pipeline), service_(pipeline.service()), created_(UnixSeconds()) {}

nlohmann::json OpenAiEndpoints::ModelJson() const {
  return {{"id", service_.model_name()}, {"object", "model"}, {"created", created_}, {"owned_by", "specline"}};
}

void OpenAiEndpoints::ListModels(HttpExchange& x) const {
  if (x.verb() != http::verb::get) return pipeline_.MethodNotAllowed(x, "GET");
  if (!pipeline_.Authenticate(x)) return;
  nlohmann::json list = {{"object", "list"}, {"data", nlohmann::json::array({ModelJson()})}};
  x.SendJson(http::status::ok, list.dump());
}

void OpenAiEndpoints::GetModel(HttpExchange& x, const std::string& id) const {
  if (x.verb() != http::verb::get) return pipeline_.MethodNotAllowed(x, "GET");
  if (!pipeline_.Authenticate(x)) return;
  // The listing names the served model only, --accept-any-model or not.
  if (id != service_.model_name()) return pipeline_.SendError(x, pipeline_.ModelNotFound(id));
  x.SendJson(http::status::ok, ModelJson().dump());
}

// llama-server's POST /apply-template: a chat request's body in, the prompt
// the model's template makes of it out, {"prompt": "..."}; nothing is
// generated.
void OpenAiEndpoints::ApplyTemplate(HttpExchange& x) const {
  ParsedRequest parsed;
  std::string principal;
  if (!pipeline_.ReadJsonPost(x, Endpoint::kChatCompletions, &parsed, &principal)) return;
  tool_calls::Syntax parse_with;
  if (!pipeline_.ApplyTools(x, &parsed, &parse_with)) return;
  absl::StatusOr<std::string> prompt = RenderChat(parsed.request.chat(), service_.served_model());
  if (!prompt.ok()) {
    return pipeline_.Refuse(x,
                            ErrorFromStatus(Endpoint::kChatCompletions,
                                            static_cast<int>(prompt.status().code()),
                                            std::string(prompt.status().message())),
                            "INVALID_ARGUMENT");
  }
  x.SendJson(http::status::ok, nlohmann::json{{"prompt", *prompt}}.dump());
}

// llama-server's POST /v1/chat/completions/input_tokens (and the Responses
// API's): a request's body in, {"input_tokens": N} out, N the prompt tokens
// the generation would take (template, tools and tokenizer as it would get
// them, and validated as it would be); nothing is generated. The Responses
// API's reply adds "object": "response.input_tokens", as llama-server's.
void OpenAiEndpoints::InputTokens(HttpExchange& x, Endpoint endpoint) const {
  ParsedRequest parsed;
  std::string principal;
  tool_calls::Syntax parse_with;
  if (!pipeline_.ReadGenerationRequest(x, endpoint, &parsed, &principal, &parse_with)) return;
  int tokens = 0;
  if (grpc::Status s = service_.PromptTokens(parsed.request, &tokens); !s.ok())
    return pipeline_.SendError(x, ErrorFromStatus(endpoint, s.error_code(), s.error_message(), s.error_details()));
  nlohmann::json reply = {{"input_tokens", tokens}};
  if (endpoint == Endpoint::kResponses) reply["object"] = "response.input_tokens";
  x.SendJson(http::status::ok, reply.dump());
}

// vLLM's POST /v1/chat/completions/render and /v1/completions/render: the
// body of a generation request in, the prompt's token ids out as the
// generation would get them (the same parsing, chat template, tokenizer and
// validation: PrepareRequest), in vLLM's GenerateRequest shape; an object
// for chat, a list with one per prompt for completions. Nothing is
// generated or admitted. vllm-router's cache_aware and kv_aware policies
// route on these ids (docs/routers.md). /v1/responses/render, which the
// router calls for the Responses API, answers like chat's.
void OpenAiEndpoints::Render(HttpExchange& x, Endpoint endpoint) const {
  ParsedRequest parsed;
  std::string principal;
  tool_calls::Syntax parse_with;
  if (!pipeline_.ReadGenerationRequest(x, endpoint, &parsed, &principal, &parse_with)) return;
  nlohmann::json rendered = nlohmann::json::array();
  for (const v1::GenerateRequest& prompt : RequestPipeline::Prompts(parsed)) {
    PreparedRequest prepared;
    if (grpc::Status s = service_.PrepareOnly(prompt, &prepared); !s.ok())
      return pipeline_.SendError(x, ErrorFromStatus(endpoint, s.error_code(), s.error_message(), s.error_details()));
    rendered.push_back(
        RenderedPromptJson(IdPrefix(endpoint) + RandomHex(12), parsed.model, parsed, prompt, prepared));
  }
  if (endpoint != Endpoint::kCompletions) rendered = nlohmann::json(std::move(rendered[0]));
  x.SendJson(http::status::ok, rendered.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

void OpenAiEndpoints::Generate(HttpExchange& x, Endpoint endpoint) const {
  ParsedRequest parsed;
  std::string principal;
  tool_calls::Syntax parse_with;
  if (!pipeline_.ReadGenerationRequest(x, endpoint, &parsed, &principal, &parse_with)) return;
  if (parsed.n > kMaxChoices) {
    ApiError e;
    e.param = "n";
    e.message = absl::StrCat("n: must be in [1, ", kMaxChoices, "], got ", parsed.n);
    return pipeline_.Refuse(x, e, "INVALID_ARGUMENT");
  }
  const std::string& served = service_.model_name();
  const ServedModel& model = service_.served_model();
  auto g = std::make_shared<OpenAiGeneration>(
      x.shared_from_this(), ResponseIdentity{endpoint, IdPrefix(endpoint) + RandomHex(12), UnixSeconds(), served,
                                             SystemFingerprint(served, model.vocab_size, model.context_length)});
  parsed.request.set_request_id(g->who.id);
  g->stream = parsed.stream;
  g->include_usage = parsed.include_usage;
  g->n = std::max(1, parsed.n);
  if (endpoint == Endpoint::kResponses) g->responses.emplace(g->who, parsed);
  // The choices: each prompt of a list, n times (choice_fanout.h).
  std::vector<v1::GenerateRequest> prompts = RequestPipeline::Prompts(parsed);
  std::vector<v1::GenerateRequest> choices;
  for (size_t p = 0; p < prompts.size(); ++p) {
    if (parsed.echo) g->echo.push_back(PromptText(prompts[p]));
    for (v1::GenerateRequest& c : ExpandChoices(prompts[p])) {
      if (p > 0) c.set_request_id(absl::StrCat(g->who.id, ".p", p, c.request_id().substr(g->who.id.size())));
      choices.push_back(std::move(c));
    }
  }
  g->choices.resize(choices.size());
  if (parsed.request.logprobs().enabled()) {
    for (size_t i = 0; i < choices.size(); ++i) g->logprobs.emplace_back(endpoint, model.tokenizer);
  }
  if (parse_with != tool_calls::Syntax::kNone) {
    for (size_t i = 0; i < choices.size(); ++i) {
      g->tools.push_back(std::make_unique<ToolCallResponder>(parse_with, model.tool_calls, model.tokenizer,
                                                             parsed.tools.parallel_tool_calls));
    }
  }
  if (!parsed.user.empty()) spdlog::info("req={} user={}", g->who.id, parsed.user);
  grpc::Status started;
  int64_t retry_after = 0;
  std::vector<int> prompt_tokens;  // max_tokens: 0
  if (parsed.max_tokens_zero) {
    // Nothing to generate: each choice is its prompt's echo (or empty),
    // validated and counted as a generation's would be.
    for (const v1::GenerateRequest& c : choices) {
      int tokens = 0;
      started = service_.PromptTokens(c, &tokens);
      if (!started.ok()) break;
      prompt_tokens.push_back(tokens);
    }
  } else {
    // The generation may answer on gRPC's threads at once; its messages are
    // posted to the exchange's strand, so they run after this handler
    // returns. Everything that can refuse the request (validation, the
    // context, admission) has answered by the time StartChoices returns:
    // its error is a plain HTTP error, before any stream byte.
    started = service_.StartChoices(Api::kOpenAi, principal, choices, g, &g->call, &retry_after);
  }
  if (!started.ok()) {
    ApiError e = ErrorFromStatus(endpoint, started.error_code(), started.error_message(),
                                 started.error_details());
    e.retry_after_seconds = retry_after;
    return pipeline_.SendError(x, e);
  }
  g->Begin();
  if (parsed.max_tokens_zero) g->FinishUngenerated(prompt_tokens);
}

std::string OpenAiEndpoints::PromptText(const v1::GenerateRequest& r) const {
  if (!r.has_token_ids()) return r.text();
  const Tokenizer* tokenizer = service_.served_model().tokenizer;
  if (!tokenizer) return "";
  return tokenizer->Decode(std::vector<int32_t>(r.token_ids().ids().begin(), r.token_ids().ids().end()));
}

}  // namespace specline::openai
