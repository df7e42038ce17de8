#include "services/llama_server/infill_prompt.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "services/llama_server/token_pieces.h"

namespace specline::llama_server {
namespace {

using nlohmann::json;
using openai::ApiError;
using openai::BadField;

constexpr int kBatch = 2048;  // llama-server's default n_batch, which its budgets use

void Append(std::vector<int32_t>* to, const std::vector<int32_t>& more) {
  to->insert(to->end(), more.begin(), more.end());
}

std::optional<ApiError> CheckExtra(const json& body) {
  auto it = body.find("input_extra");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_array())
    return BadField("input_extra", "must be a list of {\"filename\": string, \"text\": string}");
  for (size_t i = 0; i < it->size(); ++i) {
    const json& chunk = (*it)[i];
    const std::string field = absl::StrCat("input_extra[", i, "]");
    if (!chunk.is_object() || !chunk.contains("text") || !chunk["text"].is_string())
      return BadField(field, "must have a \"text\" string");
    if (chunk.contains("filename") && !chunk["filename"].is_string())
      return BadField(field + ".filename", "must be a string");
  }
  return std::nullopt;
}

// The repository-level context: <FIM_REP>, each chunk, the current file.
std::vector<int32_t> ExtraContext(const json& body, const Tokenizer& tok, const FimTokens& fim) {
  std::vector<int32_t> extra;
  if (fim.rep >= 0) {
    extra.push_back(fim.rep);
    Append(&extra, tok.Encode("myproject\n", false, false));
  }
  for (const json& chunk : body.value("input_extra", json::array())) {
    if (fim.sep >= 0) {
      extra.push_back(fim.sep);
      Append(&extra, tok.Encode(chunk.value("filename", std::string("tmp")) + "\n", false, false));
    } else {
      Append(&extra, tok.Encode("\n\n--- snippet ---\n\n", false, false));
    }
    Append(&extra, tok.Encode(chunk["text"].get<std::string>(), false, false));
  }
  if (fim.sep >= 0) {
    extra.push_back(fim.sep);
    Append(&extra, tok.Encode("filename\n", false, false));
  }
  return extra;
}

}  // namespace

std::optional<ApiError> InfillPrompt(const json& body, const Tokenizer& tokenizer, const FimTokens& fim,
                                     int32_t n_ctx, std::vector<int32_t>* ids) {
  for (const char* key : {"input_prefix", "input_suffix"}) {
    if (!body.contains(key)) return BadField(key, "is required");
  }
  if (body.contains("prompt") && !body["prompt"].is_string()) return BadField("prompt", "must be a string");
  if (auto e = CheckExtra(body)) return e;
  absl::StatusOr<std::vector<int32_t>> prefix =
      TokenizeMixed(tokenizer, body["input_prefix"], false, false, "input_prefix");
  absl::StatusOr<std::vector<int32_t>> suffix =
      TokenizeMixed(tokenizer, body["input_suffix"], false, false, "input_suffix");
  for (const auto* part : {&prefix, &suffix}) {
    if (!part->ok()) {
      ApiError e;
      e.message = std::string(part->status().message());
      return e;
    }
  }
  const std::vector<int32_t> prompt = tokenizer.Encode(body.value("prompt", std::string()), false, true);
  const std::vector<int32_t> extra = ExtraContext(body, tokenizer, fim);

  const size_t prefix_take = std::min<size_t>(prefix->size(), 3 * (kBatch / 4));
  const size_t suffix_take = std::min<size_t>(
      suffix->size(), std::max<int64_t>(0, kBatch / 4 - (2 + static_cast<int64_t>(prompt.size()))));
  const size_t extra_take = std::min<size_t>(extra.size(), std::max<int64_t>(0, n_ctx - kBatch + 2));

  ids->assign(extra.end() - extra_take, extra.end());
  if (tokenizer.add_bos_by_default() && tokenizer.bos_id() >= 0) ids->push_back(tokenizer.bos_id());
  ids->push_back(fim.pre);
  ids->insert(ids->end(), prefix->end() - prefix_take, prefix->end());
  Append(ids, prompt);
  ids->push_back(fim.suf);
  ids->insert(ids->end(), suffix->begin(), suffix->begin() + suffix_take);
  ids->push_back(fim.mid);
  return std::nullopt;
}

}  // namespace specline::llama_server
