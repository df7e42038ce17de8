#include "services/openai/openai_request.h"

#include <cmath>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "proto/policy_names.h"
#include "services/openai/response_format_request.h"
#include "services/openai/sampling_fields.h"
#include "services/request_builder.h"

namespace specline::openai {

ApiError BadField(const std::string& param, const std::string& why) {
  ApiError e;
  e.message = absl::StrCat(param, ": ", why);
  e.param = param;
  return e;
}

namespace {

using nlohmann::json;

// Fields we know but do not implement: refused unless they carry their
// default (absent, null, or the value below), never ignored.
std::optional<ApiError> RefuseUnlessDefault(const json& body, Endpoint endpoint) {
  auto is_default = [](const json& v, const json& dflt) { return v.is_null() || v == dflt; };
  struct Unsupported {
    const char* name;
    json dflt;
    const char* why;
  };
  const Unsupported fields[] = {
      {"best_of", 1, "only 1 is supported"},
      {"suffix", "", "(fill-in-the-middle) is not supported: the served models carry no FIM tokens"},
      {"functions", json::array(), "function calls are not supported by this server"},
      {"function_call", "none", "function calls are not supported by this server"},
  };
  for (const auto& f : fields) {
    auto it = body.find(f.name);
    if (it != body.end() && !is_default(*it, f.dflt)) return BadField(f.name, f.why);
  }
  return std::nullopt;
}

// Every field either endpoint accepts; anything else is refused by name, as
// OpenAI's own API does.
const std::set<std::string>& KnownFields(Endpoint endpoint) {
  static const std::set<std::string> common = {
      "model", "max_tokens", "temperature", "top_p", "stop", "seed", "stream",
      "stream_options", "n", "user", "top_k", "min_p", "repetition_penalty", "ignore_eos",
      "stop_token_ids", "policy", "pipo_tau", "frequency_penalty", "presence_penalty",
      "logprobs", "top_logprobs", "logit_bias", "cache_salt",
      // vLLM's and SGLang's, which their routers (vllm-router, smg) add to
      // every body they forward (docs/routers.md).
      "skip_special_tokens", "include_stop_str_in_output", "no_stop_trim", "min_tokens",
      "return_hidden_states", "separate_reasoning", "stream_reasoning", "include_reasoning",
      // OpenAI's fields that do not change the output: accepted, ignored.
      "store", "metadata", "service_tier", "modalities", "reasoning_effort"};
  static const std::set<std::string> completions = [] {
    std::set<std::string> s = common;
    s.insert({"prompt", "echo", "best_of", "suffix"});
    return s;
  }();
  static const std::set<std::string> chat = [] {
    std::set<std::string> s = common;
    s.insert({"messages", "max_completion_tokens", "tools", "tool_choice", "parallel_tool_calls",
              "functions", "function_call", "chat_template_kwargs", "add_generation_prompt",
              "continue_final_message"});
    return s;
  }();
  return endpoint == Endpoint::kChatCompletions ? chat : completions;
}

std::optional<ApiError> ReadNumber(const json& body, const char* name, double lo, double hi,
                                   std::optional<double>* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return BadField(name, "must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi)
    return BadField(name, absl::StrCat("must be in [", lo, ", ", hi, "], got ", it->dump()));
  *out = v;
  return std::nullopt;
}

std::optional<ApiError> ReadInt(const json& body, const char* name, int64_t lo, int64_t hi,
                                std::optional<int64_t>* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) return BadField(name, "must be an integer");
  // Unsigned values above int64 come back as uint64.
  if (it->is_number_unsigned() && it->get<uint64_t>() > static_cast<uint64_t>(hi))
    return BadField(name, absl::StrCat("must be at most ", hi));
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) return BadField(name, absl::StrCat("must be in [", lo, ", ", hi, "], got ", v));
  *out = v;
  return std::nullopt;
}

std::optional<ApiError> ReadBool(const json& body, const char* name, bool* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return BadField(name, "must be true or false");
  *out = it->get<bool>();
  return std::nullopt;
}

std::optional<ApiError> ReadPrompt(const json& body, v1::GenerateRequest* r) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) return BadField("prompt", "is required");
  const json& p = *it;
  if (p.is_string()) {
    r->set_text(p.get<std::string>());
    return std::nullopt;
  }
  if (!p.is_array() || p.empty())
    return BadField("prompt", "must be a string, a list of token ids, or a list of one of those");
  if (p[0].is_string() || p[0].is_array())
    return BadField("prompt", "must be a string or a list of token ids here");

  auto* ids = r->mutable_token_ids();
  for (size_t i = 0; i < p.size(); ++i) {
    if (!p[i].is_number_integer() || p[i].get<int64_t>() < 0 ||
        p[i].get<int64_t>() > std::numeric_limits<int32_t>::max())
      return BadField("prompt", absl::StrCat("token id at index ", i, " is not a non-negative integer"));
    ids->add_ids(p[i].get<int32_t>());
  }
  return std::nullopt;
}

