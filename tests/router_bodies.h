// Request bodies as vllm-router 0.1.17 forwards them (docs/routers.md): it
// parses a client's body into its typed request and serializes that again,
// so every vLLM and SGLang field without skip_serializing_if arrives with
// its default, whatever the client sent. Shared by the unit suite
// (gateway_router_fields_test) and the live one (serving_router_compat_test).
#pragma once

#include <nlohmann/json.hpp>

namespace specline::testing {

inline nlohmann::json UserChat(const std::string& text) {
  return nlohmann::json::array({{{"role", "user"}, {"content", text}}});
}

// `{"messages": messages, "max_tokens": max_tokens}` after the router.
inline nlohmann::json RouterChatBody(const nlohmann::json& messages, int max_tokens) {
  return {{"messages", messages},
          {"max_tokens", max_tokens},
          {"stream", false},
          {"logprobs", false},
          {"no_stop_trim", false},
          {"ignore_eos", false},
          {"continue_final_message", false},
          {"skip_special_tokens", true},
          {"separate_reasoning", true},
          {"stream_reasoning", true},
          {"return_hidden_states", false},
          {"include_reasoning", true}};
}

// `{"prompt": prompt, "max_tokens": max_tokens}` after the router.
inline nlohmann::json RouterCompletionBody(const nlohmann::json& prompt, int max_tokens) {
  return {{"prompt", prompt},          {"max_tokens", max_tokens},
          {"stream", false},           {"echo", false},
          {"no_stop_trim", false},     {"ignore_eos", false},
          {"skip_special_tokens", true}, {"return_hidden_states", false}};
}

}  // namespace specline::testing
