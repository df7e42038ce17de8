#include "services/llama_server/llama_server_endpoints.h"

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/cluster_secret.h"
#include "services/llama_server/completion_generation.h"
#include "services/llama_server/completion_request.h"
#include "services/llama_server/infill_prompt.h"
#include "services/llama_server/server_props.h"
#include "services/llama_server/token_pieces.h"
#include "services/openai/openai_response.h"

namespace specline::llama_server {

using nlohmann::json;
using openai::ApiError;
using openai::BadField;
using openai::HttpExchange;
namespace http = openai::http;

namespace {

// The shared validation names the grammar "response_format"; this API's
// field is grammar or json_schema.
void NameGrammarField(const v1::GenerateRequest& r, ApiError* e) {
  constexpr std::string_view kShared = "response_format";
  if (!r.has_response_format() || !std::string_view(e->message).starts_with(kShared)) return;
  e->param = r.response_format().has_ebnf() ? "grammar" : "json_schema";
  e->message = e->param + e->message.substr(kShared.size());
}

}  // namespace

LlamaServerEndpoints::LlamaServerEndpoints(const openai::RequestPipeline& pipeline)
    : pipeline_(pipeline), service_(pipeline.service()) {}

// Errors go out in llama-server's shape: the route table sets it on the
// exchange (api_routes.cc), and the shared pipeline writes them.
void LlamaServerEndpoints::Send(HttpExchange& x, const ApiError& e) const { pipeline_.SendError(x, e); }

void LlamaServerEndpoints::Refuse(HttpExchange& x, const ApiError& e) const {
  pipeline_.Refuse(x, e, "INVALID_ARGUMENT");
}

bool LlamaServerEndpoints::Allow(HttpExchange& x, http::verb verb) const {
  if (x.verb() == verb) return true;
  pipeline_.MethodNotAllowed(x, std::string(http::to_string(verb)).c_str());
  return false;
}

int32_t LlamaServerEndpoints::Context() const { return UsableContext(service_.served_model(), pipeline_.RulesNow()); }

bool LlamaServerEndpoints::ReadBody(HttpExchange& x, json* body, std::string* principal) const {
  if (!Allow(x, http::verb::post)) return false;
  std::optional<std::string> who = pipeline_.Authenticate(x);
  if (!who) return false;
  *principal = *std::move(who);
  // Any Content-Type, as llama-server reads its bodies (`curl -d` sends
  // form-urlencoded).
  *body = json::parse(x.request().body(), nullptr, /*allow_exceptions=*/false);
  if (body->is_discarded() || !body->is_object()) {
    Refuse(x, BadField("body", "must be a JSON object"));
    return false;
  }
  return true;
}

bool LlamaServerEndpoints::NeedTokenizer(HttpExchange& x) const {
  if (service_.served_model().tokenizer) return true;
  Refuse(x, BadField("content", "the model is served without a tokenizer; only token ids are taken"));
  return false;
}

void LlamaServerEndpoints::Tokenize(HttpExchange& x) const {
  json body;
  std::string principal;
  if (!ReadBody(x, &body, &principal) || !NeedTokenizer(x)) return;
  bool add_special = false, parse_special = true, with_pieces = false;
  for (auto [key, flag] : {std::pair{"add_special", &add_special}, {"parse_special", &parse_special},
                           {"with_pieces", &with_pieces}}) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) continue;
    if (!it->is_boolean()) return Refuse(x, BadField(key, "must be a boolean"));
    *flag = it->get<bool>();
  }
  json tokens = json::array();
  if (body.contains("content")) {
    const Tokenizer& tok = *service_.served_model().tokenizer;
    absl::StatusOr<std::vector<int32_t>> ids = TokenizeMixed(tok, body["content"], add_special, parse_special, "content");
    if (!ids.ok()) {
      ApiError e;
      e.param = "content";
      e.message = std::string(ids.status().message());
      return Refuse(x, e);
    }
    for (int32_t id : *ids) {
      if (with_pieces) tokens.push_back({{"id", id}, {"piece", PieceJson(TokenPiece(tok, id))}});
      else tokens.push_back(id);
    }
  }
  x.SendJson(http::status::ok, json{{"tokens", tokens}}.dump(-1, ' ', false, json::error_handler_t::replace));
}

void LlamaServerEndpoints::Detokenize(HttpExchange& x) const {
  json body;
  std::string principal;
  if (!ReadBody(x, &body, &principal) || !NeedTokenizer(x)) return;
  const Tokenizer& tok = *service_.served_model().tokenizer;
  std::vector<int32_t> ids;
  if (auto it = body.find("tokens"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return Refuse(x, BadField("tokens", "must be a list of token ids"));
    for (const json& id : *it) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= tok.vocab_size())
        return Refuse(x, BadField("tokens", absl::StrCat("must be token ids in [0, ", tok.vocab_size(), "), got ",
                                                         id.dump())));
      ids.push_back(id.get<int32_t>());
    }
  }
  x.SendJson(http::status::ok,
             json{{"content", llama_server::Detokenize(tok, ids)}}.dump(-1, ' ', false, json::error_handler_t::replace));
}

