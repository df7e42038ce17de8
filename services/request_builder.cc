#include "services/request_builder.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"

namespace specline {
namespace {

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

bool InRange01(float v) { return std::isfinite(v) && v >= 0.0f && v <= 1.0f; }

absl::Status ValidateSampling(const v1::SamplingParams& s) {
  if (!std::isfinite(s.temperature()) || s.temperature() < 0.0f)
    return Invalid("sampling.temperature", absl::StrCat("must be >= 0, got ", s.temperature()));
  if (s.top_k() < 0) return Invalid("sampling.top_k", absl::StrCat("must be >= 0, got ", s.top_k()));
  if (!InRange01(s.top_p()))
    return Invalid("sampling.top_p", absl::StrCat("must be in [0, 1], got ", s.top_p()));
  if (!InRange01(s.min_p()))
    return Invalid("sampling.min_p", absl::StrCat("must be in [0, 1], got ", s.min_p()));
  if (!std::isfinite(s.repetition_penalty()) || s.repetition_penalty() < 0.0f)
    return Invalid("sampling.repetition_penalty",
                   absl::StrCat("must be >= 0 (0 or 1 = off), got ", s.repetition_penalty()));
  return absl::OkStatus();
}

absl::Status ValidatePolicy(int policy) {
  if (!v1::DecodingPolicy_IsValid(policy))
    return Invalid("policy", absl::StrCat("unknown value ", policy));
  // PPSD, SPD, PTP and PIPO depend on the heads the scheduler was started
  // with: it decides (FAILED_PRECONDITION when it has none).
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> TokenizePrompt(const v1::GenerateRequest& r,
                                                    const ServedModel& m) {
  switch (r.prompt_case()) {
    case v1::GenerateRequest::kText: {
      if (r.text().empty()) return Invalid("prompt.text", "is empty");
      if (!m.tokenizer)
        return Invalid("prompt.text", "this deployment has no tokenizer; send token_ids");
      return m.tokenizer->Encode(r.text(), m.tokenizer->add_bos_by_default(),
                                 /*parse_special=*/false);
    }
    case v1::GenerateRequest::kTokenIds: {
      const auto& ids = r.token_ids().ids();
      if (ids.empty()) return Invalid("prompt.token_ids", "is empty");
      for (int i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= m.vocab_size)
          return Invalid("prompt.token_ids",
                         absl::StrCat("id ", ids[i], " at index ", i, " is outside the vocabulary [0, ",
                                      m.vocab_size, ")"));
      }
      return std::vector<int32_t>(ids.begin(), ids.end());
    }
    case v1::GenerateRequest::kChat: {
      absl::StatusOr<std::string> rendered = RenderChat(r.chat(), m);
      if (!rendered.ok()) return rendered.status();
      // The template writes its own BOS where the model wants one.
      return m.tokenizer->Encode(*rendered, /*add_bos=*/false, /*parse_special=*/true);
    }
    case v1::GenerateRequest::PROMPT_NOT_SET:
      break;
  }
  return Invalid("prompt", "not set (one of text, token_ids, chat)");
}

// A message as transformers hands it to a template: content (null for an
// assistant turn of calls alone), tool_calls as
// [{"id", "type": "function", "function": {"name", "arguments"}}] with the
// arguments an object (templates print them with `tojson`, so OpenAI's
// JSON string would be quoted twice), tool_call_id and name.
absl::StatusOr<nlohmann::ordered_json> TemplateMessage(const v1::ChatMessage& msg, int i) {
  using nlohmann::ordered_json;
  ordered_json out = {{"role", msg.role()}};
  out["content"] = msg.content_null() ? ordered_json(nullptr) : ordered_json(msg.content());
  if (!msg.tool_calls_json().empty()) {
    ordered_json calls = ordered_json::parse(msg.tool_calls_json(), nullptr, false);
    if (!calls.is_array())
      return Invalid(absl::StrCat("prompt.chat.messages[", i, "].tool_calls_json"),
                     "must be a JSON list of calls");
    for (ordered_json& call : calls) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
        return Invalid(absl::StrCat("prompt.chat.messages[", i, "].tool_calls_json"),
                       "each call must be {\"type\": \"function\", \"function\": {...}}");
      if (!call.contains("type")) call["type"] = "function";
      ordered_json& fn = call["function"];
      if (fn.contains("arguments") && fn["arguments"].is_string()) {
        ordered_json args = ordered_json::parse(fn["arguments"].get<std::string>(), nullptr, false);
        // Arguments that are not JSON stay the string they were.
        if (!args.is_discarded()) fn["arguments"] = std::move(args);
      }
    }
    out["tool_calls"] = std::move(calls);
  }
  if (!msg.tool_call_id().empty()) out["tool_call_id"] = msg.tool_call_id();
  if (!msg.name().empty()) out["name"] = msg.name();
  return out;
}

}  // namespace

