// The grammar state of one sequence: which tokens may come next, and the
// tokens the grammar forces. Not thread-safe (one sequence, one thread at a
// time); cheap to create from a shared CompiledGrammar.
//
// Speculation: drafts are accepted tentatively (Accept returns false at the
// first one the grammar forbids: the draft is cut there) and rolled back
// when verification rejects them. xgrammar 0.2.8 keeps the whole history
// (its max_rollback_tokens is deprecated and unused), so Rollback(n) reaches
// back over every token accepted so far.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include <xgrammar/matcher.h>

#include "model/grammar/grammar_compiler.h"

namespace specline::grammar {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);

  // Words of the mask FillAllowed writes: ceil(vocab_size / 32).
  int32_t mask_words() const { return grammar_->vocabulary->mask_words(); }
  const GrammarVocabulary& grammar_vocabulary() const { return *grammar_->vocabulary; }

  // Writes the tokens allowed next: bit t % 32 of word t / 32 set means
  // token t is allowed. `mask` holds at least mask_words() words. Returns
  // false when every token is allowed (the mask need not be applied). Bits
  // past vocab_size are 0. Once
  // terminated, nothing is allowed. Cost: the adaptive mask cache's lookup
  // for the current state plus a check of its few undecided tokens.
  bool FillAllowed(std::span<uint32_t> mask);

  // Advances over `token` when the grammar allows it (a stop token is
  // allowed where the grammar can end, and terminates it); false, with the
  // state unchanged, when it does not (control tokens never are).
  bool Accept(int32_t token);

  // Speculative verification's masks: walks `draft` tentatively, stopping
  // at the first token the grammar forbids, and writes mask i (the tokens
  // allowed after draft[0..i)) at masks[i * mask_words()] for i = 0..n,
  // where n, the count returned, is how many draft tokens the grammar
  // allows: the draft is cut there, and the target samples each of the n+1
  // positions under its mask. `masks` holds (draft.size() + 1) *
  // mask_words() words. The state is left as it was: Accept what
  // verification keeps.
  int DraftMasks(std::span<const int32_t> draft, std::span<uint32_t> masks);

  // Undoes the last `n` accepted tokens (a terminating stop token included).
  // n must not exceed accepted().
  void Rollback(int n);

  // The stop token was accepted: nothing more may follow.
  bool IsTerminated() const { return matcher_.IsTerminated(); }
  // The grammar is complete here: a stop token is allowed (more text may be
  // too, as after the digits of a number).
  bool CanEnd() const { return !IsTerminated() && matcher_.IsCompleted(); }
  // Tokens accepted since creation or Reset (minus those rolled back).
  int accepted() const { return accepted_; }

  // Up to `max` tokens spelling the text the grammar forces from here
  // (xgrammar's jump-forward string: `{"name": "` after `{` in a schema whose
  // first property is "name"), each checked against the grammar. The
  // spelling is a guess (GrammarVocabulary::Spell: a tokenization of the
  // forced text on its own, not necessarily the model's); use them as
  // drafts: verification keeps the output the model's. The state is left
  // unchanged.
  std::vector<int32_t> ForcedTokens(int max);

  void Reset();

 private:
  std::shared_ptr<const CompiledGrammar> grammar_;
  xgrammar::GrammarMatcher matcher_;
  int accepted_ = 0;
};

// Sets the logits of the tokens `mask` forbids to -infinity, in place (what
// a sampler does with FillAllowed's mask; whole words at a time where they
// are all allowed or all forbidden).
// `logits` may be shorter than the mask's vocabulary (a model without
// padding); ids past it are ignored.
void MaskLogits(std::span<const uint32_t> mask, std::span<float> logits);

}  // namespace specline::grammar