// A list of prompts (strings or token-id lists): one per entry of `out`,
// each holding only its prompt. A single prompt leaves `out` empty.
std::optional<ApiError> ReadPrompts(const json& body, v1::GenerateRequest* r,
                                    std::vector<v1::GenerateRequest>* out) {
  auto it = body.find("prompt");
  if (it != body.end() && it->is_array() && !it->empty() && ((*it)[0].is_string() || (*it)[0].is_array())) {
    for (size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_string() && !(*it)[i].is_array())
        return BadField("prompt", absl::StrCat("entry ", i, " must be a string or a list of token ids"));
      json one = {{"prompt", (*it)[i]}};
      v1::GenerateRequest prompt;
      if (auto e = ReadPrompt(one, &prompt)) return e;
      out->push_back(std::move(prompt));
    }
    if (out->size() == 1) {
      r->MergeFrom(out->front());
      out->clear();
    }
    return std::nullopt;
  }
  return ReadPrompt(body, r);
}

// How the prompt ends. A conversation whose last turn is the assistant's
// continues that turn (assistant prefill, as llama-server does), unless
// the client asks otherwise: continue_final_message: false, or
// add_generation_prompt: true (a new assistant turn after it, vLLM's
// default). vLLM's explicit continue_final_message: true needs
// add_generation_prompt false or absent. Whether the final message can be
// continued is CheckContinuation's to say (request_builder.h), the one
// check for this API and the gRPC API alike.
std::optional<ApiError> ReadContinuation(const json& body, v1::ChatMessages* chat) {
  std::optional<bool> add_generation_prompt, continue_final;
  for (auto [name, out] : {std::pair{"add_generation_prompt", &add_generation_prompt},
                           std::pair{"continue_final_message", &continue_final}}) {
    bool value = false;
    if (auto it = body.find(name); it != body.end() && !it->is_null()) {
      if (auto e = ReadBool(body, name, &value)) return e;
      *out = value;
    }
  }
  const v1::ChatMessage& last = chat->messages(chat->messages_size() - 1);
  const bool prefill = last.role() == "assistant" && !last.content_null() &&
                       last.tool_calls_json().empty() &&
                       last.content().find_first_not_of(" \t\n\r") != std::string::npos;
  const bool continues = continue_final.value_or(prefill && !add_generation_prompt.value_or(false));
  chat->set_continue_final_message(continues);
  chat->set_no_generation_prompt(!add_generation_prompt.value_or(!continues));
  if (absl::Status s = CheckContinuation(*chat); !s.ok()) {
    const std::string message(s.message());
    return BadField("continue_final_message", message.substr(message.find(": ") + 2));
  }
  return std::nullopt;
}

