// Structured output in the scheduler (scheduler/sequence_grammar.h): every
// policy that keeps a grammar decides each token under the grammar's mask
// after the verified prefix, so
//   - greedy: autoregressive, pipeline speculation (oracle drafts at several
//     acceptance rates, wrong drafts the grammar forbids included) and
//     recycle give exactly the tokens of an independent reference: plain
//     greedy decoding over LocalPipeline with its own grammar matcher
//     masking each row by hand;
//   - sampling: every output, re-checked by a grammar matcher of its own,
//     keeps to the grammar (no violation allowed), and the distribution of
//     complete constrained outputs equals the masked model's, enumerated
//     exactly from LocalPipeline (chi-square, p < 1e-4 per test);
//   - tokens the grammar forces ride as drafts and are accepted;
//   - a format the policy cannot keep (PTP, PIPO) is refused at Submit.
// The model is the real stories260K (SentencePiece vocabulary of 512): small
// enough that hundreds of requests take seconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model/grammar/grammar_compiler.h"
#include "model/grammar/grammar_matcher.h"
#include "model/runtime/local_pipeline.h"
#include "model/runtime/sampler.h"
#include "model/tokenizer/model_tokenizer.h"
#include "scheduler/policies/ptp.h"
#include "scheduler/policies/spd.h"
#include "tests/inproc_pipeline.h"
#include "tests/spec_heads.h"
#include "tests/test_util.h"

namespace specline::testing {
namespace {

const char* kStoriesModel = "stories260K/stories260K.gguf";

struct Vocab {
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<grammar::GrammarCompiler> compiler;
};

// The stories260K vocabulary as grammars see it (once per process).
Vocab& StoriesVocab() {
  static Vocab v = [] {
    Vocab out;
    auto model = OpenModel(SharedModelPath(kStoriesModel));
    out.tokenizer = OpenTokenizerFor(*model, SharedModelPath("stories260K/tok512.bin"));
    out.compiler = std::make_unique<grammar::GrammarCompiler>(
        std::make_shared<grammar::GrammarVocabulary>(*out.tokenizer, model->config().vocab_size));
    return out;
  }();
  return v;
}

std::shared_ptr<const grammar::CompiledGrammar> Compile(const v1::ResponseFormat& f) {
  auto g = StoriesVocab().compiler->Compile(f);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *g : nullptr;
}

v1::ResponseFormat PersonSchema() {
  v1::ResponseFormat f;
  f.set_json_schema(R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 10},
      "mood": {"enum": ["happy", "sad", "sleepy"]},
      "friends": {"type": "array", "items": {"type": "string", "maxLength": 6}, "maxItems": 2}},
      "required": ["name", "mood", "friends"], "additionalProperties": false})");
  return f;
}

v1::ResponseFormat Choices() {
  v1::ResponseFormat f;
  for (const char* c : {"Lily", "Tom", "Sue", "the dog"}) f.mutable_choice()->add_choices(c);
  return f;
}

// Row logits of `prefix` (prompt then generated) from a fresh LocalPipeline
// pass: the reference never shares state with the engine.
class Reference {
 public:
  explicit Reference(const ModelSource& model)
      : model_(model), local_(model, {0, model.config().n_layers}, SliceOptions{16, 4096}, 1) {}

  std::vector<float> Logits(const std::vector<int32_t>& prefix) {
    local_.Release(1);
    std::vector<SlotRef> slots;
    for (int32_t i = 0; i < static_cast<int32_t>(prefix.size()); ++i) slots.push_back({1, i});
    SliceOutput out;
    EXPECT_TRUE(local_.Forward(slots, prefix, {}, &out).ok());
    const int dim = model_.config().dim;
    std::vector<float> logits(local_.head().vocab_size());
    local_.head().Logits(out.hidden.data() + (out.hidden.size() / dim - 1) * dim, 1, logits.data());
    local_.Release(1);
    return logits;
  }

