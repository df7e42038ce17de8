#include "model/grammar/grammar_random_walk.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <random>

namespace specline::grammar {
namespace {

// One or two bytes of ASCII punctuation other than an opening bracket (the
// quote that ends a string, the comma, colon and brackets that end values,
// the @ and . a pattern may wait for), or a stop token.
bool IsClosing(const GrammarVocabulary& vocab, int32_t id) {
  const auto& stops = vocab.stop_ids();
  if (std::find(stops.begin(), stops.end(), id) != stops.end()) return true;
  const std::string& b = vocab.bytes(id);
  if (b.empty() || b.size() > 2) return false;
  return std::all_of(b.begin(), b.end(), [](char c) {
    return c > 0x20 && c < 0x7f && std::ispunct(static_cast<unsigned char>(c)) && c != '{' &&
           c != '[';
  });
}

}  // namespace

Walk RandomWalk(GrammarMatcher& matcher, const WalkOptions& options) {
  const GrammarVocabulary& vocab = matcher.grammar_vocabulary();
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  std::vector<uint32_t> mask(vocab.mask_words());
  std::vector<int32_t> allowed, closing;
  Walk walk;
  while (static_cast<int>(walk.tokens.size()) < options.max_tokens) {
    const auto t0 = std::chrono::steady_clock::now();
    matcher.FillAllowed(mask);
    walk.fill_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    allowed.clear();
    closing.clear();
    for (int32_t w = 0; w < vocab.mask_words(); ++w) {
      for (uint32_t bits = mask[w]; bits; bits &= bits - 1) {
        const int32_t id = w * 32 + __builtin_ctz(bits);
        if (id >= vocab.vocab_size()) break;
        allowed.push_back(id);
        if (IsClosing(vocab, id)) closing.push_back(id);
      }
    }
    if (allowed.empty()) {
      ++walk.mask_accept_mismatches;
      break;
    }
    const auto& pool = (!closing.empty() && coin(rng) < options.closing_bias) ? closing : allowed;
    const int32_t id = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
    if (!matcher.Accept(id)) {
      ++walk.mask_accept_mismatches;
      break;
    }
    if (matcher.IsTerminated()) {
      walk.terminated = true;
      break;
    }
    walk.tokens.push_back(id);
    walk.text += vocab.bytes(id);
  }
  return walk;
}

}  // namespace specline::grammar
