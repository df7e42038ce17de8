#include "model/grammar/grammar_compiler.h"

#include <exception>
#include <utility>

#include "absl/status/status.h"

namespace specline::grammar {

GrammarCompiler::GrammarCompiler(std::shared_ptr<const GrammarVocabulary> vocabulary,
                                 CompilerOptions options)
    : vocabulary_(std::move(vocabulary)), options_(options) {
  // xgrammar's own cache is keyed by schema text alone; ours by the whole
  // format (prefix and suffix too), so its cache is off.
  compiler_ = std::make_unique<xgrammar::GrammarCompiler>(vocabulary_->info(), options_.threads,
                                                          /*cache_enabled=*/false);
}

GrammarCompiler::~GrammarCompiler() = default;

absl::StatusOr<std::shared_ptr<const CompiledGrammar>> GrammarCompiler::Compile(
    const v1::ResponseFormat& format) {
  const std::string key = format.SerializeAsString();
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second);
      return it->second->grammar;
    }
  }
  auto grammar = GrammarOf(format, options_.json);
  if (!grammar.ok()) return grammar.status();
  std::shared_ptr<const CompiledGrammar> compiled;
  try {
    compiled = std::make_shared<const CompiledGrammar>(
        CompiledGrammar{vocabulary_, compiler_->CompileGrammar(*grammar)});
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError("response_format: " + XgrammarMessage(e));
  }
  const int64_t bytes = static_cast<int64_t>(compiled->compiled.MemorySizeBytes());
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key)) return compiled;  // another thread compiled it meanwhile
  lru_.push_front(Entry{key, compiled, bytes});
  index_[key] = lru_.begin();
  bytes_ += bytes;
  while (lru_.size() > 1 &&
         (lru_.size() > options_.cache_entries || bytes_ > options_.cache_bytes)) {
    bytes_ -= lru_.back().bytes;
    index_.erase(lru_.back().key);
    lru_.pop_back();
  }
  return compiled;
}

size_t GrammarCompiler::cached_entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  return lru_.size();
}

int64_t GrammarCompiler::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace specline::grammar