  // Constrained greedy decoding: the argmax among the tokens the matcher
  // allows, until a stop token, the grammar's end or max_tokens.
  std::vector<int32_t> Greedy(const std::vector<int32_t>& prompt,
                              std::shared_ptr<const grammar::CompiledGrammar> g, int max_tokens,
                              const std::vector<int32_t>& stop_ids) {
    grammar::GrammarMatcher m(std::move(g));
    std::vector<uint32_t> mask(m.mask_words());
    std::vector<int32_t> seq = prompt, out;
    while (static_cast<int>(out.size()) < max_tokens && !m.IsTerminated()) {
      const std::vector<float> logits = Logits(seq);
      const bool masked = m.FillAllowed(mask);
      int32_t best = -1;
      for (int32_t t = 0; t < static_cast<int32_t>(logits.size()); ++t) {
        if (masked && !((mask[t / 32] >> (t % 32)) & 1u)) continue;
        if (best < 0 || logits[t] > logits[best]) best = t;
      }
      EXPECT_GE(best, 0);
      EXPECT_TRUE(m.Accept(best));
      out.push_back(best);
      seq.push_back(best);
      if (std::find(stop_ids.begin(), stop_ids.end(), best) != stop_ids.end()) break;
    }
    return out;
  }

 private:
  const ModelSource& model_;
  LocalPipeline local_;
};

scheduler::EngineOptions Options() {
  scheduler::EngineOptions o;
  o.spec.allow_oracle = true;
  o.spec.policy = scheduler::DraftGate::kAlways;
  o.spec.Of<scheduler::SpdOptions>().drafter = "recycle";
  return o;
}

std::vector<int32_t> StoryPrompt(const char* text) {
  return StoriesVocab().tokenizer->Encode(text, /*add_bos=*/true);
}

scheduler::RequestOptions Request(const std::vector<int32_t>& prompt,
                                  std::shared_ptr<const grammar::CompiledGrammar> g, int max_tokens) {
  scheduler::RequestOptions r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.stop_ids = StoriesVocab().tokenizer->stop_ids();
  r.grammar = std::move(g);
  return r;
}

std::string Text(const std::vector<int32_t>& tokens) {
  std::string s;
  for (int32_t t : tokens) {
    if (!StoriesVocab().tokenizer->IsControl(t)) s += StoriesVocab().tokenizer->TokenBytes(1, t);
  }
  return s;
}

class GrammarGreedy : public ::testing::TestWithParam<v1::DecodingPolicy> {};

