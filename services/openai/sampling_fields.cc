#include "services/openai/sampling_fields.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "absl/strings/str_cat.h"

namespace specline::openai {
namespace {

using nlohmann::json;

constexpr int kMaxLogitBias = 300;    // OpenAI's limits
constexpr int kMaxTopLogprobs = 20;

std::optional<ApiError> ReadPenalty(const json& body, const char* name, float* out) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return BadField(name, "must be a number");
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < -2.0 || v > 2.0)
    return BadField(name, absl::StrCat("must be in [-2, 2], got ", it->dump()));
  *out = static_cast<float>(v);
  return std::nullopt;
}

std::optional<ApiError> ReadLogitBias(const json& body, v1::SamplingParams* s) {
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_object()) return BadField("logit_bias", "must be an object of token id -> bias");
  if (it->size() > kMaxLogitBias)
    return BadField("logit_bias", absl::StrCat("at most ", kMaxLogitBias, " entries, got ", it->size()));
  for (const auto& [key, value] : it->items()) {
    // Keys are token ids written as strings ("50256").
    char* end = nullptr;
    errno = 0;
    const long long id = key.empty() ? -1 : std::strtoll(key.c_str(), &end, 10);
    if (key.empty() || *end != '\0' || errno != 0 || id < 0 ||
        id > std::numeric_limits<int32_t>::max())
      return BadField("logit_bias", absl::StrCat("'", key, "' is not a token id"));
    if (!value.is_number()) return BadField("logit_bias", absl::StrCat("the bias of ", key, " must be a number"));
    const double b = value.get<double>();
    if (!std::isfinite(b) || b < -100.0 || b > 100.0)
      return BadField("logit_bias", absl::StrCat("the bias of ", key, " must be in [-100, 100], got ", value.dump()));
    (*s->mutable_logit_bias())[static_cast<int32_t>(id)] = static_cast<float>(b);
  }
  return std::nullopt;
}

std::optional<ApiError> ReadTopN(const json& v, const char* name, int32_t* out) {
  if (!v.is_number_integer()) return BadField(name, "must be an integer");
  if (v.is_number_unsigned() ? v.get<uint64_t>() > kMaxTopLogprobs
                             : (v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxTopLogprobs))
    return BadField(name, absl::StrCat("must be in [0, ", kMaxTopLogprobs, "], got ", v.dump()));
  *out = v.get<int32_t>();
  return std::nullopt;
}

std::optional<ApiError> ReadLogprobs(Endpoint endpoint, const json& body, v1::GenerateRequest* r) {
  auto lp = body.find("logprobs");
  auto top = body.find("top_logprobs");
  const bool has_lp = lp != body.end() && !lp->is_null();
  const bool has_top = top != body.end() && !top->is_null();
  int32_t n = 0;
  if (endpoint == Endpoint::kChatCompletions) {
    if (has_lp && !lp->is_boolean()) return BadField("logprobs", "must be true or false");
    const bool on = has_lp && lp->get<bool>();
    if (has_top) {
      if (auto e = ReadTopN(*top, "top_logprobs", &n)) return e;
      if (!on) return BadField("top_logprobs", "needs logprobs: true");
    }
    if (!on) return std::nullopt;
  } else {
    // Completions: `logprobs: k` asks for the chosen tokens' logprobs and k
    // alternatives (0 included, as vLLM reads it).
    if (has_top) return BadField("top_logprobs", "is a chat field; /v1/completions takes logprobs: <k>");
    if (!has_lp) return std::nullopt;
    if (auto e = ReadTopN(*lp, "logprobs", &n)) return e;
  }
  r->mutable_logprobs()->set_enabled(true);
  r->mutable_logprobs()->set_top_logprobs(n);
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ReadPenaltiesAndLogprobs(Endpoint endpoint, const json& body,
                                                 v1::GenerateRequest* r) {
  v1::SamplingParams* s = r->mutable_sampling();
  float v = 0;
  if (auto e = ReadPenalty(body, "presence_penalty", &v)) return e;
  s->set_presence_penalty(v);
  v = 0;
  if (auto e = ReadPenalty(body, "frequency_penalty", &v)) return e;
  s->set_frequency_penalty(v);
  if (auto e = ReadLogitBias(body, s)) return e;
  return ReadLogprobs(endpoint, body, r);
}

}  // namespace specline::openai
