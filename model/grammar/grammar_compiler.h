// Compiles response formats into grammars over one vocabulary, and keeps the
// most recently used ones: compiling precomputes xgrammar's adaptive token
// mask cache (for each grammar state, which tokens are surely allowed,
// surely forbidden, or must be checked), which is what keeps the per-token
// mask cheap, and costs milliseconds to seconds, so requests that repeat a
// format (an agent's tool schema, a pipeline's extraction schema) pay once.
// Thread-safe: one compiler per vocabulary, shared by every request.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include <xgrammar/compiler.h>

#include "absl/status/statusor.h"
#include "model/grammar/grammar_vocabulary.h"
#include "model/grammar/response_format_grammar.h"
#include "specline/v1/generation.pb.h"

namespace specline::grammar {

// A grammar compiled for one vocabulary; immutable, shared by the matchers
// of every sequence that uses it.
struct CompiledGrammar {
  std::shared_ptr<const GrammarVocabulary> vocabulary;
  xgrammar::CompiledGrammar compiled;
};

struct CompilerOptions {
  JsonOptions json;
  int threads = 2;                      // xgrammar's threads per compile
  size_t cache_entries = 256;           // most formats kept
  int64_t cache_bytes = int64_t{512} << 20;  // most memory the kept grammars take
};

class GrammarCompiler {
 public:
  explicit GrammarCompiler(std::shared_ptr<const GrammarVocabulary> vocabulary,
                           CompilerOptions options = {});
  ~GrammarCompiler();

  // The compiled grammar of `format`, from the cache when this format was
  // compiled before. InvalidArgument (GrammarOf's message) on a bad format.
  // Two threads asking for a new format at once may both compile it.
  absl::StatusOr<std::shared_ptr<const CompiledGrammar>> Compile(const v1::ResponseFormat& format);

  const GrammarVocabulary& vocabulary() const { return *vocabulary_; }
  size_t cached_entries() const;
  int64_t cached_bytes() const;

 private:
  struct Entry {
    std::string key;
    std::shared_ptr<const CompiledGrammar> grammar;
    int64_t bytes;
  };
  std::shared_ptr<const GrammarVocabulary> vocabulary_;
  CompilerOptions options_;
  std::unique_ptr<xgrammar::GrammarCompiler> compiler_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  int64_t bytes_ = 0;
};

}  // namespace specline::grammar
