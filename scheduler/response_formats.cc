#include "scheduler/response_formats.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/model_tokenizer.h"

namespace specline::scheduler {

absl::StatusOr<std::unique_ptr<ResponseFormats>> ResponseFormats::Open(
    const ModelSource& model, const std::string& tokenizer_path) {
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = OpenTokenizerFor(model, tokenizer_path);
  } catch (const std::exception& e) {
    return absl::FailedPreconditionError(
        absl::StrCat("no tokenizer for structured output: ", e.what()));
  }
  return std::make_unique<ResponseFormats>(std::move(tokenizer), model.config().vocab_size);
}

ResponseFormats::ResponseFormats(std::unique_ptr<Tokenizer> tokenizer, int32_t model_vocab_size)
    : tokenizer_(std::move(tokenizer)),
      compiler_(std::make_unique<grammar::GrammarCompiler>(
          std::make_shared<grammar::GrammarVocabulary>(*tokenizer_, model_vocab_size))) {}

absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> ResponseFormats::Compile(
    const v1::ResponseFormat& format) {
  auto compiled = compiler_->Compile(format);
  if (!compiled.ok()) {
    return absl::Status(compiled.status().code(),
                        absl::StrCat("response_format: ", compiled.status().message()));
  }
  return compiled;
}

}  // namespace specline::scheduler
