#include "model/drafters/suffix_index.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <utility>

namespace specline {
namespace {

std::span<const int32_t> Tail(std::span<const int32_t> context, int window) {
  const size_t n = std::min(context.size(), static_cast<size_t>(std::max(window, 0)));
  return context.subspan(context.size() - n);
}

// The draft, and where the matched occurrence ends in the automaton's text.
std::pair<SuffixDraft, int64_t> DraftFrom(const SuffixAutomaton& a, std::span<const int32_t> query,
                                          int n) {
  const SuffixAutomaton::Match m = a.LongestSuffix(query);
  if (m.length == 0) return {SuffixDraft{}, -1};
  return {{a.Continuation(m.end, n), m.length}, m.end};
}

}  // namespace

void RequestSuffixIndex::CatchUp(std::span<const int32_t> context) {
  const int64_t want = static_cast<int64_t>(context.size()) - 1;
  const int64_t have = automaton_.size();
  // Sequences only grow; anything else is another text (checked at the
  // last indexed token, which is O(1) and catches a reused index).
  if (have > want || (have > 0 && automaton_.text()[have - 1] != context[have - 1])) {
    automaton_.Clear();
  }
  for (int64_t i = automaton_.size(); i < want; ++i) automaton_.Append(context[i]);
}

SuffixDraft RequestSuffixIndex::Draft(std::span<const int32_t> context, int window, int n) {
  if (context.size() < 2 || n <= 0) return {};
  CatchUp(context);
  auto [d, end] = DraftFrom(automaton_, Tail(context, window), n);
  // A continuation that ran to the indexed text's end goes on with the
  // context's last token, the one not indexed.
  if (d.match > 0 && static_cast<int>(d.tokens.size()) < n &&
      end + 1 + static_cast<int64_t>(d.tokens.size()) == automaton_.size()) {
    d.tokens.push_back(context.back());
  }
  return d;
}

RecentTextIndex::RecentTextIndex(int64_t capacity_tokens) : capacity_(std::max<int64_t>(capacity_tokens, 0)) {}

void RecentTextIndex::Remember(std::span<const int32_t> text) {
  const int64_t half = capacity_ / 2;
  if (half <= 0 || text.empty()) return;
  text = Tail(text, static_cast<int>(std::min<int64_t>(half - 1, std::numeric_limits<int>::max())));
  std::unique_lock lock(mu_);
  if (newer_.size() + static_cast<int64_t>(text.size()) + 1 > half) {
    older_ = std::exchange(newer_, SuffixAutomaton());
  }
  newer_.Append(text);
  // A separator of its own: no two texts ever join into one match.
  newer_.Append(next_separator_);
  next_separator_ = next_separator_ == std::numeric_limits<int32_t>::min() ? -1 : next_separator_ - 1;
}

SuffixDraft RecentTextIndex::Draft(std::span<const int32_t> context, int window, int n) const {
  if (capacity_ <= 0 || context.empty() || n <= 0) return {};
  const std::span<const int32_t> query = Tail(context, window);
  std::shared_lock lock(mu_);
  SuffixDraft newer = DraftFrom(newer_, query, n).first;
  SuffixDraft older = DraftFrom(older_, query, n).first;
  return older.match > newer.match ? older : newer;
}

int64_t RecentTextIndex::tokens() const {
  std::shared_lock lock(mu_);
  return newer_.size() + older_.size();
}

size_t RecentTextIndex::bytes() const {
  std::shared_lock lock(mu_);
  return newer_.bytes() + older_.bytes();
}

}  // namespace specline
