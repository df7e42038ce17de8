#include "model/drafters/training_free_drafter.h"

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "model/drafters/prompt_lookup.h"
#include "model/drafters/top_k.h"

namespace specline {

const char* DraftSourceName(DraftSource s) {
  switch (s) {
    case DraftSource::kPromptLookup: return "prompt_lookup";
    case DraftSource::kRecentRequests: return "recent_requests";
    case DraftSource::kTokenRecycling: return "token_recycling";
    case DraftSource::kNone: break;
  }
  return "none";
}

TrainingFreeDrafter::TrainingFreeDrafter(const TrainingFreeDrafterOptions& options)
    : options_(options),
      scopes_({options.vocab_size, options.k, options.recent_tokens,
               static_cast<size_t>(std::max<int64_t>(options.memory_mib, 0)) << 20}) {
  // Each scope's matrix is made on first use: its sizes are checked now.
  if (options.vocab_size <= 0 || options.k <= 0) {
    throw std::invalid_argument("TrainingFreeDrafter needs vocab_size > 0 and k > 0");
  }
  if (options.num_drafts < 0 || options.min_ngram < 1 || options.max_ngram < options.min_ngram ||
      options.suffix_window < options.min_ngram || options.recent_min_match < 1 ||
      options.memory_mib < 0) {
    throw std::invalid_argument(
        "TrainingFreeDrafter needs num_drafts >= 0, 1 <= min_ngram <= max_ngram, "
        "suffix_window >= min_ngram, recent_min_match >= 1 and memory_mib >= 0");
  }
}

void TrainingFreeDrafter::Remember(DrafterMemory& memory, std::span<const int32_t> text) {
  memory.recent.Remember(text);
  scopes_.Trim(&memory);
}

bool TrainingFreeDrafter::RecyclingDraft(const TokenRecycling& recycling,
                                         std::span<const int32_t> context, int n,
                                         DraftProposal& d) const {
  d.tokens = recycling.Draft(context, n);
  if (d.tokens.empty()) return false;
  d.source = DraftSource::kTokenRecycling;
  recycling_drafts_.fetch_add(1, std::memory_order_relaxed);
  recycling_tokens_.fetch_add(d.tokens.size(), std::memory_order_relaxed);
  return true;
}

bool TrainingFreeDrafter::SuffixMatchDraft(const RecentTextIndex& recent_texts,
                                           std::span<const int32_t> context, int n,
                                           RequestSuffixIndex* own, DraftProposal& d) const {
  SuffixDraft mine;
  if (own != nullptr && options_.use_suffix_automaton) {
    mine = own->Draft(context, options_.suffix_window, n);
  } else {
    mine.tokens = PromptLookup(context, options_.min_ngram, options_.max_ngram, n);
    mine.match = mine.tokens.empty() ? 0 : options_.min_ngram;  // at least
  }
  if (mine.match < options_.min_ngram || mine.tokens.empty()) mine = {};
  SuffixDraft recent = recent_texts.Draft(context, options_.suffix_window, n);
  if (recent.match < options_.recent_min_match || recent.tokens.empty()) recent = {};
  // The request's own text wins ties: it is the context being continued.
  const bool from_recent = recent.match > mine.match;
  SuffixDraft& best = from_recent ? recent : mine;
  if (best.tokens.empty()) return false;
  d.tokens = std::move(best.tokens);
  d.source = from_recent ? DraftSource::kRecentRequests : DraftSource::kPromptLookup;
  d.match = best.match;
  (from_recent ? recent_drafts_ : lookup_drafts_).fetch_add(1, std::memory_order_relaxed);
  (from_recent ? recent_tokens_ : lookup_tokens_).fetch_add(d.tokens.size(), std::memory_order_relaxed);
  return true;
}

DraftProposal TrainingFreeDrafter::Propose(const DrafterMemory& memory,
                                           std::span<const int32_t> context, int n,
                                           RequestSuffixIndex* own) const {
  if (n < 0) n = options_.num_drafts;
  DraftProposal d;
  if (n <= 0) return d;
  if (!options_.prefer_prompt_lookup && options_.use_token_recycling) {
    if (RecyclingDraft(memory.recycling, context, n, d)) return d;
  }
  if (options_.use_prompt_lookup && SuffixMatchDraft(memory.recent, context, n, own, d)) {
    const int missing = n - static_cast<int>(d.tokens.size());
    if (missing > 0 && options_.use_token_recycling && options_.prefer_prompt_lookup &&
        options_.extend_lookup_with_recycling) {
      const std::vector<int32_t> more =
          memory.recycling.Draft(std::span<const int32_t>(&d.tokens.back(), 1), missing);
      d.tokens.insert(d.tokens.end(), more.begin(), more.end());
      recycling_tokens_.fetch_add(more.size(), std::memory_order_relaxed);
    }
    return d;
  }
  if (options_.use_token_recycling && options_.prefer_prompt_lookup) {
    if (RecyclingDraft(memory.recycling, context, n, d)) return d;
  }
  empty_drafts_.fetch_add(1, std::memory_order_relaxed);
  return d;
}

void TrainingFreeDrafter::Observe(DrafterMemory& memory, int32_t input_token,
                                  std::span<const float> logits_row) {
  // k entries on the stack would do, but k is an option: a small vector.
  std::vector<int32_t> top(options_.k);
  top.resize(TopK(logits_row, options_.k, top));
  memory.recycling.Update(input_token, top);
}

void TrainingFreeDrafter::ObserveTopK(DrafterMemory& memory, int32_t input_token,
                                      std::span<const int32_t> top_candidates) {
  memory.recycling.Update(input_token, top_candidates);
}

DrafterCounters TrainingFreeDrafter::counters() const {
  DrafterCounters c;
  c.prompt_lookup_drafts = lookup_drafts_.load(std::memory_order_relaxed);
  c.token_recycling_drafts = recycling_drafts_.load(std::memory_order_relaxed);
  c.empty_drafts = empty_drafts_.load(std::memory_order_relaxed);
  c.prompt_lookup_tokens = lookup_tokens_.load(std::memory_order_relaxed);
  c.recent_requests_drafts = recent_drafts_.load(std::memory_order_relaxed);
  c.recent_requests_tokens = recent_tokens_.load(std::memory_order_relaxed);
  c.token_recycling_tokens = recycling_tokens_.load(std::memory_order_relaxed);
  return c;
}

}  // namespace specline
