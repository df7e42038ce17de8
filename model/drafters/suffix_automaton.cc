#include "model/drafters/suffix_automaton.h"

namespace specline {

SuffixAutomaton::SuffixAutomaton() { Clear(); }

void SuffixAutomaton::Clear() {
  text_.clear();
  states_.assign(1, State{});  // the root: the empty string
  edges_.clear();
  edge_of_.clear();
  last_ = 0;
}

int32_t SuffixAutomaton::Target(int32_t state, int32_t token) const {
  auto it = edge_of_.find(Key(state, token));
  return it == edge_of_.end() ? -1 : edges_[it->second].target;
}

void SuffixAutomaton::AddEdge(int32_t from, int32_t token, int32_t to) {
  const auto index = static_cast<int32_t>(edges_.size());
  edges_.push_back({token, to, states_[from].first_edge});
  states_[from].first_edge = index;
  edge_of_.emplace(Key(from, token), index);
}

int32_t SuffixAutomaton::Clone(int32_t q, int32_t len) {
  const auto clone = static_cast<int32_t>(states_.size());
  State copy = states_[q];
  copy.len = len;
  copy.first_edge = -1;
  states_.push_back(copy);
  for (int32_t e = states_[q].first_edge; e >= 0; e = edges_[e].next) {
    AddEdge(clone, edges_[e].token, edges_[e].target);
  }
  return clone;
}

void SuffixAutomaton::Append(int32_t token) {
  const auto pos = static_cast<int32_t>(text_.size());
  text_.push_back(token);
  const auto cur = static_cast<int32_t>(states_.size());
  states_.push_back({states_[last_].len + 1, -1, pos, -1});
  int32_t p = last_;
  while (p >= 0 && Target(p, token) < 0) {
    AddEdge(p, token, cur);
    p = states_[p].link;
  }
  if (p < 0) {
    states_[cur].link = 0;
  } else {
    const int32_t q = Target(p, token);
    if (states_[p].len + 1 == states_[q].len) {
      states_[cur].link = q;
    } else {
      // q also holds longer strings that do not end here: split off the
      // part that does (the clone), and send the shorter paths to it.
      const int32_t clone = Clone(q, states_[p].len + 1);
      while (p >= 0) {
        auto it = edge_of_.find(Key(p, token));
        if (it == edge_of_.end() || edges_[it->second].target != q) break;
        edges_[it->second].target = clone;
        p = states_[p].link;
      }
      states_[q].link = clone;
      states_[cur].link = clone;
    }
  }
  last_ = cur;
  // Every state on the suffix-link path of the new text ends here now.
  int32_t s = states_[cur].link;
  for (int k = 0; k < kRecentWalk && s > 0; ++k, s = states_[s].link) states_[s].end = pos;
}

void SuffixAutomaton::Append(std::span<const int32_t> tokens) {
  for (int32_t t : tokens) Append(t);
}

SuffixAutomaton::Match SuffixAutomaton::LongestSuffix(std::span<const int32_t> query) const {
  int32_t state = 0, length = 0;
  for (int32_t t : query) {
    if (t < 0) {
      state = length = 0;
      continue;
    }
    // Drop the match's oldest tokens until the next one can follow.
    while (state != 0 && Target(state, t) < 0) {
      state = states_[state].link;
      length = states_[state].len;
    }
    const int32_t next = Target(state, t);
    if (next >= 0) {
      state = next;
      ++length;
    } else {
      state = length = 0;
    }
  }
  return {length, length > 0 ? int64_t{states_[state].end} : -1};
}

std::vector<int32_t> SuffixAutomaton::Continuation(int64_t end, int n) const {
  std::vector<int32_t> out;
  for (int64_t i = end + 1; i >= 1 && i < size() && static_cast<int>(out.size()) < n; ++i) {
    if (text_[i] < 0) break;
    out.push_back(text_[i]);
  }
  return out;
}

size_t SuffixAutomaton::bytes() const {
  return text_.capacity() * sizeof(int32_t) + states_.capacity() * sizeof(State) +
         edges_.capacity() * sizeof(Edge) +
         edge_of_.capacity() * (sizeof(std::pair<uint64_t, int32_t>) + 1);
}

}  // namespace specline