void LlamaServerEndpoints::Props(HttpExchange& x) const {
  if (x.verb() == http::verb::post) {
    if (!pipeline_.Authenticate(x)) return;
    ApiError e;
    e.http_status = 501;
    e.message = "This server does not support changing global properties (llama-server's --props)";
    return Send(x, e);
  }
  if (!Allow(x, http::verb::get) || !pipeline_.Authenticate(x)) return;
  x.SendJson(http::status::ok,
             PropsJson(service_, Context()).dump(-1, ' ', false, json::error_handler_t::replace));
}

void LlamaServerEndpoints::Slots(HttpExchange& x) const {
  if (!Allow(x, http::verb::get) || !pipeline_.Authenticate(x)) return;
  const std::optional<json> slots = SlotsJson(service_, Context());
  const std::string target(x.request().target());
  const bool fail_on_no_slot = target.find("fail_on_no_slot=1") != std::string::npos ||
                               target.find("fail_on_no_slot=true") != std::string::npos;
  const bool idle = slots && !slots->empty() && !slots->back()["is_processing"].get<bool>();
  if (!slots || (fail_on_no_slot && !idle)) {
    ApiError e;
    e.http_status = 503;
    e.message = slots ? "no slot available" : "the scheduler's state is not known yet";
    return Send(x, e);
  }
  x.SendJson(http::status::ok, slots->dump());
}

void LlamaServerEndpoints::Completion(HttpExchange& x) const {
  json body;
  std::string principal;
  if (!ReadBody(x, &body, &principal) || !NeedTokenizer(x)) return;
  if (!body.contains("prompt")) return Refuse(x, BadField("prompt", "is required"));
  CompletionRequest prompts;
  if (auto e = ReadCompletionPrompt(body["prompt"], *service_.served_model().tokenizer, &prompts))
    return Refuse(x, *e);
  Generate(x, body, principal, std::move(prompts.prompts), prompts.several);
}

void LlamaServerEndpoints::Infill(HttpExchange& x) const {
  json body;
  std::string principal;
  if (!ReadBody(x, &body, &principal) || !NeedTokenizer(x)) return;
  const ServedModel& m = service_.served_model();
  if (!m.fim.usable()) {
    return Refuse(x, BadField("input_prefix", absl::StrCat("infill needs the model's fill-in-the-middle tokens; ",
                                                           service_.model_name(), " has no ", m.fim.Missing(),
                                                           " token (GGUF tokenizer.ggml.fim_pre_token_id / "
                                                           "fim_suf_token_id / fim_mid_token_id, or "
                                                           "<|fim_prefix|>-style tokens in its vocabulary)")));
  }
  std::vector<int32_t> ids;
  if (auto e = InfillPrompt(body, *m.tokenizer, m.fim, Context(), &ids)) return Refuse(x, *e);
  Generate(x, body, principal, {std::move(ids)}, false);
}

void LlamaServerEndpoints::Generate(HttpExchange& x, const json& body, const std::string& principal,
                                    std::vector<std::vector<int32_t>> prompts, bool several) const {
  CompletionRequest r;
  if (auto e = ReadCompletionFields(body, &r)) return Refuse(x, *e);
  r.settings["n_ctx"] = Context();
  CompletionGeneration::Options o;
  o.id = "cmpl-" + RandomHex(12);
  o.model = service_.model_name();
  o.stream = r.stream;
  o.several = several;
  o.return_tokens = r.return_tokens;
  o.n_probs = r.n_probs;
  o.settings = r.settings;
  o.tokenizer = service_.served_model().tokenizer;
  std::vector<v1::GenerateRequest> choices;
  for (size_t i = 0; i < prompts.size(); ++i) {
    v1::GenerateRequest c = r.request;
    c.set_request_id(prompts.size() == 1 ? o.id : absl::StrCat(o.id, ".p", i));
    c.mutable_token_ids()->mutable_ids()->Assign(prompts[i].begin(), prompts[i].end());
    // An n_predict past the context is cut to what fits (llama-server stops
    // at the context's end; 0 asks for exactly that). A prompt that does
    // not fit is still refused.
    if (static_cast<int64_t>(prompts[i].size()) + c.max_tokens() > Context()) c.set_max_tokens(0);
    choices.push_back(std::move(c));
  }
  auto g = std::make_shared<CompletionGeneration>(x.shared_from_this(), std::move(o), prompts);
  std::vector<int> prompt_tokens;
  grpc::Status started;
  int64_t retry_after = 0;
  if (r.n_predict_zero) {
    // n_predict 0: nothing generated; the prompt is validated and counted.
    for (const v1::GenerateRequest& c : choices) {
      if (!(started = service_.PromptTokens(c, &prompt_tokens.emplace_back())).ok()) break;
    }
  } else {
    started = service_.StartChoices(Api::kOpenAi, principal, choices, g, &g->call, &retry_after);
  }
  if (!started.ok()) {
    ApiError e = openai::ErrorFromStatus(openai::Endpoint::kCompletions, started.error_code(),
                                         started.error_message(), started.error_details());
    e.retry_after_seconds = retry_after;
    NameGrammarField(r.request, &e);
    return Send(x, e);
  }
  g->Begin();
  if (r.n_predict_zero) g->FinishUngenerated(prompt_tokens);
}

}  // namespace specline::llama_server