TEST_P(GrammarGreedy, EqualsConstrainedPlainDecoding) {
  const v1::DecodingPolicy mode = GetParam();
  InprocPipeline p(2, Options(), InprocPipeline::kStageKvTokens, std::chrono::microseconds(200),
                   SharedModelPath(kStoriesModel));
  Reference ref(p.model());
  int64_t drafted = 0, accepted = 0, checked = 0;
  const char* prompts[] = {"Once upon a time", "Tom and Lily went to the park. They",
                           "The little dog was"};
  for (const v1::ResponseFormat& format : {PersonSchema(), Choices()}) {
    auto g = Compile(format);
    ASSERT_NE(g, nullptr);
    for (const char* text : prompts) {
      const std::vector<int32_t> prompt = StoryPrompt(text);
      const std::vector<int32_t> want = ref.Greedy(prompt, g, 48, StoriesVocab().tokenizer->stop_ids());
      // Oracle drafts at two acceptance rates: the wrong ones are random
      // tokens, mostly forbidden by the grammar (cut before being sent).
      for (double alpha : {0.5, 0.9}) {
        scheduler::RequestOptions r = Request(prompt, g, 48);
        r.mode = mode;
        if (mode == v1::DECODING_POLICY_PPSD || mode == v1::DECODING_POLICY_SPD) {
          r.oracle = {true, alpha, want};
        } else if (alpha != 0.5) {
          continue;  // no oracle: one run is the test
        }
        auto stream = p.engine().Submit(r);
        ASSERT_TRUE(stream.ok()) << stream.status();
        const StreamResult got = Collect(**stream);
        EXPECT_EQ(got.tokens, want) << "prompt \"" << text << "\": got \"" << Text(got.tokens)
                                    << "\", want \"" << Text(want) << "\"";
        const scheduler::SpecStats& st = got.last.spec;
        EXPECT_EQ(st.accepted_tokens + st.rejected_tokens + st.discarded_tokens, st.draft_tokens);
        drafted += st.draft_tokens;
        accepted += st.accepted_tokens;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 0);
  if (mode != v1::DECODING_POLICY_AUTOREGRESSIVE) {
    EXPECT_GT(drafted, 0);
    EXPECT_GT(accepted, 0);
  }
  EXPECT_TRUE(Eventually([&] { return p.StagesEmpty(); }));
}

INSTANTIATE_TEST_SUITE_P(Policies, GrammarGreedy,
                         ::testing::Values(v1::DECODING_POLICY_AUTOREGRESSIVE,
                                           v1::DECODING_POLICY_PPSD, v1::DECODING_POLICY_SPD,
                                           v1::DECODING_POLICY_RECYCLE),
                         [](const auto& info) { return std::string(PolicyShortName(info.param)); });

// The output keeps to the grammar: the JSON parses and has the schema's
// required keys, and a forced stretch (the schema's keys) rides as drafts.
TEST(GrammarServing, OutputKeepsToTheSchemaAndForcedTokensAreDrafted) {
  InprocPipeline p(2, Options(), InprocPipeline::kStageKvTokens, std::chrono::microseconds(200),
                   SharedModelPath(kStoriesModel));
  auto g = Compile(PersonSchema());
  ASSERT_NE(g, nullptr);
  scheduler::RequestOptions r = Request(StoryPrompt("Once upon a time"), g, 200);
  r.mode = v1::DECODING_POLICY_RECYCLE;
  auto stream = p.engine().Submit(r);
  ASSERT_TRUE(stream.ok()) << stream.status();
  const StreamResult got = Collect(**stream);
  const std::string text = Text(got.tokens);
  const auto json = nlohmann::json::parse(text, nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << text;
  for (const char* key : {"name", "mood", "friends"}) EXPECT_TRUE(json.contains(key)) << text;
  EXPECT_TRUE(json["mood"] == "happy" || json["mood"] == "sad" || json["mood"] == "sleepy") << text;
  EXPECT_GT(got.last.spec.accepted_tokens, 0) << "no forced token was drafted and accepted";
}

// A drafted stop token that is accepted ends the sequence; nothing after it
// is verified (under a finished grammar no token is allowed there, so
// deciding one would fail the request). The prompt holds the constrained
// answer followed by the stop token, so prompt lookup drafts the stop token
// right after the answer's last token.
TEST(GrammarServing, RecycleEndsAtAnAcceptedDraftedStopToken) {
  InprocPipeline p(1, Options(), InprocPipeline::kStageKvTokens, std::chrono::microseconds(200),
                   SharedModelPath(kStoriesModel));
  Reference ref(p.model());
  auto g = Compile(Choices());
  ASSERT_NE(g, nullptr);
  const std::vector<int32_t> stops = StoriesVocab().tokenizer->stop_ids();
  std::vector<int32_t> prompt = StoryPrompt("Tom and Lily went to the park. They");
  std::vector<int32_t> want;
  // Show the model its own answer and the stop token until it answers the
  // same again (greedy copying settles in a round or two).
  for (int round = 0; round < 4; ++round) {
    want = ref.Greedy(prompt, g, 16, stops);
    ASSERT_FALSE(want.empty());
    ASSERT_TRUE(std::find(stops.begin(), stops.end(), want.back()) != stops.end());
    if (round > 0 && std::search(prompt.begin(), prompt.end(), want.begin(), want.end()) != prompt.end()) {
      break;
    }
    prompt.insert(prompt.end(), want.begin(), want.end());
    const std::vector<int32_t> again = StoryPrompt(" They");
    prompt.insert(prompt.end(), again.begin() + 1, again.end());  // no second BOS
  }
  ASSERT_TRUE(std::search(prompt.begin(), prompt.end(), want.begin(), want.end()) != prompt.end())
      << "the model never repeated its answer \"" << Text(want) << "\"";
  scheduler::RequestOptions r = Request(prompt, g, 16);
  r.mode = v1::DECODING_POLICY_RECYCLE;
  auto stream = p.engine().Submit(r);
  ASSERT_TRUE(stream.ok()) << stream.status();
  const StreamResult got = Collect(**stream);
  EXPECT_TRUE(got.last.error.ok()) << got.last.error;
  EXPECT_EQ(got.tokens, want) << "got \"" << Text(got.tokens) << "\", want \"" << Text(want) << "\"";
  EXPECT_GT(got.last.spec.accepted_tokens, 0) << "the stop token was not drafted";
}

// PTP samples several tokens from one pass (coupled, not one mask per
// token): a format is refused, naming the field. (PIPO, not lossless, keeps
// the default KeepsGrammar() == false the same way.) The random scheduler
// test model with a random PTP adapter; the grammar's vocabulary does not
// matter to the refusal.
TEST(GrammarServing, PtpRefusesAResponseFormat) {
  scheduler::EngineOptions o;
  o.spec.Of<scheduler::PtpOptions>().head = HeadDir("ptp", 2);
  InprocPipeline p(2, o);
  scheduler::RequestOptions r;
  r.prompt = MakePrompt(5, 1);
  r.max_tokens = 4;
  r.grammar = Compile(Choices());
  r.mode = v1::DECODING_POLICY_PTP;
  auto stream = p.engine().Submit(r);
  ASSERT_FALSE(stream.ok());
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kInvalidArgument) << stream.status();
  EXPECT_NE(stream.status().message().find("response_format"), std::string::npos) << stream.status();
  r.grammar = nullptr;  // the same request without it runs
  auto plain = p.engine().Submit(r);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(Collect(**plain).tokens.size(), 4u);
}

// ---------------------------------------------------------------------------
// Sampling: the distribution of complete outputs under a choice grammar.

// Every path of tokens the grammar allows to its end, with its probability
// under the masked, temperature-1 model (exact, from LocalPipeline).
void Enumerate(Reference& ref, grammar::GrammarMatcher& m, std::vector<int32_t>& seq,
               std::vector<int32_t>& path, double prob, const std::vector<int32_t>& stop_ids,
               std::map<std::string, double>* out) {
  if (m.IsTerminated() || (!path.empty() && std::find(stop_ids.begin(), stop_ids.end(),
                                                      path.back()) != stop_ids.end())) {
    (*out)[Text(path)] += prob;
    return;
  }
  std::vector<uint32_t> mask(m.mask_words());
  const bool masked = m.FillAllowed(mask);
  SamplingParams sp;
  sp.temperature = 1.0f;
  SamplingContext ctx;
  ctx.history = seq;
  ctx.prompt_len = static_cast<int32_t>(seq.size() - path.size());
  if (masked) ctx.allowed = mask;
  const TokenDistribution d = Warp(ref.Logits(seq), sp, ctx);
  for (size_t i = 0; i < d.ids.size(); ++i) {
    if (d.probs[i] * prob < 1e-7) continue;  // below what N draws can see
    ASSERT_TRUE(m.Accept(d.ids[i]));
    seq.push_back(d.ids[i]);
    path.push_back(d.ids[i]);
    Enumerate(ref, m, seq, path, prob * d.probs[i], stop_ids, out);
    path.pop_back();
    seq.pop_back();
    m.Rollback(1);
  }
}

// Regularized upper incomplete gamma by series / continued fraction is in
// scheduler_spec_sampling_test; here the degrees of freedom are few, so a
// Wilson-Hilferty normal approximation of the chi-square tail suffices.
double ChiSquareUpperTail(double x, int k) {
  const double z = (std::cbrt(x / k) - (1 - 2.0 / (9 * k))) / std::sqrt(2.0 / (9 * k));
  return 0.5 * std::erfc(z / std::sqrt(2.0));
}

// Why `tokens` is not a complete output of grammar `g`, re-checked by a
// matcher of its own ("" when it is): every token allowed where it stands,
// and the grammar ended (its stop token accepted, or complete).
std::string GrammarViolation(std::shared_ptr<const grammar::CompiledGrammar> g,
                             const std::vector<int32_t>& tokens) {
  grammar::GrammarMatcher m(std::move(g));
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!m.Accept(tokens[i])) {
      return "token " + std::to_string(i) + " (" + std::to_string(tokens[i]) +
             ") is not allowed there";
    }
  }
  if (!m.IsTerminated() && !m.CanEnd()) return "it ends before the grammar does";
  return "";
}

