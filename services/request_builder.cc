#include "model/grammar/response_format_grammar.h"
#include "proto/policy_names.h"
#include "services/request_builder.h"

#include <cmath>
#include <random>

#include "absl/strings/cord.h"

#include "absl/strings/str_cat.h"
#include "model/runtime/logprobs.h"
#include "model/runtime/sampler.h"

namespace specline {
namespace {

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

bool InRange01(float v) { return std::isfinite(v) && v >= 0.0f && v <= 1.0f; }

absl::Status ValidateSampling(const v1::SamplingParams& s, int32_t vocab_size) {
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
  // OpenAI's ranges (SamplingParams::Validate checks them again in the
  // scheduler, for clients of the internal API).
  auto penalty = [](float v) { return std::isfinite(v) && v >= -2.0f && v <= 2.0f; };
  if (!penalty(s.presence_penalty()))
    return Invalid("sampling.presence_penalty",
                   absl::StrCat("must be in [-2, 2], got ", s.presence_penalty()));
  if (!penalty(s.frequency_penalty()))
    return Invalid("sampling.frequency_penalty",
                   absl::StrCat("must be in [-2, 2], got ", s.frequency_penalty()));
  if (s.logit_bias_size() > SamplingParams::kMaxLogitBias)
    return Invalid("sampling.logit_bias", absl::StrCat("at most ", SamplingParams::kMaxLogitBias,
                                                       " entries, got ", s.logit_bias_size()));
  for (const auto& [id, bias] : s.logit_bias()) {
    if (id < 0 || id >= vocab_size)
      return Invalid("sampling.logit_bias", absl::StrCat("token id ", id, " is outside the vocabulary [0, ",
                                                         vocab_size, ")"));
    if (!(std::isfinite(bias) && bias >= -100.0f && bias <= 100.0f))
      return Invalid("sampling.logit_bias",
                     absl::StrCat("the bias of token ", id, " must be in [-100, 100], got ", bias));
  }
  return absl::OkStatus();
}

absl::Status ValidatePolicy(int policy) {
  if (!v1::DecodingPolicy_IsValid(policy))
    return Invalid("policy", absl::StrCat("unknown value ", policy));
  // PPSD, SPD, PTP and PIPO depend on the heads the scheduler was started
  // with: it decides (FAILED_PRECONDITION when it has none).
  return absl::OkStatus();
}

// The grammar of a response format is vocabulary-independent and cheap to
// build: a schema, regex or grammar that cannot compile is refused here,
// before any stream starts, rather than by the scheduler (which compiles it
// over the vocabulary) after the stream's headers went out.
absl::Status ValidateResponseFormat(const v1::GenerateRequest& r) {
  if (!r.has_response_format()) return absl::OkStatus();
  if (r.policy() == v1::DECODING_POLICY_PTP || r.policy() == v1::DECODING_POLICY_PIPO) {
    return Invalid("response_format", absl::StrCat("structured output is not available with policy ",
                                                   PolicyShortName(r.policy()),
                                                   " (use ar, ppsd, spd or recycle)"));
  }
  if (absl::StatusOr<xgrammar::Grammar> g = grammar::GrammarOf(r.response_format()); !g.ok()) {
    return Invalid("response_format", std::string(g.status().message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> TokenizePrompt(const v1::GenerateRequest& r,
                                                    const ServedModel& m, const RequestRules& rules) {
  switch (r.prompt_case()) {
    case v1::GenerateRequest::kText: {
      if (r.text().empty() && rules.openai && m.tokenizer && m.tokenizer->bos_id() >= 0)
        return std::vector<int32_t>{m.tokenizer->bos_id()};
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

absl::Status CheckContinuation(const v1::ChatMessages& chat) {
  if (!chat.continue_final_message()) return absl::OkStatus();
  // The last message is continued, so nothing may follow it.
  if (!chat.no_generation_prompt())
    return Invalid("prompt.chat.continue_final_message",
                   "cannot be combined with a generation prompt (set no_generation_prompt / "
                   "add_generation_prompt: false)");
  if (chat.messages().empty()) return Invalid("prompt.chat.messages", "is empty");
  const v1::ChatMessage& last = chat.messages(chat.messages_size() - 1);
  if (last.role() != "assistant")
    return Invalid("prompt.chat.continue_final_message",
                   absl::StrCat("needs the last message to be the assistant's, got '", last.role(), "'"));
  if (last.content_null())
    return Invalid("prompt.chat.continue_final_message", "the last message has no content to continue");
  // As llama-server: a turn of calls is whole; the model cannot go on with it.
  if (!last.tool_calls_json().empty())
    return Invalid("prompt.chat.continue_final_message",
                   "the last message carries tool calls; an assistant turn of calls cannot be continued");
  return absl::OkStatus();
}

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
  if (absl::Status s = CheckContinuation(chat); !s.ok()) return s;
  if (!chat.template_kwargs_json().empty()) {
    options.extra = nlohmann::ordered_json::parse(chat.template_kwargs_json(), nullptr,
                                                  /*allow_exceptions=*/false);
    if (!options.extra.is_object())
      return Invalid("prompt.chat.template_kwargs_json", "must be a JSON object");
  }
  absl::StatusOr<std::string> text = m.chat_template->Apply(messages, options);
  if (!text.ok()) return Invalid("prompt.chat", std::string(text.status().message()));
  if (chat.continue_final_message()) return CutAfterFinalMessage(*text, msgs[msgs.size() - 1].content());
  return text;
}

absl::StatusOr<std::string> CutAfterFinalMessage(const std::string& rendered,
                                                 const std::string& final_content) {
  // transformers' apply_chat_template(continue_final_message=True), which
  // vLLM calls: find the stripped content's last occurrence; keep the
  // content's trailing whitespace when the template kept it, else cut
  // after the stripped content.
  constexpr std::string_view kSpace = " \t\n\r\f\v";
  const size_t first = final_content.find_first_not_of(kSpace);
  const std::string lstripped = first == std::string::npos ? "" : final_content.substr(first);
  const size_t last = lstripped.find_last_not_of(kSpace);
  const std::string stripped = last == std::string::npos ? "" : lstripped.substr(0, last + 1);
  const size_t at = rendered.rfind(stripped);
  if (at == std::string::npos)
    return Invalid("prompt.chat.continue_final_message",
                   "the final message does not appear in the prompt the chat template renders "
                   "(the template changes or drops part of it)");
  // (As transformers compares: the content with its leading whitespace
  // against as many characters as the left-stripped content has.)
  if (rendered.compare(at, lstripped.size(), final_content) == 0)
    return rendered.substr(0, at + lstripped.size());
  return rendered.substr(0, at + stripped.size());
}

int32_t UsableContext(const ServedModel& m, const RequestRules& rules) {
  if (rules.kv_capacity_tokens > 0 && rules.kv_capacity_tokens < m.context_length)
    return static_cast<int32_t>(rules.kv_capacity_tokens);
  return m.context_length;
}

absl::StatusOr<PreparedRequest> PrepareRequest(const v1::GenerateRequest& r,
                                               const ServedModel& m, const RequestRules& rules) {
  // Cheap checks first, so a bad request costs no tokenization.
  if (absl::Status s = ValidateSampling(r.sampling(), m.vocab_size); !s.ok()) return s;
  if (r.logprobs().top_logprobs() < 0 || r.logprobs().top_logprobs() > kMaxTopLogprobs)
    return Invalid("logprobs.top_logprobs", absl::StrCat("must be in [0, ", kMaxTopLogprobs, "], got ",
                                                         r.logprobs().top_logprobs()));
  if (r.logprobs().top_logprobs() > 0 && !r.logprobs().enabled())
    return Invalid("logprobs.top_logprobs", "needs logprobs.enabled");
  if (absl::Status s = ValidatePolicy(r.policy()); !s.ok()) return s;
  if (absl::Status s = ValidateResponseFormat(r); !s.ok()) return s;
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
  if (r.n() < 0 || r.n() > kMaxChoices)
    return Invalid("n", absl::StrCat("must be in [1, ", kMaxChoices, "] (0 = 1), got ", r.n()));
  if (r.request_id().size() > 256) return Invalid("request_id", "longer than 256 bytes");
  if (r.cache_salt().size() > kMaxCacheSaltBytes)
    return Invalid("cache_salt", absl::StrCat("longer than ", kMaxCacheSaltBytes, " bytes"));

  auto prompt = TokenizePrompt(r, m, rules);
  if (!prompt.ok()) return prompt.status();
  if (prompt->empty()) return Invalid("prompt", "encodes to no tokens");
  const int32_t n = static_cast<int32_t>(prompt->size());
  const int32_t context = UsableContext(m, rules);
  auto too_long = [&](const std::string& why) {
    absl::Status st = Invalid("prompt", why);
    st.SetPayload(kErrorCodePayload, absl::Cord(kContextLengthExceeded));
    return st;
  };
  // At least one position must remain for a generated token.
  const int32_t prompt_limit =
      m.max_prompt_tokens > 0 ? std::min(m.max_prompt_tokens, context - 1) : context - 1;
  if (n > prompt_limit) {
    if (prompt_limit < context - 1)  // --max-prompt-tokens, not the context
      return Invalid("prompt", absl::StrCat("has ", n, " tokens; the limit is ", prompt_limit,
                                            " (--max-prompt-tokens; context length ", context, ")"));
    return too_long(absl::StrCat("has ", n, " tokens; the limit is ", prompt_limit,
                                 " (context length ", context,
                                 ", one position is left for the completion)"));
  }
  // max_tokens: the gRPC API clamps it to what fits (finish reason LENGTH),
  // as vLLM's and llama.cpp's servers clamp theirs; the OpenAI API refuses
  // one that does not fit, as OpenAI does, and reads an unset one as
  // "up to what fits".
  int32_t max_tokens = r.max_tokens();
  if (rules.openai && max_tokens > context - n) {
    return too_long(absl::StrCat("has ", n, " tokens and max_tokens is ", max_tokens, ": ",
                                 int64_t{n} + max_tokens, " tokens, more than the context length ",
                                 context, " (at most ", context - n,
                                 " completion tokens fit after this prompt)"));
  }
  if (max_tokens == 0) max_tokens = rules.openai ? context - n : m.default_max_tokens;
  max_tokens = std::min(max_tokens, context - n);

  PreparedRequest out;
  internal::SubmitRequest& s = out.submit;
  s.mutable_prompt()->Assign(prompt->begin(), prompt->end());
  *s.mutable_sampling() = r.sampling();
  if (!r.sampling().has_seed()) {
    // "Unset: a random seed per request" -- chosen here so logs can show it.
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    s.mutable_sampling()->set_seed(rng());
  }
  s.set_max_tokens(max_tokens);
  if (!r.ignore_eos() && m.tokenizer) {
    for (int32_t id : m.tokenizer->stop_ids()) s.add_stop_token_ids(id);
  }
  for (int32_t id : r.stop_token_ids()) s.add_stop_token_ids(id);
  s.set_policy(r.policy());
  if (r.has_pipo_tau()) s.set_pipo_tau(r.pipo_tau());
  if (r.has_response_format()) *s.mutable_response_format() = r.response_format();
  if (r.logprobs().enabled()) *s.mutable_logprobs() = r.logprobs();
  out.stop_strings.assign(r.stop().begin(), r.stop().end());
  out.detok_prev = prompt->back();
  out.cache_salt = r.cache_salt();
  out.keep_special_tokens = r.keep_special_tokens();
  out.include_stop_str_in_output = r.include_stop_str_in_output();
  return out;
}

}  // namespace specline
