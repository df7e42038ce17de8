// PIPO (pair-in, pair-out; docs/pipo.md) against autoregressive decoding
// on the same multi-process deployment: TTFT and TPOT at several prompt
// lengths, the share of second tokens kept, tokens per backbone pass, and
// the quality cost measured by the base model.
//
//   build/bench/pipo_bench [--model PATH] [--head DIR] [--stages N]
//                          [--prompt-lengths 16,64,256] [--taus 0.95,0]
//                          [--requests N] [--max-tokens N] [--stage-threads N]
//                          [--json PATH]
//
// Defaults: stories260K and training/heads/stories260K/pipo (run from the
// repository root), 2 stages. Request i of a row has a prompt of the row's
// length: BOS followed by tokens the deployment samples from the base model
// at T = 1 (seed i; a prompt holding the PAD id is re-drawn). It is decoded
// greedily, plainly (AUTOREGRESSIVE) and then with PIPO at the row's tau,
// back to back, so machine drift hits both.
//
// Columns: TTFT and TPOT (medians over requests, ms; TPOT = (e2e - TTFT) /
// (tokens - 1) at the client) and their PIPO / AR ratios (median of the
// per-request ratios; < 1 is faster), keep = kept second tokens / backbone
// passes, tok/pass = tokens per backbone pass (1 + keep), and quality:
// the base model's mean negative log-likelihood per generated token of the
// PIPO output minus that of its own greedy output (nats; 0 = as likely as
// the base's own text, higher = worse). PIPO is not lossless: this is the
// price of its speed.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "bench/spec_deployment.h"
#include "model/formats/model_source.h"
#include "model/runtime/local_pipeline.h"

namespace fs = std::filesystem;
namespace v1 = specline::v1;
using specline::bench::Median;
using specline::bench::Now;

namespace {

struct Options {
  std::string model = "../shared/models/stories260K/stories260K.bin";
  std::string head = "training/heads/stories260K/pipo";
  int stages = 2;
  std::vector<double> prompt_lengths = {16, 64, 256};
  std::vector<double> taus = {0.95, 0};
  int requests = 8;
  int max_tokens = 64;
  int stage_threads = 1;
  std::string json = "pipo_bench.json";
};

const char* kUsage =
    "usage: pipo_bench [--model PATH] [--head DIR] [--stages N] [--prompt-lengths 16,64,256]\n"
    "  [--taus 0.95,0] [--requests N] [--max-tokens N] [--stage-threads N] [--json PATH]\n";

// The base model's mean negative log-likelihood of `output` after `prompt`.
class BaseScorer {
 public:
  explicit BaseScorer(const std::string& model)
      : src_(specline::OpenModel(model)),
        local_(*src_, {0, src_->config().n_layers}, specline::SliceOptions{16, 4096}, 1) {}

  double MeanNll(const std::vector<int32_t>& prompt, const std::vector<int32_t>& output) {
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), output.begin(), output.end());
    std::vector<specline::SlotRef> slots;
    for (size_t i = 0; i + 1 < all.size(); ++i) slots.push_back({1, static_cast<int32_t>(i)});
    specline::SliceOutput out;
    const absl::Status st =
        local_.Forward(slots, std::span(all).first(all.size() - 1), {}, &out);
    if (!st.ok()) throw std::runtime_error("scoring: " + st.ToString());
    local_.Release(1);
    const int dim = src_->config().dim, vocab = src_->config().vocab_size;
    double nll = 0;
    for (size_t k = 0; k < output.size(); ++k) {
      const size_t row = prompt.size() - 1 + k;
      const std::vector<float> logits = local_.head().Logits(out.hidden.data() + row * dim, 1);
      const float top = *std::max_element(logits.begin(), logits.end());
      double sum = 0;
      for (int v = 0; v < vocab; ++v) sum += std::exp(double(logits[v]) - top);
      nll += std::log(sum) + top - logits[output[k]];
    }
    return output.empty() ? 0 : nll / output.size();
  }

 private:
  std::unique_ptr<specline::ModelSource> src_;
  specline::LocalPipeline local_;
};

