// Constrained random walks: a grammar driven to the end by random choices
// among the tokens its mask allows, as decoding with random logits would.
// The tests, the fuzz batch tool (grammar_walk) and bench/grammar_bench use
// them to check that whatever the mask lets through is text the grammar
// (and the JSON Schema it came from) accepts, and to time the mask.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/grammar/grammar_matcher.h"

namespace specline::grammar {

struct WalkOptions {
  uint64_t seed = 1;
  int max_tokens = 2048;
  // Probability of a step drawing among the allowed "closing" tokens (one
  // or two bytes of punctuation: " , : } ] @ . and the stop tokens) rather
  // than among all allowed ones: uniform draws over a 49k vocabulary would
  // rarely close a string, and walks would stall at the token limit.
  double closing_bias = 0.5;
};

struct Walk {
  std::vector<int32_t> tokens;  // the stop token excluded
  std::string text;             // their bytes
  bool terminated = false;      // ended with a stop token within max_tokens
  // Inconsistencies between the mask and Accept (must stay 0): a token the
  // mask allowed that Accept refused, or a mask with nothing allowed.
  int mask_accept_mismatches = 0;
  std::vector<double> fill_us;  // FillAllowed's time at each step
};

Walk RandomWalk(GrammarMatcher& matcher, const WalkOptions& options);

}  // namespace specline::grammar