std::optional<ApiError> ReadMessages(const json& body, v1::GenerateRequest* r) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) return BadField("messages", "is required");
  if (!it->is_array() || it->empty()) return BadField("messages", "must be a non-empty list");
  auto* chat = r->mutable_chat();
  for (size_t i = 0; i < it->size(); ++i) {
    const json& m = (*it)[i];
    const std::string at = absl::StrCat("messages[", i, "]");
    if (!m.is_object()) return BadField(at, "must be an object with role and content");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return BadField(at + ".role", "must be a string");
    const std::string role_name = role->get<std::string>();
    // OpenAI's roles; whether the conversation suits the model is its chat
    // template's to say (a template that refuses one answers 400 naming it).
    if (role_name != "system" && role_name != "user" && role_name != "assistant" &&
        role_name != "developer" && role_name != "tool")
      return BadField(at + ".role", absl::StrCat("'", role_name,
                                            "' is not supported (system, developer, user, assistant, tool)"));
    std::string text;
    bool content_null = false;
    auto content = m.find("content");
    if (content == m.end() || content->is_null()) {
      // OpenAI's assistant content is optional (a turn of tool calls has
      // none): it renders as empty content.
      if (role_name != "assistant") return BadField(at + ".content", "is required");
      content_null = true;
    } else if (content->is_string()) {
      text = content->get<std::string>();
    } else if (content->is_array()) {
      // Content parts: text parts are joined; other kinds need a modality
      // this server does not have.
      for (size_t k = 0; k < content->size(); ++k) {
        const json& part = (*content)[k];
        const std::string at_part = absl::StrCat(at, ".content[", k, "]");
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") ||
            !part["text"].is_string())
          return BadField(at_part, "only {\"type\": \"text\", \"text\": ...} parts are supported");
        text += part["text"].get<std::string>();
      }
    } else {
      return BadField(at + ".content", "must be a string or a list of text parts");
    }
    auto* msg = chat->add_messages();
    if (auto e = ReadMessageToolFields(m, at, msg)) return e;
    msg->set_content_null(content_null);
    // OpenAI's newer "developer" role is its "system": chat templates,
    // written before it, know only "system".
    msg->set_role(role_name == "developer" ? "system" : role_name);
    msg->set_content(std::move(text));
  }
  // vLLM's and llama-server's extensions: extra template variables
  // ({"enable_thinking": false} for Qwen3), and a prompt without the
  // assistant's opening.
  if (auto kw = body.find("chat_template_kwargs"); kw != body.end() && !kw->is_null()) {
    if (!kw->is_object()) return BadField("chat_template_kwargs", "must be an object");
    chat->set_template_kwargs_json(kw->dump());
  }
  return ReadContinuation(body, chat);
}

// vLLM's and SGLang's generation extensions that their routers send with
// every request: honoured where the server can (skip_special_tokens,
// include_stop_str_in_output / no_stop_trim), accepted without effect where
// they concern a part the served model does not have (the reasoning
// fields: no reasoning parser yet), refused by name where they cannot be
// honoured (min_tokens > 0, return_hidden_states: true).
std::optional<ApiError> ReadEngineExtensions(const json& body, v1::GenerateRequest* r) {
  bool skip_special = true;
  if (auto e = ReadBool(body, "skip_special_tokens", &skip_special)) return e;
  r->set_keep_special_tokens(!skip_special);
  bool include_stop = false, no_stop_trim = false;
  if (auto e = ReadBool(body, "include_stop_str_in_output", &include_stop)) return e;
  if (auto e = ReadBool(body, "no_stop_trim", &no_stop_trim)) return e;
  r->set_include_stop_str_in_output(include_stop || no_stop_trim);
  std::optional<int64_t> min_tokens;
  if (auto e = ReadInt(body, "min_tokens", 0, std::numeric_limits<int32_t>::max(), &min_tokens)) return e;
  if (min_tokens && *min_tokens > 0)
    return BadField("min_tokens",
                    "only 0 is supported: the scheduler cannot hold off the stop tokens and stop "
                    "strings for a number of tokens yet");
  bool hidden_states = false;
  if (auto e = ReadBool(body, "return_hidden_states", &hidden_states)) return e;
  if (hidden_states) return BadField("return_hidden_states", "hidden states are not returned by this server");
  // No effect until the server has a reasoning parser: every output is
  // content (docs/openai_api.md).
  for (const char* name : {"separate_reasoning", "stream_reasoning", "include_reasoning"}) {
    bool ignored = false;
    if (auto e = ReadBool(body, name, &ignored)) return e;
  }
  return std::nullopt;
}