struct Row {
  int prompt_len = 0;
  double tau = 0;
  std::vector<double> ar_ttft, pipo_ttft, ttft_ratio, ar_tpot, pipo_tpot, tpot_ratio, nll_delta;
  int64_t steps = 0, kept = 0;
  double keep() const { return steps > 0 ? double(kept) / double(steps) : 0; }
};

double Tpot(const specline::bench::Run& r) {
  return r.tokens.size() > 1 ? (r.e2e - r.ttft) / double(r.tokens.size() - 1) : 0;
}

std::vector<int32_t> Prompt(specline::bench::Deployment& d, int len, uint64_t seed) {
  for (uint64_t attempt = 0;; ++attempt) {
    specline::bench::BenchRequest q;
    q.prompt = {1};  // BOS
    q.max_tokens = len - 1;
    q.temperature = 1;
    q.seed = seed * 1000 + attempt;
    std::vector<int32_t> prompt = {1};
    const std::vector<int32_t> prefix = d.Submit(q).tokens;
    prompt.insert(prompt.end(), prefix.begin(), prefix.end());
    if (std::find(prompt.begin(), prompt.end(), 0) == prompt.end()) return prompt;  // PAD = 0
    if (attempt == 20) throw std::runtime_error("the base keeps sampling the PAD id");
  }
}

Row Measure(specline::bench::Deployment& d, BaseScorer& scorer, const Options& o, int len,
            double tau) {
  Row row;
  row.prompt_len = len;
  row.tau = tau;
  for (int r = 1; r <= o.requests; ++r) {
    specline::bench::BenchRequest q;
    q.prompt = Prompt(d, len, static_cast<uint64_t>(r));
    q.max_tokens = o.max_tokens;
    const specline::bench::Run ar = d.Submit(q);
    q.policy = v1::DECODING_POLICY_PIPO;
    q.pipo_tau = static_cast<float>(tau);
    const specline::bench::Run pipo = d.Submit(q);
    row.ar_ttft.push_back(1e3 * ar.ttft);
    row.pipo_ttft.push_back(1e3 * pipo.ttft);
    row.ttft_ratio.push_back(pipo.ttft / ar.ttft);
    row.ar_tpot.push_back(1e3 * Tpot(ar));
    row.pipo_tpot.push_back(1e3 * Tpot(pipo));
    row.tpot_ratio.push_back(Tpot(pipo) / Tpot(ar));
    row.steps += pipo.spec.num_drafts();
    row.kept += pipo.spec.num_accepted_tokens();
    row.nll_delta.push_back(scorer.MeanNll(q.prompt, pipo.tokens) -
                            scorer.MeanNll(q.prompt, ar.tokens));
  }
  return row;
}

void PrintRow(const Row& r) {
  std::printf("%6d %5.2f %8.2f %8.2f %6.3f %8.3f %8.3f %6.3f %6.3f %8.3f %8.3f\n", r.prompt_len,
              r.tau, Median(r.ar_ttft), Median(r.pipo_ttft), Median(r.ttft_ratio),
              Median(r.ar_tpot), Median(r.pipo_tpot), Median(r.tpot_ratio), r.keep(),
              1 + r.keep(), Median(r.nll_delta));
  std::fflush(stdout);
}

nlohmann::json ToJson(const Row& r) {
  return {{"prompt_len", r.prompt_len},      {"tau", r.tau},
          {"ar_ttft_ms", Median(r.ar_ttft)}, {"pipo_ttft_ms", Median(r.pipo_ttft)},
          {"ttft_ratio", Median(r.ttft_ratio)}, {"ar_tpot_ms", Median(r.ar_tpot)},
          {"pipo_tpot_ms", Median(r.pipo_tpot)}, {"tpot_ratio", Median(r.tpot_ratio)},
          {"steps", r.steps},                {"kept", r.kept},
          {"keep", r.keep()},                {"tokens_per_pass", 1 + r.keep()},
          {"nll_delta_nats", Median(r.nll_delta)}, {"nll_delta_rounds", r.nll_delta},
          {"ttft_ratio_rounds", r.ttft_ratio}, {"tpot_ratio_rounds", r.tpot_ratio}};
}

}  // namespace