absl::StatusOr<std::string> RenderChat(const v1::ChatMessages& chat, const ServedModel& m) {
  const auto& msgs = chat.messages();
  if (msgs.empty()) return Invalid("prompt.chat.messages", "is empty");
  if (!m.chat_template) {
    return Invalid("prompt.chat", m.no_chat_template_reason.empty()
                                      ? "the served model has no chat template; send text or token_ids"
                                      : m.no_chat_template_reason);
  }
  if (!m.tokenizer) return Invalid("prompt.chat", "this deployment has no tokenizer");
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  for (int i = 0; i < msgs.size(); ++i) {
    if (msgs[i].role().empty())
      return Invalid(absl::StrCat("prompt.chat.messages[", i, "].role"), "is empty");
    // Which roles a conversation may hold is the template's to say: it
    // raises for one it refuses, and that becomes this request's 400.
    absl::StatusOr<nlohmann::ordered_json> message = TemplateMessage(msgs[i], i);
    if (!message.ok()) return message.status();
    messages.push_back(*std::move(message));
  }
  ChatRenderOptions options;
  if (!chat.tools_json().empty()) {
    options.tools = nlohmann::ordered_json::parse(chat.tools_json(), nullptr,
                                                  /*allow_exceptions=*/false);
    if (!options.tools.is_array())
      return Invalid("prompt.chat.tools_json", "must be a JSON list of tools");
    if (!options.tools.empty() && !m.tool_calls.template_reads_tools)
      return Invalid("prompt.chat.tools_json",
                     absl::StrCat("the chat template (", m.chat_template->origin(),
                                  ") does not render tools; start the gateway with a "
                                  "--chat-template that does"));
  }
  options.add_generation_prompt = !chat.no_generation_prompt();
  if (!chat.template_kwargs_json().empty()) {
    options.extra = nlohmann::ordered_json::parse(chat.template_kwargs_json(), nullptr,
                                                  /*allow_exceptions=*/false);
    if (!options.extra.is_object())
      return Invalid("prompt.chat.template_kwargs_json", "must be a JSON object");
  }
  absl::StatusOr<std::string> text = m.chat_template->Apply(messages, options);
  if (!text.ok()) return Invalid("prompt.chat", std::string(text.status().message()));
  return text;
}

