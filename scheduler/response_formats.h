// Structured output on the scheduler's side: the vocabulary grammars are
// compiled over (the tokenizer the gateway encodes with) and the compiler
// with its cache. Requests carry a specline.v1.ResponseFormat; Submit turns
// it into the compiled grammar their sequence keeps to.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/formats/model_source.h"
#include "model/grammar/grammar_compiler.h"
#include "model/tokenizer/tokenizer.h"
#include "specline/v1/generation.pb.h"

namespace specline::scheduler {

class ResponseFormats {
 public:
  // The model's tokenizer (or `tokenizer_path`), padded to the model's
  // vocabulary. FailedPrecondition when there is none (random test models):
  // the scheduler then serves free text only.
  static absl::StatusOr<std::unique_ptr<ResponseFormats>> Open(const ModelSource& model,
                                                               const std::string& tokenizer_path);
  ResponseFormats(std::unique_ptr<Tokenizer> tokenizer, int32_t model_vocab_size);

  // InvalidArgument naming the format's problem (prefixed "response_format: ").
  absl::StatusOr<std::shared_ptr<const grammar::CompiledGrammar>> Compile(
      const v1::ResponseFormat& format);

 private:
  std::unique_ptr<Tokenizer> tokenizer_;  // the vocabulary's, outlives it
  std::unique_ptr<grammar::GrammarCompiler> compiler_;
};

}  // namespace specline::scheduler
