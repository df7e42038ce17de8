#include "model/grammar/grammar_matcher.h"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

#include <dlpack/dlpack.h>

namespace specline::grammar {

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)), matcher_(grammar_->compiled) {}

bool GrammarMatcher::FillAllowed(std::span<uint32_t> mask) {
  const int32_t words = mask_words();
  if (static_cast<int64_t>(mask.size()) < words) {
    throw std::invalid_argument("GrammarMatcher::FillAllowed: mask too small");
  }
  if (IsTerminated()) {
    std::fill(mask.begin(), mask.begin() + words, 0u);
    return true;
  }
  // xgrammar's bitmask is int32 words with the same bit order.
  int64_t shape[1] = {words};
  int64_t strides[1] = {1};
  DLTensor tensor{};
  tensor.data = mask.data();
  tensor.device = DLDevice{kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = DLDataType{kDLInt, 32, 1};
  tensor.shape = shape;
  tensor.strides = strides;
  tensor.byte_offset = 0;
  const bool constrained = matcher_.FillNextTokenBitmask(&tensor);
  // xgrammar fills whole words: ids past the vocabulary may read as allowed.
  if (const int32_t tail = grammar_->vocabulary->vocab_size() % 32) {
    mask[words - 1] &= (uint32_t{1} << tail) - 1;
  }
  return constrained;
}

bool GrammarMatcher::Accept(int32_t token) {
  const GrammarVocabulary& vocab = *grammar_->vocabulary;
  if (IsTerminated() || token < 0 || token >= vocab.vocab_size()) return false;
  // Rejected here so that xgrammar does not log a warning for each
  // forbidden draft: control and padding tokens spell nothing.
  if (vocab.bytes(token).empty() &&
      std::find(vocab.stop_ids().begin(), vocab.stop_ids().end(), token) == vocab.stop_ids().end()) {
    return false;
  }
  if (!matcher_.AcceptToken(token)) return false;
  ++accepted_;
  return true;
}

void GrammarMatcher::Rollback(int n) {
  if (n < 0 || n > accepted_) {
    throw std::out_of_range("GrammarMatcher::Rollback: " + std::to_string(n) + " of " +
                            std::to_string(accepted_) + " accepted tokens");
  }
  if (n == 0) return;
  matcher_.Rollback(n);
  accepted_ -= n;
}

int GrammarMatcher::DraftMasks(std::span<const int32_t> draft, std::span<uint32_t> masks) {
  const size_t words = static_cast<size_t>(mask_words());
  if (masks.size() < (draft.size() + 1) * words) {
    throw std::invalid_argument("GrammarMatcher::DraftMasks: masks too small");
  }
  int n = 0;
  FillAllowed(masks.subspan(0, words));
  for (int32_t id : draft) {
    if (!Accept(id)) break;
    ++n;
    FillAllowed(masks.subspan(n * words, words));
  }
  Rollback(n);
  return n;
}

std::vector<int32_t> GrammarMatcher::ForcedTokens(int max) {
  std::vector<int32_t> forced;
  if (max <= 0 || IsTerminated()) return forced;
  const std::string text = matcher_.FindJumpForwardString();
  if (text.empty()) return forced;
  for (int32_t id : grammar_->vocabulary->Spell(text)) {
    if (static_cast<int>(forced.size()) == max || !Accept(id)) break;
    forced.push_back(id);
  }
  Rollback(static_cast<int>(forced.size()));
  return forced;
}

void MaskLogits(std::span<const uint32_t> mask, std::span<float> logits) {
  const size_t n = std::min(logits.size(), mask.size() * 32);
  const float forbidden = -std::numeric_limits<float>::infinity();
  for (size_t w = 0; w * 32 < n; ++w) {
    const uint32_t bits = mask[w];
    if (bits == ~0u) continue;
    const size_t end = std::min(n, w * 32 + 32);
    if (bits == 0) {  // most words, where the grammar allows a few tokens
      std::fill(logits.begin() + w * 32, logits.begin() + end, forbidden);
      continue;
    }
    for (size_t t = w * 32; t < end; ++t) {
      if (!(bits >> (t % 32) & 1)) logits[t] = forbidden;
    }
  }
}

void GrammarMatcher::Reset() {
  matcher_.Reset();
  accepted_ = 0;
}

}  // namespace specline::grammar