absl::StatusOr<PreparedRequest> PrepareRequest(const v1::GenerateRequest& r,
                                               const ServedModel& m) {
  // Cheap checks first, so a bad request costs no tokenization.
  if (absl::Status s = ValidateSampling(r.sampling()); !s.ok()) return s;
  if (absl::Status s = ValidatePolicy(r.policy()); !s.ok()) return s;
  if (r.has_pipo_tau() && !(std::isfinite(r.pipo_tau()) && r.pipo_tau() >= 0.0f))
    return Invalid("pipo_tau", absl::StrCat("must be a finite number >= 0, got ", r.pipo_tau()));
  if (r.has_pipo_tau() && r.policy() != v1::DECODING_POLICY_PIPO &&
      r.policy() != v1::DECODING_POLICY_UNSPECIFIED)
    return Invalid("pipo_tau", "applies to policy DECODING_POLICY_PIPO only");
  if (r.max_tokens() < 0)
    return Invalid("max_tokens", absl::StrCat("must be >= 0 (0 = server default), got ", r.max_tokens()));
  if (r.stop_size() > kMaxStopStrings)
    return Invalid("stop", absl::StrCat("at most ", kMaxStopStrings, " stop strings, got ", r.stop_size()));
  for (int i = 0; i < r.stop_size(); ++i) {
    if (r.stop(i).empty()) return Invalid(absl::StrCat("stop[", i, "]"), "is empty");
    if (r.stop(i).size() > kMaxStopStringBytes)
      return Invalid(absl::StrCat("stop[", i, "]"),
                     absl::StrCat("longer than ", kMaxStopStringBytes, " bytes"));
  }
  if (!r.stop().empty() && !m.tokenizer)
    return Invalid("stop", "stop strings need a tokenizer; this deployment has none");
  if (r.stop_token_ids_size() > kMaxStopTokenIds)
    return Invalid("stop_token_ids", absl::StrCat("at most ", kMaxStopTokenIds, " ids"));
  for (int i = 0; i < r.stop_token_ids_size(); ++i) {
    const int32_t id = r.stop_token_ids(i);
    if (id < 0 || id >= m.vocab_size)
      return Invalid(absl::StrCat("stop_token_ids[", i, "]"),
                     absl::StrCat("id ", id, " is outside the vocabulary [0, ", m.vocab_size, ")"));
  }
  if (r.request_id().size() > 256) return Invalid("request_id", "longer than 256 bytes");
  if (r.cache_salt().size() > kMaxCacheSaltBytes)
    return Invalid("cache_salt", absl::StrCat("longer than ", kMaxCacheSaltBytes, " bytes"));

  auto prompt = TokenizePrompt(r, m);
  if (!prompt.ok()) return prompt.status();
  if (prompt->empty()) return Invalid("prompt", "encodes to no tokens");
  const int32_t n = static_cast<int32_t>(prompt->size());
  // At least one position must remain for a generated token.
  const int32_t prompt_limit =
      m.max_prompt_tokens > 0 ? std::min(m.max_prompt_tokens, m.context_length - 1)
                              : m.context_length - 1;
  if (n > prompt_limit)
    return Invalid("prompt", absl::StrCat("has ", n, " tokens; the limit is ", prompt_limit,
                                          " (context length ", m.context_length, ")"));

  PreparedRequest out;
  internal::SubmitRequest& s = out.submit;
  s.mutable_prompt()->Assign(prompt->begin(), prompt->end());
  *s.mutable_sampling() = r.sampling();
  if (!r.sampling().has_seed()) {
    // "Unset: a random seed per request" -- chosen here so logs can show it.
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    s.mutable_sampling()->set_seed(rng());
  }
  // max_tokens is clamped to what fits in the context (finish reason LENGTH),
  // as vLLM and llama.cpp's server do, rather than refused.
  int32_t max_tokens = r.max_tokens() > 0 ? r.max_tokens() : m.default_max_tokens;
  max_tokens = std::min(max_tokens, m.context_length - n);
  s.set_max_tokens(max_tokens);
  if (!r.ignore_eos() && m.tokenizer) {
    for (int32_t id : m.tokenizer->stop_ids()) s.add_stop_token_ids(id);
  }
  for (int32_t id : r.stop_token_ids()) s.add_stop_token_ids(id);
  s.set_policy(r.policy());
  if (r.has_pipo_tau()) s.set_pipo_tau(r.pipo_tau());
  out.stop_strings.assign(r.stop().begin(), r.stop().end());
  out.detok_prev = prompt->back();
  out.cache_salt = r.cache_salt();
  return out;
}

}  // namespace specline
