// The scheduler's side of prefix-cache isolation (docs/security.md "The
// prefix cache between principals"), through real in-process stages: a
// request reuses cached blocks only from requests of the same cache scope
// (RequestOptions::cache_scope, SubmitRequest.cache_scope), whatever the
// prompt; and a scope changes which blocks are reused, never the output.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/inproc_pipeline.h"

namespace specline::testing {
namespace {

using scheduler::EngineOptions;
using scheduler::RequestOptions;

constexpr int kBlock = 16;  // the in-process stages' KV block size

StreamResult RunOne(InprocPipeline& p, const std::vector<int32_t>& prompt, const std::string& scope) {
  RequestOptions r;
  r.prompt = prompt;
  r.max_tokens = 6;
  r.cache_scope = scope;
  auto stream = p.engine().Submit(r);
  EXPECT_TRUE(stream.ok()) << stream.status();
  if (!stream.ok()) return {};
  StreamResult out = Collect(**stream);
  EXPECT_TRUE(out.last.error.ok()) << out.last.error;
  return out;
}

TEST(SchedulerCacheScope, ScopesNeverShareBlocks) {
  EngineOptions options;
  options.prefix_caching = true;
  InprocPipeline p(2, options);
  const std::vector<int32_t> prompt = MakePrompt(3 * kBlock + 5, 77);
  const int full = (static_cast<int>(prompt.size()) - 1) / kBlock * kBlock;

  const StreamResult alice = RunOne(p, prompt, "scope-alice");
  EXPECT_EQ(alice.cached_prompt_tokens, 0);
  // Another scope, and the shared one, miss what alice's scope cached.
  const StreamResult bob = RunOne(p, prompt, "scope-bob");
  EXPECT_EQ(bob.cached_prompt_tokens, 0);
  EXPECT_EQ(RunOne(p, prompt, "").cached_prompt_tokens, 0);
  // A longer prompt that starts with it, too.
  std::vector<int32_t> longer = prompt;
  longer.insert(longer.end(), {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16});
  EXPECT_EQ(RunOne(p, longer, "scope-bob").cached_prompt_tokens, full);  // bob's own blocks
  EXPECT_EQ(RunOne(p, longer, "scope-carol").cached_prompt_tokens, 0);
  // The same scope hits, and every scope's output is the same.
  const StreamResult again = RunOne(p, prompt, "scope-alice");
  EXPECT_EQ(again.cached_prompt_tokens, full);
  EXPECT_EQ(again.tokens, alice.tokens);
  EXPECT_EQ(bob.tokens, alice.tokens);
}

}  // namespace
}  // namespace specline::testing