std::optional<ApiError> ReadStop(const json& body, v1::GenerateRequest* r) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    r->add_stop(it->get<std::string>());
    return std::nullopt;
  }
  if (!it->is_array()) return BadField("stop", "must be a string or a list of strings");
  for (size_t i = 0; i < it->size(); ++i) {
    if (!(*it)[i].is_string()) return BadField(absl::StrCat("stop[", i, "]"), "must be a string");
    r->add_stop((*it)[i].get<std::string>());
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseRequest(Endpoint endpoint, std::string_view body_text,
                                     ParsedRequest* out) {
  json body = json::parse(body_text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) {
    ApiError e;
    e.message = "the request body is not valid JSON";
    return e;
  }
  if (!body.is_object()) {
    ApiError e;
    e.message = "the request body must be a JSON object";
    return e;
  }
  const auto& known = KnownFields(endpoint);
  for (const auto& [name, value] : body.items()) {
    if (!known.count(name) && !ResponseFormatFields().count(name)) {
      return BadField(name, "unrecognized request argument");
    }
  }
  if (auto e = RefuseUnlessDefault(body, endpoint)) return e;
  v1::GenerateRequest& r = out->request;

  if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return BadField("model", "must be a string");
    out->model = it->get<std::string>();
  }
  if (auto e = endpoint == Endpoint::kChatCompletions ? ReadMessages(body, &r)
                                                    : ReadPrompts(body, &r, &out->prompts))
    return e;
  if (endpoint == Endpoint::kCompletions) {
    if (auto e = ReadBool(body, "echo", &out->echo)) return e;
  }
  if (endpoint == Endpoint::kChatCompletions) {
    if (auto e = ReadTools(body, &out->tools, r.mutable_chat())) return e;
    KeepClientKeyOrder(body_text, r.mutable_chat());
  }
  if (auto it = body.find("modalities"); it != body.end() && !it->is_null()) {
    if (*it != json::array({"text"})) return BadField("modalities", "only [\"text\"] is supported");
  }

  std::optional<int64_t> n, max_tokens, max_completion_tokens, top_k, seed;
  // n's upper bound is the gateway's (request_builder.h: kMaxChoices).
  if (auto e = ReadInt(body, "n", 1, std::numeric_limits<int32_t>::max(), &n)) return e;
  if (n) {
    out->n = static_cast<int>(*n);
    r.set_n(static_cast<int32_t>(*n));
  }
  // Completions' max_tokens: 0 generates nothing (with echo: the prompt
  // alone, OpenAI's way to read a prompt back).
  const int64_t min_max_tokens = endpoint == Endpoint::kCompletions ? 0 : 1;
  if (auto e = ReadInt(body, "max_tokens", min_max_tokens, std::numeric_limits<int32_t>::max(),
                       &max_tokens))
    return e;
  out->max_tokens_zero = max_tokens && *max_tokens == 0;
  if (auto e = ReadInt(body, "max_completion_tokens", 1, std::numeric_limits<int32_t>::max(),
                       &max_completion_tokens))
    return e;
  // OpenAI's newer name wins where both are given.
  if (max_completion_tokens) max_tokens = max_completion_tokens;
  if (max_tokens) r.set_max_tokens(static_cast<int32_t>(*max_tokens));

  std::optional<double> temperature, top_p, min_p, repetition_penalty, pipo_tau;
  if (auto e = ReadNumber(body, "temperature", 0, 2, &temperature)) return e;
  if (auto e = ReadNumber(body, "top_p", 0, 1, &top_p)) return e;
  if (auto e = ReadNumber(body, "min_p", 0, 1, &min_p)) return e;
  if (auto e = ReadNumber(body, "repetition_penalty", 0, 1e6, &repetition_penalty)) return e;
  if (repetition_penalty && *repetition_penalty == 0)
    return BadField("repetition_penalty", "must be > 0 (1 = off)");
  if (auto e = ReadNumber(body, "pipo_tau", 0, 1e6, &pipo_tau)) return e;
  // vLLM's top_k: -1 or 0 = off.
  if (auto e = ReadInt(body, "top_k", -1, std::numeric_limits<int32_t>::max(), &top_k)) return e;
  if (auto e = ReadInt(body, "seed", std::numeric_limits<int64_t>::min(),
                       std::numeric_limits<int64_t>::max(), &seed))
    return e;
  auto* s = r.mutable_sampling();
  // OpenAI's default temperature is 1 (sampling); 0 is greedy.
  s->set_temperature(static_cast<float>(temperature.value_or(1.0)));
  if (top_p) s->set_top_p(static_cast<float>(*top_p));
  if (min_p) s->set_min_p(static_cast<float>(*min_p));
  if (repetition_penalty) s->set_repetition_penalty(static_cast<float>(*repetition_penalty));
  if (top_k && *top_k > 0) s->set_top_k(static_cast<int32_t>(*top_k));
  if (seed) s->set_seed(static_cast<uint64_t>(*seed));
  if (pipo_tau) r.set_pipo_tau(static_cast<float>(*pipo_tau));

  if (auto e = ReadResponseFormat(body, &r)) return e;
  if (auto e = ReadPenaltiesAndLogprobs(endpoint, body, &r)) return e;
  if (auto e = ReadStop(body, &r)) return e;
  if (auto it = body.find("stop_token_ids"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) return BadField("stop_token_ids", "must be a list of token ids");
    for (size_t i = 0; i < it->size(); ++i) {
      const json& v = (*it)[i];
      if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
          v.get<int64_t>() > std::numeric_limits<int32_t>::max())
        return BadField(absl::StrCat("stop_token_ids[", i, "]"), "must be a non-negative integer");
      r.add_stop_token_ids(v.get<int32_t>());
    }
  }
  bool ignore_eos = false;
  if (auto e = ReadBool(body, "ignore_eos", &ignore_eos)) return e;
  r.set_ignore_eos(ignore_eos);
  if (auto e = ReadEngineExtensions(body, &r)) return e;
  if (auto it = body.find("policy"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return BadField("policy", absl::StrCat("must be one of ", PolicyNames()));
    auto policy = PolicyFromName(it->get<std::string>());
    if (!policy.ok()) return BadField("policy", std::string(policy.status().message()));
    r.set_policy(*policy);
  }
  if (auto e = ReadBool(body, "stream", &out->stream)) return e;
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!out->stream) return BadField("stream_options", "is only allowed when stream is true");
    if (!it->is_object()) return BadField("stream_options", "must be an object");
    for (const auto& [name, value] : it->items()) {
      if (name != "include_usage" && name != "continuous_usage_stats")
        return BadField("stream_options." + name, "unrecognized option");
    }
    if (auto e = ReadBool(*it, "include_usage", &out->include_usage))
      return BadField("stream_options.include_usage", "must be true or false");
    bool continuous = false;
    if (ReadBool(*it, "continuous_usage_stats", &continuous) || continuous)
      return BadField("stream_options.continuous_usage_stats", "is not supported (false or absent only)");
  }
  // vLLM's cache_salt: a non-empty string when given. Its length is the
  // shared validation's (request_builder.h), as for the gRPC field.
  if (auto it = body.find("cache_salt"); it != body.end() && !it->is_null()) {
    if (!it->is_string() || it->get_ref<const std::string&>().empty())
      return BadField("cache_salt", "must be a non-empty string");
    r.set_cache_salt(it->get<std::string>());
  }
  if (auto it = body.find("user"); it != body.end() && !it->is_null()) {
    if (!it->is_string()) return BadField("user", "must be a string");
    out->user = it->get<std::string>();
  }
  return std::nullopt;
}

