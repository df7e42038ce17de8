// Offline acceptance study of the training-free drafters (docs/drafters.md)
// on a real model, in-process on the CPU.
//
// Phase 1 runs greedy decoding of each prompt (chat template applied) and
// records, at every position, the token the model produced and the top-k of
// its logits (decode steps, and the prompt rows too); each trace is checked
// token for token against Generate() (greedy). Phase 2 replays those
// traces through each drafter: at step i, before the model's token is
// known, the drafter proposes n = 1..N tokens from the context; the
// accepted length is how many leading drafts equal the tokens greedy
// decoding produced next (what greedy draft-then-verify would accept). Then
// the step's logits top-k is recorded in the recycling matrix (input token =
// the context's last token), as a scheduler would after the verify call.
// Replaying the recorded traces (instead of re-running the model per
// drafter) gives every drafter and matrix mode the same trajectories.
//
// Reported per drafter (recycling only, lookup only, combined = lookup
// first, recycle1st = the other order, suffix-own = the own text through
// its suffix automaton then recycling, suffix = that plus recent requests'
// texts, the default) and n:
// - mean accepted drafts over all positions, and 1 + that: the expected
//   tokens of a verify step placed at a random position;
// - simulated draft-then-verify: walk the trajectory, verify n drafts at
//   position i, advance by accepted + 1; tokens per verify step.
// Matrix modes: "isolated" (emptied before each prompt), "cold" (one matrix
// over the prompt set, starting empty) and "warm" (the cold pass's matrix,
// then the same prompts again: an upper bound for repeated traffic).
// Each with and without updates from the prompt rows' logits (a scheduler
// computes only the last prompt row's logits today). "lookup%" is the share
// of Propose calls the request's own text answered, "recent%" recent
// requests' texts; "us/draft" the median Propose
// time (n = 1..N calls together).
//
//   build/bench/drafter_bench [--model PATH] [--tokens 128] [--threads 2]
//       [--max-draft 5] [--k 8] [--min-ngram 2] [--max-ngram 4]
//       [--prompts bench/prompts/drafting.jsonl] [--json bench_drafter.json]
//       [--cost-curve 2:1.45,4:1.85,8:3.1,16:7.5]
//
// Last, a chain-against-tree study (TreeStudy): tokens per unit time of
// chains of 1..8 drafts and two-branch trees of depth 1..4, under the
// verification curve of --cost-curve (the dev VM's by default).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "model/drafters/prompt_lookup.h"
#include "model/drafters/top_k.h"
#include "model/drafters/training_free_drafter.h"
#include "model/runtime/generator.h"
#include "model/runtime/local_pipeline.h"
#include "model/tokenizer/model_tokenizer.h"

namespace specline {
namespace {

struct Options {
  std::string model;
  int tokens = 128;
  int threads = 2;
  int max_draft = 5;
  int k = 8;
  int min_ngram = 2;
  int max_ngram = 4;
  std::string json = "bench_drafter.json";
  // A call of m rows against a call of 1 (m:cost pairs, interpolated): the
  // verification curve measured on the dev VM (docs/benchmarks.md,
  // verify_curve_bench, 2 threads, mid of three runs).
  std::vector<std::pair<int, double>> cost_curve = {{1, 1.0}, {2, 1.45}, {4, 1.85}, {8, 3.1}, {16, 7.5}};
  std::string prompts = SPECLINE_SOURCE_DIR "/bench/prompts/drafting.jsonl";
};

struct Prompt {
  std::string name;
  bool grounded;  // the answer should copy or edit text given in the prompt
  std::string text;
};

// The prompt set the serving bench uses too (bench/prompts/drafting.jsonl:
// half input-grounded, half open-ended), one JSON object per line.
std::vector<Prompt> Prompts(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read prompts from " + path);
  std::vector<Prompt> prompts;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line);
    prompts.push_back({j.at("name").get<std::string>(), j.at("grounded").get<bool>(),
                       j.at("prompt").get<std::string>()});
  }
  if (prompts.empty()) throw std::runtime_error(path + " holds no prompts");
  return prompts;
}

