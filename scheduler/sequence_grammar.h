// The grammar one sequence's output keeps to (structured output, enforced
// tool calls), along the chain the scheduler sends: the verified tokens,
// then the drafts sent ahead of them.
//
// Position v = tokens.size() is the next token to decide; drafts occupy
// v, v+1, ... The mask at v + i is the grammar's state after the verified
// tokens and the first i drafts, so MaskAt(i) is what the verifier of draft
// i (or, past the drafts, the next sampled token) applies. Drafts enter the
// grammar tentatively: a draft the grammar forbids is refused (the policy
// cuts its chain there), and a rejection rolls every draft back.
//
// Losslessness: the verifier's distribution at every position is the
// target's, masked by the grammar after the verified prefix, which is what
// constrained autoregressive decoding samples from; drafts only decide what
// is checked, never what the checks accept.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

#include "model/grammar/grammar_matcher.h"

namespace specline::scheduler {

class SequenceGrammar {
 public:
  explicit SequenceGrammar(std::shared_ptr<const grammar::CompiledGrammar> grammar);

  // The allowed-token mask at position v + i (0 <= i <= drafts()); empty
  // when the grammar allows every token there.
  std::span<const uint32_t> MaskAt(int i);
  std::span<const uint32_t> VerifiedMask() { return MaskAt(0); }
  std::span<const uint32_t> ChainEndMask() { return MaskAt(drafts()); }

  // Appends a draft at the chain's end when the grammar allows it there.
  bool AddDraft(int32_t token);
  // Keeps the first n drafts and rolls the rest back (a rejection, a
  // policy's flush, drafts a batch had no room for).
  void KeepDrafts(int n);
  void DropDrafts() { KeepDrafts(0); }
  // The token decided at v: the first draft when it was accepted, otherwise
  // the drafts are dropped and the token is taken. False when the grammar
  // forbids it (the caller's mask was not applied: a bug).
  bool Verify(int32_t token);

  // Tokens the grammar forces after the chain's end (at most `max`): drafts
  // with nothing to guess (grammar::GrammarMatcher::ForcedTokens).
  std::vector<int32_t> Forced(int max);

  // The grammar accepted a stop token after the verified tokens: the output
  // is complete.
  bool Terminated() const { return drafts_.empty() && matcher_.IsTerminated(); }
  int drafts() const { return static_cast<int>(drafts_.size()); }
  // The grammar ended at the chain's end (its last draft was a stop token):
  // nothing may be drafted after it.
  bool ChainEndTerminated() const { return matcher_.IsTerminated(); }

 private:
  grammar::GrammarMatcher matcher_;  // at the chain's end
  std::deque<int32_t> drafts_;
  // masks_[i]: the mask at v + i, computed when first asked for; `full`
  // marks a position where everything is allowed.
  struct Mask {
    bool computed = false;
    bool full = false;
    std::vector<uint32_t> bits;
  };
  std::deque<Mask> masks_;
  // Forced(max)'s answer at the current chain end (asked every step while a
  // sequence waits for a draft), until the chain moves.
  bool forced_known_ = false;
  int forced_max_ = 0;
  std::vector<int32_t> forced_;
};

}  // namespace specline::scheduler
