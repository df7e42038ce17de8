#include "scheduler/sequence_grammar.h"

#include <stdexcept>

namespace specline::scheduler {

SequenceGrammar::SequenceGrammar(std::shared_ptr<const grammar::CompiledGrammar> grammar)
    : matcher_(std::move(grammar)), masks_(1) {}

std::span<const uint32_t> SequenceGrammar::MaskAt(int i) {
  if (i < 0 || i > drafts()) throw std::out_of_range("SequenceGrammar::MaskAt: no such position");
  Mask& m = masks_[i];
  if (!m.computed) {
    // Only the chain's end can be missing: every earlier mask was filled
    // before the draft after it was checked against it.
    if (i != drafts()) throw std::logic_error("SequenceGrammar: a mask behind the chain's end is missing");
    m.bits.resize(matcher_.mask_words());
    m.full = !matcher_.FillAllowed(m.bits);
    m.computed = true;
  }
  if (m.full) return {};
  return m.bits;
}

bool SequenceGrammar::AddDraft(int32_t token) {
  if (std::span<const uint32_t> allowed = ChainEndMask();
      !allowed.empty() && !((allowed[token / 32] >> (token % 32)) & 1u)) {
    return false;
  }
  if (!matcher_.Accept(token)) return false;
  drafts_.push_back(token);
  masks_.emplace_back();
  forced_known_ = false;
  return true;
}

void SequenceGrammar::KeepDrafts(int n) {
  if (n < 0) n = 0;
  if (n >= drafts()) return;
  matcher_.Rollback(drafts() - n);
  drafts_.resize(n);
  masks_.resize(n + 1);
  forced_known_ = false;
}

bool SequenceGrammar::Verify(int32_t token) {
  if (!drafts_.empty() && drafts_.front() == token) {
    drafts_.pop_front();
    masks_.pop_front();
    return true;
  }
  DropDrafts();
  if (!matcher_.Accept(token)) return false;
  masks_.front() = Mask{};
  forced_known_ = false;
  return true;
}

std::vector<int32_t> SequenceGrammar::Forced(int max) {
  if (max <= 0 || matcher_.IsTerminated()) return {};
  if (!forced_known_ || forced_max_ != max) {
    forced_ = matcher_.ForcedTokens(max);
    forced_max_ = max;
    forced_known_ = true;
  }
  return forced_;
}

}  // namespace specline::scheduler
