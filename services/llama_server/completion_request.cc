#include "services/llama_server/completion_request.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "services/llama_server/token_pieces.h"
#include "services/request_builder.h"

namespace specline::llama_server {
namespace {

using nlohmann::json;
using openai::ApiError;
using openai::BadField;

// llama-server's sampling defaults (common/common.h), reported back in
// generation_settings as applied.
constexpr double kTemperature = 0.8, kTopP = 0.95, kMinP = 0.05, kRepeatPenalty = 1.0;
constexpr int kTopK = 40;
constexpr int kMaxProbs = 20;  // what the scheduler returns per position

// A number field, its default when absent; a 400 naming it otherwise.
std::optional<ApiError> Number(const json& body, const char* key, double fallback, double* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) {
    *out = fallback;
    return std::nullopt;
  }
  if (!it->is_number()) return BadField(key, absl::StrCat("must be a number, got ", it->type_name()));
  *out = it->get<double>();
  return std::nullopt;
}

std::optional<ApiError> Integer(const json& body, const char* key, int64_t fallback, int64_t* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) {
    *out = fallback;
    return std::nullopt;
  }
  if (!it->is_number_integer())
    return BadField(key, absl::StrCat("must be an integer, got ", it->type_name()));
  *out = it->get<int64_t>();
  return std::nullopt;
}

std::optional<ApiError> Boolean(const json& body, const char* key, bool* out) {
  auto it = body.find(key);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return BadField(key, absl::StrCat("must be a boolean, got ", it->type_name()));
  *out = it->get<bool>();
  return std::nullopt;
}

// The fields llama-server has and specline does not implement, at the
// value that leaves the output as specline makes it; any other value is
// refused rather than silently ignored.
std::optional<ApiError> RefuseUnimplemented(const json& body) {
  static const std::pair<const char*, double> kNeutral[] = {
      {"typical_p", 1.0},        {"dynatemp_range", 0.0}, {"mirostat", 0.0},
      {"xtc_probability", 0.0},  {"dry_multiplier", 0.0}, {"top_n_sigma", -1.0},
      {"n_cmpl", 1.0},           {"min_keep", 0.0}};
  for (const auto& [key, neutral] : kNeutral) {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) continue;
    if (!it->is_number() || it->get<double>() != neutral)
      return BadField(key, absl::StrCat("is not supported by specline (only ", neutral, ")"));
  }
  if (body.value("post_sampling_probs", false) == true)
    return BadField("post_sampling_probs", "is not supported by specline");
  if (auto it = body.find("lora"); it != body.end() && !(it->is_array() && it->empty()))
    return BadField("lora", "LoRA adapters are not supported by specline");
  return std::nullopt;
}

std::optional<ApiError> ReadSampling(const json& body, CompletionRequest* out) {
  double temperature, top_p, min_p, repeat, presence, frequency;
  int64_t top_k, seed;
  for (auto e : {Number(body, "temperature", kTemperature, &temperature), Number(body, "top_p", kTopP, &top_p),
                 Number(body, "min_p", kMinP, &min_p), Number(body, "repeat_penalty", kRepeatPenalty, &repeat),
                 Number(body, "presence_penalty", 0, &presence),
                 Number(body, "frequency_penalty", 0, &frequency), Integer(body, "top_k", kTopK, &top_k),
                 Integer(body, "seed", -1, &seed)}) {
    if (e) return e;
  }
  v1::SamplingParams* s = out->request.mutable_sampling();
  // llama-server samples greedily at temperature <= 0; top_k <= 0 is off.
  s->set_temperature(static_cast<float>(std::max(0.0, temperature)));
  s->set_top_k(static_cast<int32_t>(std::clamp<int64_t>(top_k, 0, std::numeric_limits<int32_t>::max())));
  s->set_top_p(static_cast<float>(top_p));
  s->set_min_p(static_cast<float>(min_p));
  s->set_repetition_penalty(static_cast<float>(repeat));
  s->set_presence_penalty(static_cast<float>(presence));
  s->set_frequency_penalty(static_cast<float>(frequency));
  // -1 and 0xFFFFFFFF (LLAMA_DEFAULT_SEED) both mean a random seed.
  if (seed >= 0 && seed != 0xFFFFFFFFll) s->set_seed(static_cast<uint64_t>(seed));
  out->settings.update({{"temperature", temperature}, {"top_k", top_k}, {"top_p", top_p},
                        {"min_p", min_p}, {"repeat_penalty", repeat}, {"presence_penalty", presence},
                        {"frequency_penalty", frequency}, {"seed", seed < 0 ? 0xFFFFFFFFll : seed}});
  return std::nullopt;
}

// logit_bias as llama-server takes it: [[id, bias or false], ...] or
// {"id": bias}; token texts (which llama-server expands to their tokens)
// are refused.
std::optional<ApiError> ReadLogitBias(const json& body, v1::GenerateRequest* r) {
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return std::nullopt;
  auto add = [&](const json& id, const json& bias) -> std::optional<ApiError> {
    int64_t token = -1;
    if (id.is_number_integer()) token = id.get<int64_t>();
    else if (id.is_string() && !id.get<std::string>().empty() &&
             id.get<std::string>().find_first_not_of("0123456789") == std::string::npos)
      token = std::stoll(id.get<std::string>());
    else return BadField("logit_bias", "keys must be token ids (token texts are not supported)");
    if (bias.is_boolean() && !bias.get<bool>()) (*r->mutable_sampling()->mutable_logit_bias())[token] = -100;
    else if (bias.is_number()) (*r->mutable_sampling()->mutable_logit_bias())[token] = bias.get<float>();
    else return BadField("logit_bias", "a bias must be a number or false");
    return std::nullopt;
  };
  if (it->is_object()) {
    for (const auto& [id, bias] : it->items()) if (auto e = add(json(id), bias)) return e;
    return std::nullopt;
  }
  if (!it->is_array()) return BadField("logit_bias", "must be a list of [token id, bias] or an object");
  for (const json& pair : *it) {
    if (!pair.is_array() || pair.size() != 2) return BadField("logit_bias", "each entry must be [token id, bias]");
    if (auto e = add(pair[0], pair[1])) return e;
  }
  return std::nullopt;
}