// One greedy trajectory.
struct Trace {
  std::string name;
  bool grounded = false;
  std::vector<int32_t> prompt;
  std::vector<int32_t> generated;
  // top-k of the logits after processing prompt[j] (j < prompt.size()-1)
  std::vector<std::vector<int32_t>> prompt_topk;
  // top-k of the logits that chose generated[i] (input: context's last token)
  std::vector<std::vector<int32_t>> step_topk;
  double seconds = 0;
};

Trace Record(LocalPipeline& model, const Tokenizer& tok, const ChatTemplate* tmpl,
             const Prompt& p, const Options& o, uint64_t seq) {
  Trace t;
  t.name = p.name;
  t.grounded = p.grounded;
  std::string text = p.text;
  bool add_bos = tok.add_bos_by_default();
  if (tmpl) {
    absl::StatusOr<std::string> rendered = tmpl->Apply(std::vector<ChatMessage>{{"user", p.text}});
    if (!rendered.ok()) throw std::runtime_error(std::string(rendered.status().message()));
    text = *std::move(rendered);
    add_bos = false;
  }
  t.prompt = tok.Encode(text, add_bos, /*parse_special=*/tmpl != nullptr);
  const double t0 = bench::Now();
  const int vocab = model.head().vocab_size();
  SliceOutput out;
  std::vector<SlotRef> slots;
  for (int32_t i = 0; i < static_cast<int32_t>(t.prompt.size()); ++i) slots.push_back({seq, i});
  if (auto st = model.Forward(slots, t.prompt, {}, &out); !st.ok()) {
    throw std::runtime_error(std::string(st.message()));
  }
  // Every prompt row's logits (for the prefill-update variant).
  std::vector<float> logits = model.head().Logits(out.hidden.data(), t.prompt.size());
  for (size_t j = 0; j + 1 < t.prompt.size(); ++j) {
    t.prompt_topk.push_back(TopK(std::span<const float>(logits.data() + j * vocab, vocab), o.k));
  }
  std::vector<float> row(logits.end() - vocab, logits.end());
  const std::vector<int32_t>& stops = tok.stop_ids();
  int32_t pos = static_cast<int32_t>(t.prompt.size());
  for (int i = 0; i < o.tokens; ++i) {
    std::vector<int32_t> top = TopK(row, o.k);
    const int32_t token = top[0];  // greedy: argmax, lowest id on ties
    t.step_topk.push_back(std::move(top));
    t.generated.push_back(token);
    if (std::find(stops.begin(), stops.end(), token) != stops.end()) break;
    if (i + 1 == o.tokens) break;
    const SlotRef slot{seq, pos++};
    if (auto st = model.Forward({&slot, 1}, {&token, 1}, {}, &out); !st.ok()) {
      throw std::runtime_error(std::string(st.message()));
    }
    model.head().Logits(out.hidden.data(), 1, row.data());
  }
  model.Release(seq);
  t.seconds = bench::Now() - t0;
  // The trace must be what the runtime's own greedy generation produces.
  GenerationOptions g;
  g.max_tokens = o.tokens;
  g.stop_ids = stops;
  auto reference = Generate(model, seq, t.prompt, g);
  if (!reference.ok() || reference->tokens != t.generated) {
    throw std::runtime_error("trace of " + p.name + " differs from Generate's greedy output");
  }
  return t;
}

// Accumulated over the positions of some traces, for one drafter.
struct Tally {
  int max_draft = 0;
  int64_t positions = 0;
  std::vector<int64_t> accepted;      // [n-1]: sum over positions
  std::vector<int64_t> sim_steps;     // [n-1]: verify steps of the simulation
  int64_t sim_tokens = 0;             // tokens the simulations cover
  std::vector<double> propose_seconds;  // one per Propose call
  explicit Tally(int n = 0) : max_draft(n), accepted(n), sim_steps(n) {}
  void Add(const Tally& o) {
    positions += o.positions;
    sim_tokens += o.sim_tokens;
    for (int i = 0; i < max_draft; ++i) {
      accepted[i] += o.accepted[i];
      sim_steps[i] += o.sim_steps[i];
    }
    propose_seconds.insert(propose_seconds.end(), o.propose_seconds.begin(),
                           o.propose_seconds.end());
  }
};

