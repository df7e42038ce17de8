#include "services/openai/logprobs_json.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace specline::openai {
namespace {

using nlohmann::json;

// JSON has no infinities: OpenAI reports an impossible token as -9999.0.
// NaN (a row the scheduler did not have, which it logs) becomes null.
json LogprobValue(float v) {
  if (std::isnan(v)) return nullptr;
  if (!std::isfinite(v) || v < -9999.0f) return -9999.0;
  return v;
}

json Bytes(const std::string& s) {
  json out = json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

LogprobsJson::LogprobsJson(Endpoint endpoint, const Tokenizer* tokenizer)
    : endpoint_(endpoint),
      tokenizer_(tokenizer),
      prev_(tokenizer ? tokenizer->vocab_size() : 0),
      whole_(Empty()) {}

json LogprobsJson::Empty() const {
  if (endpoint_ == Endpoint::kChatCompletions) {
    return {{"content", json::array()}, {"refusal", nullptr}};
  }
  return {{"tokens", json::array()},
          {"token_logprobs", json::array()},
          {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
}

std::string LogprobsJson::Spell(int32_t id) const {
  if (!tokenizer_ || id < 0 || id >= tokenizer_->vocab_size()) return absl::StrCat("token_id:", id);
  return tokenizer_->TokenBytes(prev_, id);
}

json LogprobsJson::Add(const v1::GenerateResponse& message) {
  json out = Empty();
  for (const v1::TokenLogprob& lp : message.logprobs()) {
    const std::string text = Spell(lp.token_id());
    if (endpoint_ == Endpoint::kChatCompletions) {
      json top = json::array();
      for (const v1::TopLogprob& t : lp.top()) {
        const std::string s = Spell(t.token_id());
        top.push_back({{"token", s}, {"logprob", LogprobValue(t.logprob())}, {"bytes", Bytes(s)}});
      }
      json entry = {{"token", text},
                    {"logprob", LogprobValue(lp.logprob())},
                    {"bytes", Bytes(text)},
                    {"top_logprobs", std::move(top)}};
      out["content"].push_back(entry);
      whole_["content"].push_back(std::move(entry));
    } else {
      // A dict of the alternatives, and the chosen token (vLLM's shape).
      json top = json::object();
      for (const v1::TopLogprob& t : lp.top()) top[Spell(t.token_id())] = LogprobValue(t.logprob());
      top[text] = LogprobValue(lp.logprob());
      const json values[] = {text, LogprobValue(lp.logprob()), top, text_offset_};
      const char* keys[] = {"tokens", "token_logprobs", "top_logprobs", "text_offset"};
      for (int k = 0; k < 4; ++k) {
        out[keys[k]].push_back(values[k]);
        whole_[keys[k]].push_back(values[k]);
      }
      text_offset_ += static_cast<int64_t>(text.size());
    }
    prev_ = lp.token_id();
  }
  return out;
}

}  // namespace specline::openai
