// Token Recycling (Luo et al. 2024, "Turning Trash into Treasure"): a
// training-free drafter that remembers, for every token, the top-k next
// tokens the target model most recently predicted after it. The candidates
// every decode or verify step computes anyway ("trash") become the drafts
// of later steps. The matrix persists across requests and is small
// (vocab x k entries: 49152 x 8 x 2 bytes = 768 KiB for SmolLM2).
//
// The paper drafts a static BFS tree from the matrix; the policies here
// verify a chain, so Draft follows the best candidate of each token
// (t1 = M[last][0], t2 = M[t1][0], ...). Candidates() exposes a whole row
// for callers that want alternatives at a position.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace specline {

class TokenRecycling {
 public:
  // Tokens are ids in [0, vocab_size); k candidates are kept per token.
  TokenRecycling(int32_t vocab_size, int k);

  int32_t vocab_size() const { return vocab_size_; }
  int k() const { return k_; }

  // The target model processed `input_token` and its logits there ranked
  // `top_candidates` best first (TopK's order): they replace the row of
  // `input_token` (the first k are kept; a shorter list leaves the rest of
  // the row empty). Out-of-range ids are ignored.
  void Update(int32_t input_token, std::span<const int32_t> top_candidates);

  // A chain of up to n tokens that follows context.back(): empty when the
  // context is empty or its last token has never been updated; it stops
  // early at a token that has never been updated.
  std::vector<int32_t> Draft(std::span<const int32_t> context, int n) const;

  // The stored candidates of `token`, best first (empty when never updated).
  std::vector<int32_t> Candidates(int32_t token) const;

  // Whether `token` has a row.
  bool Seen(int32_t token) const;

  // Forgets everything.
  void Clear();

  // Memory held by the matrix.
  size_t bytes() const;

 private:
  // Concurrency: one receiver thread calls Update while a driver thread
  // calls Draft. Every entry is a relaxed atomic: on x86 and ARM a relaxed
  // load or store is a plain move, so Draft costs what an unsynchronised
  // read would, and neither side ever waits (a shared_mutex would put an
  // atomic read-modify-write on a shared cache line into every Draft and
  // make the driver wait behind updates). The price is that a row can be
  // read half-updated (old and new candidates mixed). That is harmless:
  // every entry is always some valid token id or the empty marker, and a
  // draft is only a guess that the target model verifies, so a stale or
  // mixed row can cost acceptance, never correctness.
  //
  // Entries are uint16_t when every id fits below the empty marker (vocab
  // <= 65535: SmolLM2, Llama 2, stories models), halving the matrix and the
  // cache lines a draft touches; int32_t otherwise (Llama 3, Qwen).
  static constexpr uint16_t kEmpty16 = 0xFFFF;
  static constexpr int32_t kEmpty32 = -1;

  int32_t Get(size_t index) const;
  void Set(size_t index, int32_t value);

  int32_t vocab_size_;
  int k_;
  std::unique_ptr<std::atomic<uint16_t>[]> narrow_;  // vocab_size * k, or null
  std::unique_ptr<std::atomic<int32_t>[]> wide_;     // vocab_size * k, or null
};

}  // namespace specline