// Replays one trace through `d` (whose matrix carries over from earlier
// traces unless the caller cleared it).
// `own`: the trace's suffix index (null: prompt lookup); `remember`: the
// trace's text goes into the recent-requests index afterwards.
Tally Replay(TrainingFreeDrafter& d, const Trace& t, int max_draft, bool prefill_updates,
             bool own_index, bool remember) {
  RequestSuffixIndex own;
  Tally tally(max_draft);
  // One client: every trace is in the unscoped namespace.
  const std::shared_ptr<DrafterMemory> mem = d.MemoryFor("");
  if (prefill_updates) {
    for (size_t j = 0; j < t.prompt_topk.size(); ++j) {
      d.ObserveTopK(*mem, t.prompt[j], t.prompt_topk[j]);
    }
  }
  std::vector<int32_t> ctx = t.prompt;
  const int64_t T = static_cast<int64_t>(t.generated.size());
  std::vector<std::vector<int>> acc(max_draft, std::vector<int>(T));
  for (int64_t i = 0; i < T; ++i) {
    for (int n = 1; n <= max_draft; ++n) {
      const double t0 = bench::Now();
      const DraftProposal draft = d.Propose(*mem, ctx, n, own_index ? &own : nullptr);
      tally.propose_seconds.push_back(bench::Now() - t0);
      // Accepted drafts must leave the bonus token inside the trajectory.
      int a = 0;
      while (a < static_cast<int>(draft.tokens.size()) && i + a + 1 < T &&
             draft.tokens[a] == t.generated[i + a]) {
        ++a;
      }
      acc[n - 1][i] = a;
      tally.accepted[n - 1] += a;
    }
    d.ObserveTopK(*mem, ctx.back(), t.step_topk[i]);
    ctx.push_back(t.generated[i]);
  }
  if (remember) d.Remember(*mem, ctx);
  tally.positions = T;
  tally.sim_tokens = T;
  for (int n = 1; n <= max_draft; ++n) {
    for (int64_t i = 0; i < T; i += acc[n - 1][i] + 1) ++tally.sim_steps[n - 1];
  }
  return tally;
}

// Arrays indexed by n - 1.
nlohmann::json TallyJson(const Tally& t, bool with_timing = true) {
  nlohmann::json mean = nlohmann::json::array(), expected = nlohmann::json::array(),
                 sim = nlohmann::json::array();
  for (int n = 1; n <= t.max_draft; ++n) {
    const double m = t.positions ? double(t.accepted[n - 1]) / t.positions : 0.0;
    mean.push_back(m);
    expected.push_back(1 + m);
    sim.push_back(t.sim_steps[n - 1] ? double(t.sim_tokens) / t.sim_steps[n - 1] : 0.0);
  }
  nlohmann::json j = {{"positions", t.positions},
                      {"mean_accepted", mean},
                      {"expected_tokens_per_step", expected},
                      {"simulated_tokens_per_verify_step", sim}};
  if (with_timing) j["propose_us_median"] = 1e6 * bench::Median(t.propose_seconds);
  return j;
}

// "2:1.45,4:1.85,8:3.1": (rows, cost of a call of that many rows against
// one of a single row); 1:1 is implied.
std::vector<std::pair<int, double>> ParseCostCurve(const std::string& text) {
  std::vector<std::pair<int, double>> curve = {{1, 1.0}};
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos) throw std::invalid_argument("--cost-curve: rows:cost pairs");
    curve.emplace_back(std::stoi(item.substr(0, colon)), std::stod(item.substr(colon + 1)));
  }
  std::sort(curve.begin(), curve.end());
  return curve;
}