class GrammarSampling : public ::testing::TestWithParam<v1::DecodingPolicy> {};

TEST_P(GrammarSampling, OutputsFollowTheMaskedModel) {
  const v1::DecodingPolicy mode = GetParam();
  InprocPipeline p(2, Options(), InprocPipeline::kStageKvTokens, std::chrono::microseconds(100),
                   SharedModelPath(kStoriesModel));
  auto g = Compile(Choices());
  ASSERT_NE(g, nullptr);
  const std::vector<int32_t> prompt = StoryPrompt("Once upon a time there was a girl named");
  Reference ref(p.model());
  std::map<std::string, double> exact;
  {
    grammar::GrammarMatcher m(g);
    std::vector<int32_t> seq = prompt, path;
    Enumerate(ref, m, seq, path, 1.0, StoriesVocab().tokenizer->stop_ids(), &exact);
  }
  ASSERT_GE(exact.size(), 2u);
  constexpr int kN = 1500;
  std::map<std::string, int> seen;
  int violations = 0;
  for (int i = 0; i < kN; ++i) {
    scheduler::RequestOptions r = Request(prompt, g, 16);
    r.mode = mode;
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 1000 + i;
    if (mode == v1::DECODING_POLICY_PPSD || mode == v1::DECODING_POLICY_SPD) {
      r.oracle = {true, 0.5, ref.Greedy(prompt, g, 16, StoriesVocab().tokenizer->stop_ids())};
    }
    auto stream = p.engine().Submit(r);
    ASSERT_TRUE(stream.ok()) << stream.status();
    const std::vector<int32_t> tokens = Collect(**stream).tokens;
    // Every output keeps to the grammar: none may violate it.
    if (const std::string why = GrammarViolation(g, tokens); !why.empty()) {
      if (++violations <= 5) {
        ADD_FAILURE() << "seed " << r.sampling.seed << ": \"" << Text(tokens) << "\": " << why;
      }
    }
    ++seen[Text(tokens)];
  }
  EXPECT_EQ(violations, 0) << "outputs the grammar does not allow, of " << kN;
  // Chi-square over the outputs, the rare ones pooled (expected count < 5)
  // with any the enumeration left out (paths below 1e-7).
  double chi2 = 0, pooled_expected = 0;
  int pooled_seen = 0, cells = 0;
  for (const auto& [text, prob] : exact) {
    const double e = prob * kN;
    const int o = seen.count(text) ? seen[text] : 0;
    if (e < 5) {
      pooled_expected += e;
      pooled_seen += o;
      continue;
    }
    chi2 += (o - e) * (o - e) / e;
    ++cells;
  }
  int unexpected = 0;
  for (const auto& [text, count] : seen) {
    if (!exact.count(text)) unexpected += count;
  }
  pooled_seen += unexpected;
  if (pooled_expected > 0) {
    chi2 += (pooled_seen - pooled_expected) * (pooled_seen - pooled_expected) / pooled_expected;
    ++cells;
  }
  ASSERT_GE(cells, 2);
  const double pvalue = ChiSquareUpperTail(chi2, cells - 1);
  EXPECT_GT(pvalue, 1e-4) << "chi2 " << chi2 << " over " << cells << " cells (" << unexpected
                          << " outputs outside the enumeration)";
}

INSTANTIATE_TEST_SUITE_P(Policies, GrammarSampling,
                         ::testing::Values(v1::DECODING_POLICY_AUTOREGRESSIVE,
                                           v1::DECODING_POLICY_PPSD,
                                           v1::DECODING_POLICY_RECYCLE),
                         [](const auto& info) { return std::string(PolicyShortName(info.param)); });

}  // namespace
}  // namespace specline::testing
