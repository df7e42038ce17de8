// A suffix automaton over a growing token sequence: the smallest automaton
// that accepts every substring of the text, built online in amortised O(1)
// per appended token (Blumer et al. 1985). SAM-Decoding (Hu et al. 2024)
// drafts from it: the longest suffix of the current context that occurs in
// the text is found in O(window), and the tokens that followed its
// occurrence are the draft. Prompt lookup does the same with a fixed n-gram
// range and a scan of the whole context per step; the automaton finds the
// longest match, of any length, in time independent of the text's size.
//
// Each state remembers an end position of its strings' occurrences; the
// appends keep it at the most recent one for the longest suffixes (the
// first kRecentWalk states of the suffix-link path), so a draft follows the
// latest occurrence of a long match, as prompt lookup does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace specline {

class SuffixAutomaton {
 public:
  SuffixAutomaton();

  // Appends one token. A negative token is a separator: it matches no
  // query (queries hold token ids >= 0) and ends every continuation, so
  // texts appended one after another never draft across their boundary
  // when each separator is distinct.
  void Append(int32_t token);
  void Append(std::span<const int32_t> tokens);

  int64_t size() const { return static_cast<int64_t>(text_.size()); }
  std::span<const int32_t> text() const { return text_; }

  struct Match {
    int32_t length = 0;  // tokens of the query's tail that occur in the text
    int64_t end = -1;    // where an occurrence ends in the text (-1: none)
  };
  // The longest suffix of `query` that occurs in the text, ending at the
  // latest occurrence the automaton keeps.
  Match LongestSuffix(std::span<const int32_t> query) const;

  // Up to n tokens that follow position `end` of the text, stopping before
  // a separator or at the text's end.
  std::vector<int32_t> Continuation(int64_t end, int n) const;

  void Clear();
  size_t bytes() const;

 private:
  struct State {
    int32_t len = 0;    // the longest string of the state
    int32_t link = -1;  // suffix link
    int32_t end = -1;   // an end position of its occurrences
    int32_t first_edge = -1;
  };
  struct Edge {
    int32_t token;
    int32_t target;
    int32_t next;  // the state's next edge (-1: last)
  };
  // How many states of the suffix-link path get the newest end position on
  // each append: the longest suffixes, where a draft is chosen; the short
  // ones near the root keep an older occurrence (a valid one) instead of
  // costing O(depth) per token.
  static constexpr int kRecentWalk = 32;

  int32_t Target(int32_t state, int32_t token) const;  // -1: none
  void AddEdge(int32_t from, int32_t token, int32_t to);
  int32_t Clone(int32_t q, int32_t len);
  static uint64_t Key(int32_t state, int32_t token) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(state)) << 32) | static_cast<uint32_t>(token);
  }

  std::vector<int32_t> text_;
  std::vector<State> states_;
  std::vector<Edge> edges_;
  absl::flat_hash_map<uint64_t, int32_t> edge_of_;  // (state, token) -> index in edges_
  int32_t last_ = 0;  // the state of the whole text
};

}  // namespace specline