std::string ToOpenAiMessage(Endpoint endpoint, const std::string& grpc_message,
                            std::string* param) {
  const size_t colon = grpc_message.find(": ");
  if (colon == std::string::npos) {
    param->clear();
    return grpc_message;
  }
  std::string field = grpc_message.substr(0, colon);
  const std::string prompt_name = endpoint == Endpoint::kChatCompletions ? "messages"
                                  : endpoint == Endpoint::kResponses     ? "input"
                                                                         : "prompt";
  auto starts = [&](const char* p) { return field.rfind(p, 0) == 0; };
  if (starts("sampling.")) {
    field = field.substr(9);
  } else if (starts("logprobs.top_logprobs")) {
    field = endpoint == Endpoint::kChatCompletions ? "top_logprobs" : "logprobs";
  } else if (starts("prompt.chat.tools_json")) {
    field = "tools";
  } else if (starts("prompt.chat.template_kwargs_json")) {
    field = "chat_template_kwargs";
  } else if (starts("prompt.chat.continue_final_message")) {
    field = "continue_final_message";
  } else if (starts("prompt.chat.messages")) {
    field = (endpoint == Endpoint::kResponses ? "input" : "messages") + field.substr(20);
  } else if (starts("prompt")) {
    field = prompt_name;
  }
  *param = field;
  return field + grpc_message.substr(colon);
}

}  // namespace specline::openai