double CostOf(const std::vector<std::pair<int, double>>& curve, int rows) {
  for (size_t i = 1; i < curve.size(); ++i) {
    if (rows <= curve[i].first) {
      const auto [r0, c0] = curve[i - 1];
      const auto [r1, c1] = curve[i];
      return c0 + (c1 - c0) * double(rows - r0) / double(r1 - r0);
    }
  }
  const auto [r0, c0] = curve[curve.size() - 2];
  const auto [r1, c1] = curve.back();
  return c1 + (c1 - c0) / double(r1 - r0) * double(rows - r1);
}

// Chain against a two-branch tree (issue 29: "trees, if they pay"), on the
// traces, with the default drafter (suffix matching, then Token
// Recycling; one drafter over the traces, as a server's). At each position:
//   chain n: the drafter's n tokens;
//   tree 2 x d: the drafter's d tokens, plus a second branch of d tokens
//     starting at the matrix's best candidate after the context's last
//     token that differs from the first branch's first token, continued by
//     the recycling chain: 2d draft rows, verified in one call with an
//     ancestor mask (the branch whose first token is right counts).
// Tokens per unit time = sum (1 + accepted) / sum cost(rows + 1), the cost
// curve's: a tree pays only if it beats every chain on that figure.
nlohmann::json TreeStudy(const std::vector<Trace>& traces, const Options& o, int vocab_size) {
  TrainingFreeDrafterOptions dopt;
  dopt.vocab_size = vocab_size;
  dopt.k = o.k;
  dopt.min_ngram = o.min_ngram;
  dopt.max_ngram = o.max_ngram;
  TrainingFreeDrafter d(dopt);
  constexpr int kMaxChain = 8, kMaxDepth = 4;
  struct Sum {
    double tokens = 0, cost = 0;
    int64_t steps = 0;
  };
  std::vector<Sum> chain(kMaxChain + 1), tree(kMaxDepth + 1);
  auto accepted = [](const std::vector<int32_t>& draft, const Trace& t, int64_t i) {
    int a = 0;
    const auto T = static_cast<int64_t>(t.generated.size());
    while (a < static_cast<int>(draft.size()) && i + a + 1 < T && draft[a] == t.generated[i + a]) ++a;
    return a;
  };
  const std::shared_ptr<DrafterMemory> mem = d.MemoryFor("");
  for (const Trace& t : traces) {
    RequestSuffixIndex own;
    std::vector<int32_t> ctx = t.prompt;
    for (int64_t i = 0; i < static_cast<int64_t>(t.generated.size()); ++i) {
      for (int n = 1; n <= kMaxChain; ++n) {
        const std::vector<int32_t> draft = d.Propose(*mem, ctx, n, &own).tokens;
        chain[n].tokens += 1 + accepted(draft, t, i);
        chain[n].cost += CostOf(o.cost_curve, static_cast<int>(draft.size()) + 1);
        ++chain[n].steps;
      }
      const std::vector<int32_t> row = mem->recycling.Candidates(ctx.back());
      for (int depth = 1; depth <= kMaxDepth; ++depth) {
        const std::vector<int32_t> a = d.Propose(*mem, ctx, depth, &own).tokens;
        std::vector<int32_t> b;
        for (int32_t c : row) {
          if (a.empty() || c != a[0]) {
            b = {c};
            break;
          }
        }
        if (!b.empty() && depth > 1) {
          const std::vector<int32_t> more =
              mem->recycling.Draft(std::span<const int32_t>(b), depth - 1);
          b.insert(b.end(), more.begin(), more.end());
        }
        const int got = std::max(accepted(a, t, i), accepted(b, t, i));
        tree[depth].tokens += 1 + got;
        tree[depth].cost += CostOf(o.cost_curve, static_cast<int>(a.size() + b.size()) + 1);
        ++tree[depth].steps;
      }
      d.ObserveTopK(*mem, ctx.back(), t.step_topk[i]);
      ctx.push_back(t.generated[i]);
    }
    d.Remember(*mem, ctx);
  }
  std::printf("\n== chain against a two-branch tree (cost curve:");
  for (const auto& [rows, cost] : o.cost_curve) std::printf(" %d:%.2f", rows, cost);
  std::printf(") ==\n%-12s %14s %16s\n", "draft", "tokens/step", "tokens/unit time");
  nlohmann::json out = nlohmann::json::array();
  auto print = [&](const std::string& name, const Sum& x) {
    const double per_step = x.tokens / double(std::max<int64_t>(x.steps, 1));
    const double per_time = x.tokens / std::max(x.cost, 1e-9);
    std::printf("%-12s %14.3f %16.3f\n", name.c_str(), per_step, per_time);
    out.push_back({{"draft", name}, {"tokens_per_step", per_step}, {"tokens_per_unit_time", per_time}});
  };
  print("plain", Sum{1, 1, 1});
  for (int n = 1; n <= kMaxChain; ++n) print("chain " + std::to_string(n), chain[n]);
  for (int depth = 1; depth <= kMaxDepth; ++depth) print("tree 2x" + std::to_string(depth), tree[depth]);
  return out;
}

}  // namespace
}  // namespace specline