// grammar (GBNF) or json_schema: the structured-output grammar.
std::optional<ApiError> ReadGrammar(const json& body, CompletionRequest* out) {
  auto grammar = body.find("grammar");
  auto schema = body.find("json_schema");
  const bool has_grammar = grammar != body.end() && !grammar->is_null() &&
                           !(grammar->is_string() && grammar->get<std::string>().empty());
  const bool has_schema = schema != body.end() && !schema->is_null();
  if (has_grammar && has_schema) return BadField("grammar", "give either grammar or json_schema, not both");
  if (has_grammar) {
    if (!grammar->is_string()) return BadField("grammar", "must be a GBNF grammar as a string");
    out->request.mutable_response_format()->set_ebnf(grammar->get<std::string>());
  } else if (has_schema) {
    if (!schema->is_object()) return BadField("json_schema", "must be a JSON Schema object");
    out->request.mutable_response_format()->set_json_schema(schema->dump());
  }
  out->settings["grammar"] = has_grammar ? grammar->get<std::string>() : std::string();
  return std::nullopt;
}

std::optional<ApiError> ReadStop(const json& body, v1::GenerateRequest* r, json* settings) {
  auto it = body.find("stop");
  (*settings)["stop"] = json::array();
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_array()) return BadField("stop", "must be a list of strings");
  for (const json& s : *it) {
    if (!s.is_string()) return BadField("stop", "must be a list of strings");
    r->add_stop(s.get<std::string>());
  }
  (*settings)["stop"] = *it;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ReadCompletionFields(const json& body, CompletionRequest* out) {
  if (!body.is_object()) return BadField("body", "must be a JSON object");
  if (auto e = RefuseUnimplemented(body)) return e;
  if (auto e = ReadSampling(body, out)) return e;
  int64_t n_predict = -1, n_probs = 0;
  // llama-server reads max_tokens when n_predict is absent.
  if (auto e = Integer(body, "max_tokens", -1, &n_predict)) return e;
  if (auto e = Integer(body, "n_predict", n_predict, &n_predict)) return e;
  if (auto e = Integer(body, "n_probs", 0, &n_probs)) return e;
  if (n_predict < -1) return BadField("n_predict", "must be -1 (as many as fit) or >= 0");
  if (n_probs < 0 || n_probs > kMaxProbs)
    return BadField("n_probs", absl::StrCat("must be in [0, ", kMaxProbs, "]"));
  out->n_predict_zero = n_predict == 0;
  // -1: up to what fits, as max_tokens unset on the OpenAI API.
  if (n_predict > 0) out->request.set_max_tokens(static_cast<int32_t>(std::min<int64_t>(n_predict, INT32_MAX)));
  out->n_probs = static_cast<int>(n_probs);
  if (n_probs > 0) {
    out->request.mutable_logprobs()->set_enabled(true);
    out->request.mutable_logprobs()->set_top_logprobs(static_cast<int32_t>(n_probs));
  }
  bool ignore_eos = false;
  bool cache_prompt = true;  // type-checked; the prefix cache is always on
  for (auto e : {Boolean(body, "stream", &out->stream), Boolean(body, "return_tokens", &out->return_tokens),
                 Boolean(body, "ignore_eos", &ignore_eos), Boolean(body, "cache_prompt", &cache_prompt)}) {
    if (e) return e;
  }
  out->request.set_ignore_eos(ignore_eos);
  if (auto e = ReadStop(body, &out->request, &out->settings)) return e;
  if (auto e = ReadLogitBias(body, &out->request)) return e;
  if (auto e = ReadGrammar(body, out)) return e;
  out->settings.update({{"n_predict", n_predict}, {"max_tokens", n_predict}, {"n_probs", n_probs},
                        {"ignore_eos", ignore_eos}, {"stream", out->stream}});
  return std::nullopt;
}

std::optional<ApiError> ReadCompletionPrompt(const json& prompt, const Tokenizer& tokenizer,
                                             CompletionRequest* out) {
  // A list without token ids is a list of prompts (llama-server's rule);
  // a string, a list of ids or a mix of ids and strings is one prompt.
  bool has_ids = false;
  if (prompt.is_array()) {
    for (const json& p : prompt) has_ids |= p.is_number_integer();
  }
  out->several = prompt.is_array() && !has_ids;
  if (out->several && prompt.empty()) return BadField("prompt", "must not be empty");
  const json single = json::array({prompt});
  const json& list = out->several ? prompt : single;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = out->several ? absl::StrCat("prompt[", i, "]") : "prompt";
    absl::StatusOr<std::vector<int32_t>> ids =
        TokenizeMixed(tokenizer, list[i], /*add_special=*/true, /*parse_special=*/true, field);
    if (!ids.ok()) {
      ApiError e;
      e.param = "prompt";
      e.message = std::string(ids.status().message());
      return e;
    }
    if (ids->empty()) return BadField(field, "must not be empty");
    out->prompts.push_back(*std::move(ids));
  }
  if (out->prompts.size() > static_cast<size_t>(kMaxChoices))
    return BadField("prompt", absl::StrCat("at most ", kMaxChoices, " prompts per request"));
  return std::nullopt;
}

}  // namespace specline::llama_server