int main(int argc, char** argv) try {
  Options o;
  const bool known = specline::bench::ParseArgs(argc, argv, [&](const std::string& a, auto& next) {
    if (a == "--model") o.model = next();
    else if (a == "--head") o.head = next();
    else if (a == "--stages") o.stages = std::stoi(next());
    else if (a == "--prompt-lengths") o.prompt_lengths = specline::bench::ParseDoubles(next());
    else if (a == "--taus") o.taus = specline::bench::ParseDoubles(next());
    else if (a == "--requests") o.requests = std::stoi(next());
    else if (a == "--max-tokens") o.max_tokens = std::stoi(next());
    else if (a == "--stage-threads") o.stage_threads = std::stoi(next());
    else if (a == "--json") o.json = next();
    else return false;
    return true;
  });
  if (!known) {
    std::cerr << kUsage;
    return 2;
  }
  if (!fs::exists(o.model)) throw std::runtime_error("no model at " + o.model);
  if (!fs::exists(fs::path(o.head) / "head.json")) throw std::runtime_error("no PIPO head at " + o.head);

  specline::bench::DeploymentOptions d;
  d.model = o.model;
  d.stages = o.stages;
  d.stage_threads = o.stage_threads;
  int longest = 0;
  for (double l : o.prompt_lengths) longest = std::max(longest, static_cast<int>(l));
  d.kv_tokens = std::max(1024, longest + o.max_tokens + 32);
  d.scheduler_args = {"--pipo-head", o.head};
  d.stage_args = {"--weight-set", o.head};
  specline::bench::Deployment deployment(d);
  BaseScorer scorer(o.model);

  nlohmann::json out = {{"bench", "pipo"}, {"model", o.model}, {"head", o.head},
                        {"stages", o.stages}, {"requests", o.requests},
                        {"max_tokens", o.max_tokens}, {"stage_threads", o.stage_threads},
                        {"cores", std::thread::hardware_concurrency()},
                        {"loadavg_start", specline::bench::LoadAverage()}};
  const double t_start = Now();
  std::printf("pipo_bench: %s + %s on %d stages, %d greedy requests x %d tokens per row, AR and "
              "PIPO back to back; %u cores\n",
              o.model.c_str(), o.head.c_str(), o.stages, o.requests, o.max_tokens,
              std::thread::hardware_concurrency());
  for (int w = 0; w < 3; ++w) {  // warm-up: pages in the weights, starts the connections
    specline::bench::BenchRequest q;
    q.prompt = {1};
    q.max_tokens = 16;
    deployment.Submit(q);
    q.policy = v1::DECODING_POLICY_PIPO;
    deployment.Submit(q);
  }
  std::printf("%6s %5s %8s %8s %6s %8s %8s %6s %6s %8s %8s\n", "prompt", "tau", "AR TTFT",
              "PI TTFT", "ratio", "AR TPOT", "PI TPOT", "ratio", "keep", "tok/pass", "dNLL");
  for (double len : o.prompt_lengths) {
    for (double tau : o.taus) {
      const Row row = Measure(deployment, scorer, o, static_cast<int>(len), tau);
      PrintRow(row);
      out["results"].push_back(ToJson(row));
    }
  }
  out["seconds"] = Now() - t_start;
  out["loadavg_end"] = specline::bench::LoadAverage();
  std::printf("took %.0f s; load average %s at the start, %s at the end\n", Now() - t_start,
              out["loadavg_start"].get<std::string>().c_str(),
              out["loadavg_end"].get<std::string>().c_str());
  if (!o.json.empty()) {
    std::ofstream(o.json) << out.dump(2) << "\n";
    std::printf("wrote %s\n", o.json.c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "pipo_bench: %s\n", e.what());
  return 1;
}