int main(int argc, char** argv) {
  using namespace specline;
  Options o;
  if (const char* home = std::getenv("HOME")) {
    o.model = std::string(home) + "/.cache/specline/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  }
  const bool ok = bench::ParseArgs(argc, argv, [&](const std::string& a, auto next) {
    if (a == "--model") o.model = next();
    else if (a == "--tokens") o.tokens = std::stoi(next());
    else if (a == "--threads") o.threads = std::stoi(next());
    else if (a == "--max-draft") o.max_draft = std::stoi(next());
    else if (a == "--k") o.k = std::stoi(next());
    else if (a == "--min-ngram") o.min_ngram = std::stoi(next());
    else if (a == "--max-ngram") o.max_ngram = std::stoi(next());
    else if (a == "--json") o.json = next();
    else if (a == "--prompts") o.prompts = next();
    else if (a == "--cost-curve") o.cost_curve = ParseCostCurve(next());
    else return false;
    return true;
  });
  if (!ok || o.tokens < 1 || o.max_draft < 1 || o.k < 1) {
    std::cerr << "usage: drafter_bench [--model PATH] [--tokens N] [--threads T] [--max-draft N]"
                 " [--k K] [--min-ngram N] [--max-ngram N] [--prompts JSONL] [--json PATH]\n";
    return 2;
  }
  auto model = OpenModel(o.model);
  auto tok = OpenTokenizerFor(*model);
  absl::StatusOr<std::optional<ChatTemplate>> own_template = ChatTemplateFor(*model, tok.get());
  if (!own_template.ok()) throw std::runtime_error(std::string(own_template.status().message()));
  const std::optional<ChatTemplate> tmpl = *std::move(own_template);
  const ModelConfig& c = model->config();
  SliceOptions so;
  so.kv_capacity_tokens = 4096;
  LocalPipeline pipeline(*model, {0, c.n_layers}, so, o.threads);

  // Phase 1: greedy trajectories.
  std::vector<Trace> traces;
  const std::vector<Prompt> prompts = Prompts(o.prompts);
  for (size_t i = 0; i < prompts.size(); ++i) {
    traces.push_back(Record(pipeline, *tok, tmpl ? &*tmpl : nullptr, prompts[i], o, i + 1));
    const Trace& t = traces.back();
    std::printf("%-14s %s prompt %4zu tokens, generated %4zu in %5.1f s\n", t.name.c_str(),
                t.grounded ? "grounded" : "open    ", t.prompt.size(), t.generated.size(),
                t.seconds);
    std::fflush(stdout);
  }

  // The per-step costs at serving sizes: prompt lookup over a context of
  // 4096 tokens of these traces' text (the traces repeated; the last 64
  // tokens replaced by ids that never occur, so the scan runs to the start
  // as when nothing matches), and TopK over one vocabulary row.
  nlohmann::json costs;
  {
    std::vector<int32_t> text;
    while (text.size() < 4096) {
      for (const Trace& t : traces) {
        text.insert(text.end(), t.prompt.begin(), t.prompt.end());
        text.insert(text.end(), t.generated.begin(), t.generated.end());
      }
    }
    text.resize(4096);
    for (int i = 0; i < 64; ++i) text[4096 - 64 + i] = c.vocab_size + i;  // never matches
    std::vector<double> lookup_s, topk_s;
    size_t sink = 0;
    for (int r = 0; r < 200; ++r) {
      const double t0 = bench::Now();
      sink += PromptLookup(text, o.min_ngram, o.max_ngram, o.max_draft).size();
      lookup_s.push_back(bench::Now() - t0);
    }
    std::vector<float> row(c.vocab_size);
    for (int i = 0; i < c.vocab_size; ++i) row[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f;
    for (int r = 0; r < 200; ++r) {
      const double t0 = bench::Now();
      sink += TopK(row, o.k).size();
      topk_s.push_back(bench::Now() - t0);
    }
    costs = {{"prompt_lookup_4096_tokens_us_median", 1e6 * bench::Median(lookup_s)},
             {"top_k_row_us_median", 1e6 * bench::Median(topk_s)}};
    std::printf("\nprompt lookup, 4096-token context, no match: %.1f us (median); top-%d of a "
                "%d-entry row: %.1f us (median)\n",
                1e6 * bench::Median(lookup_s), o.k, c.vocab_size, 1e6 * bench::Median(topk_s));
    volatile size_t keep = sink;  // keep the results observable
    (void)keep;
  }

  // Phase 2: replay through each drafter and matrix mode.
  struct DrafterKind {
    const char* name;
    bool lookup, recycling, lookup_first;
    bool automaton = false;  // the request's own text through its suffix automaton
    bool recent = false;     // recent requests' texts (not in "isolated" mode)
  };
  // "suffix" is the default drafter (the own text's automaton, then recent
  // requests, then Token Recycling); "combined" the one before it (prompt
  // lookup, then Token Recycling); the others take it apart.
  const DrafterKind kinds[] = {{"recycling", false, true, true},
                               {"lookup", true, false, true},
                               {"combined", true, true, true},
                               {"recycle1st", true, true, false},
                               {"suffix-own", true, true, true, true, false},
                               {"suffix", true, true, true, true, true}};
  const char* modes[] = {"isolated", "cold", "warm"};
  nlohmann::json results = nlohmann::json::array();
  const std::vector<std::string> groups = {"all", "grounded", "open"};
  for (bool prefill_updates : {false, true}) {
    std::printf("\n== matrix updated from decode steps%s ==\n",
                prefill_updates ? " and every prompt row" : " only (the last prompt row included)");
    std::printf("%-9s %-10s %-9s", "mode", "drafter", "group");
    for (int n = 1; n <= o.max_draft; ++n) std::printf("   acc@%d (tok)", n);
    std::printf("  sim tok/step@%d  lookup%%  recent%%  us/draft\n", o.max_draft);
    for (const char* mode : modes) {
      for (const DrafterKind& kind : kinds) {
        TrainingFreeDrafterOptions dopt;
        dopt.vocab_size = c.vocab_size;
        dopt.k = o.k;
        dopt.num_drafts = o.max_draft;
        dopt.min_ngram = o.min_ngram;
        dopt.max_ngram = o.max_ngram;
        dopt.use_prompt_lookup = kind.lookup;
        dopt.use_token_recycling = kind.recycling;
        dopt.prefer_prompt_lookup = kind.lookup_first;
        dopt.use_suffix_automaton = kind.automaton;
        const std::string m = mode;
        const bool remember = kind.recent && m != "isolated";
        dopt.recent_tokens = remember ? int64_t{1} << 18 : 0;
        TrainingFreeDrafter d(dopt);
        if (m == "warm") {  // the cold pass first, results discarded
          for (const Trace& t : traces) {
            Replay(d, t, o.max_draft, prefill_updates, kind.automaton, remember);
          }
        }
        const DrafterCounters before = d.counters();
        std::map<std::string, Tally> by_group;
        for (const std::string& g : groups) by_group.emplace(g, Tally(o.max_draft));
        nlohmann::json per_prompt = nlohmann::json::object();
        for (const Trace& t : traces) {
          if (m == "isolated") d.MemoryFor("")->recycling.Clear();
          const Tally tally = Replay(d, t, o.max_draft, prefill_updates, kind.automaton, remember);
          by_group.at("all").Add(tally);
          by_group.at(t.grounded ? "grounded" : "open").Add(tally);
          per_prompt[t.name] = TallyJson(tally, /*with_timing=*/false)["mean_accepted"];
        }
        const DrafterCounters after = d.counters();
        const int64_t lookup = after.prompt_lookup_drafts - before.prompt_lookup_drafts;
        const int64_t recent = after.recent_requests_drafts - before.recent_requests_drafts;
        const int64_t recycled = after.token_recycling_drafts - before.token_recycling_drafts;
        const int64_t empty = after.empty_drafts - before.empty_drafts;
        const int64_t proposals = std::max<int64_t>(1, lookup + recent + recycled + empty);
        const double lookup_share = double(lookup) / proposals;
        const double recent_share = double(recent) / proposals;
        for (const std::string& g : groups) {
          const Tally& t = by_group.at(g);
          std::printf("%-9s %-10s %-9s", mode, kind.name, g.c_str());
          for (int n = 1; n <= o.max_draft; ++n) {
            const double mean = t.positions ? double(t.accepted[n - 1]) / t.positions : 0.0;
            std::printf("  %5.3f (%5.3f)", mean, 1 + mean);
          }
          const int last = o.max_draft - 1;
          std::printf("  %14.3f", t.sim_steps[last] ? double(t.sim_tokens) / t.sim_steps[last] : 0.0);
          if (g == "all") {
            std::printf("  %6.1f  %6.1f  %8.2f", 100 * lookup_share, 100 * recent_share,
                        1e6 * bench::Median(t.propose_seconds));
          }
          std::printf("\n");
        }
        nlohmann::json r = {{"prefill_updates", prefill_updates},
                            {"mode", mode},
                            {"drafter", kind.name},
                            {"drafts_by_source",
                             {{"prompt_lookup", lookup}, {"recent_requests", recent},
                              {"token_recycling", recycled},
                              {"empty", empty}}},
                            {"per_prompt_mean_accepted", per_prompt}};
        for (const std::string& g : groups) r[g] = TallyJson(by_group.at(g));
        results.push_back(r);
      }
    }
  }
  const nlohmann::json tree_study = TreeStudy(traces, o, c.vocab_size);
  TrainingFreeDrafterOptions sizing;
  sizing.vocab_size = c.vocab_size;
  sizing.k = o.k;
  const size_t matrix_bytes = TrainingFreeDrafter(sizing).MemoryFor("")->recycling.bytes();
  std::printf("\nrecycling matrix: vocab %d x k %d = %.1f KiB\n", c.vocab_size, o.k,
              matrix_bytes / 1024.0);
  nlohmann::json traces_json = nlohmann::json::array();
  for (const Trace& t : traces) {
    traces_json.push_back({{"name", t.name},
                           {"grounded", t.grounded},
                           {"prompt_tokens", t.prompt.size()},
                           {"generated_tokens", t.generated.size()},
                           {"seconds", t.seconds}});
  }
  nlohmann::json out = {{"bench", "drafter_acceptance"},
                        {"model", o.model},
                        {"vocab_size", c.vocab_size},
                        {"max_new_tokens", o.tokens},
                        {"max_draft", o.max_draft},
                        {"arrays", "indexed by n - 1 (n = drafts per verify step)"},
                        {"k", o.k},
                        {"min_ngram", o.min_ngram},
                        {"max_ngram", o.max_ngram},
                        {"threads", o.threads},
                        {"matrix_bytes", matrix_bytes},
                        {"costs", costs},
                        {"chain_vs_tree", tree_study},
                        {"traces", traces_json},
                        {"results", results}};
  std::ofstream(o.json) << out.dump(1) << "\n";
  std::printf("wrote %s\n", o.json.c_str());
  return 0;
}
