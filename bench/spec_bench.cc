// Pipeline speculation with the oracle drafter: decode speedup of SPD and
// PPSD over autoregressive decoding on the same multi-process deployment,
// next to the papers' theoretical speedup, for acceptance rates alpha in
// [0, 1]; and against the best single-process autoregressive run.
//
//   build/bench/spec_bench [--stages N] [--max-tokens N] [--repeats N]
//                          [--alphas 0,0.25,...] [--model PATH] [--prompt N]
//                          [--stage-threads N] [--scheduler-threads N]
//                          [--local-threads N] [--scheduler-arg FLAG ...]
//                          [--no-auto] [--json PATH]
//
// Deployment: N `specline-stage` processes (layers split evenly) and one
// `specline-scheduler` (--allow-oracle true) on loopback TCP, wired like
// `specline serve` (cli/launcher.cc) but without the gateway: the bench
// talks to the scheduler's internal Submit, one greedy request at a time.
// The plain (AUTOREGRESSIVE) run's tokens are the oracle's reference: with
// probability alpha it proposes the token the plain run produced, else a
// wrong one; SPD timing drafts at once, PPSD timing once the newest token
// has passed the first stage (exit layer E = L / N).
//
// Every speculative configuration alternates with the plain run on the same
// deployment (AR, spec, AR, spec, ...) so machine drift hits both; speedup
// = median spec decode tok/s / median AR decode tok/s, decode tok/s =
// (tokens - 1) / (end-to-end - time to first token) at the client.
// Theory: n / (alpha + (1 - alpha) n), the expected equivalent acceptance
// length L'acc = n N / K of SPD (K = accepted + n (N - accepted)); PPSD's
// eq. 7 with E = L / n gives the same.
//
// n = 2 by default (the dev machine has 2 cores); --stages 4 for n = 4 on a
// machine with a core per process. Writes spec_bench.json unless --json
// says otherwise; exits 1 when any output differs from the plain run's.
//
// The scheduler's --spec-policy is `always` for the sweep; the sweep is
// run again with `auto` (the production default, which drafts only where
// the sequence's acceptance pays on the measured pace) on a second
// deployment started afterwards, whose measured pace is printed at the end.
//
// Columns: AR / spec decode tok/s (medians), speedup, theory, speedup /
// theory, L'acc and acceptance (accepted / (accepted + flushes)) from the
// final SubmitEvent, draft tokens sent, mismatches against the plain run's
// tokens (greedy decoding is lossless: must be 0), the cores the deployment
// kept busy during AR and spec requests (CPU seconds of the stage and
// scheduler processes / wall time), and `work`: CPU time per token of spec
// over AR (drafts that are rejected cost CPU; on a machine with no spare
// core that is a slowdown whatever the pipeline does), and `other`: cores
// busy outside the deployment during the spec requests (the bench client
// and anything else on a shared machine; from /proc/stat).
//
// The default model is a random stories110M-shaped checkpoint (dim 768,
// 12 layers, vocab 32000, fp32) written to /tmp on first use (the same file
// serving_bench uses): speed does not depend on the weights' values.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "bench/synthetic_workload.h"
#include "bench/bench_util.h"
#include "bench/spec_deployment.h"
#include "model/formats/model_source.h"
#include "model/formats/random_model.h"
#include "model/runtime/generator.h"
#include "model/runtime/local_pipeline.h"

using specline::bench::BenchRequest;
using specline::bench::Deployment;
using specline::bench::LoadAverage;
using specline::bench::Median;
using specline::bench::Now;
using specline::bench::Run;
using specline::bench::Theory;
namespace internal = specline::internal;
namespace v1 = specline::v1;

namespace {

struct Options {
  std::string model = "/tmp/specline-random-stories110M.bin";
  int stages = 2;
  int max_tokens = 96;
  int prompt = 8;
  int repeats = 3;
  std::vector<double> alphas = {0, 0.25, 0.5, 0.75, 0.9, 1};
  int stage_threads = 1;
  int scheduler_threads = 1;
  int local_threads = 0;  // 0 = all cores
  bool run_auto = true;
  std::vector<std::string> scheduler_args;  // extra flags, as is
  std::string json = "spec_bench.json";
  // GPU runs: where stages and the scheduler's head compute ("" = cpu),
  // and a named random shape instead of --model.
  std::string device;
  std::string shape;
  bool run_local = true;
};

const char* kUsage =
    "usage: spec_bench [--stages N] [--max-tokens N] [--repeats N] [--alphas A,B,...]\n"
    "  [--model PATH] [--prompt N] [--stage-threads N] [--scheduler-threads N]\n"
    "  [--local-threads N] [--scheduler-arg FLAG]... [--no-auto] [--json PATH]\n"
    "  [--device cuda|cuda:N] [--shape tinyllama|llama2-7b] [--no-local]\n";

// One greedy request with the bench's prompt; alpha >= 0: the oracle.
Run Submit(Deployment& d, const Options& o, v1::DecodingPolicy policy, double alpha = -1,
           const std::vector<int32_t>* reference = nullptr) {
  BenchRequest q;
  q.prompt = specline::bench::SyntheticPrompt(o.prompt);
  q.max_tokens = o.max_tokens;
  q.policy = policy;
  q.oracle_alpha = alpha;
  q.reference = reference;
  return d.Submit(q);
}

specline::bench::DeploymentOptions Deploy(const Options& o, const std::string& spec_policy) {
  specline::bench::DeploymentOptions d;
  d.model = o.model;
  d.stages = o.stages;
  d.stage_threads = o.stage_threads;
  d.scheduler_threads = o.scheduler_threads;
  // KV per stage: the one request.
  d.kv_tokens = std::max(1024, o.prompt + o.max_tokens + 16);
  d.spec_policy = spec_policy;
  d.allow_oracle = true;
  d.scheduler_args = o.scheduler_args;
  if (!o.device.empty()) {
    // One GPU: every stage process on the same device, each in its own
    // context (the GPU time-slices between them; docs/cuda.md).
    for (auto* args : {&d.stage_args, &d.scheduler_args}) {
      args->insert(args->end(), {"--device", o.device});
    }
  }
  return d;
}

// The best single-process autoregressive run: the whole model in one
// LocalPipeline on every core.
class Local {
 public:
  Local(const Options& o)
      : model_(specline::OpenModel(o.model)),
        pipeline_(*model_, {0, model_->config().n_layers}, Slices(o), o.local_threads),
        max_tokens_(o.max_tokens), prompt_(specline::bench::SyntheticPrompt(o.prompt)) {}
  specline::GenerationResult Generate() {
    specline::GenerationOptions g;
    g.max_tokens = max_tokens_;
    g.ignore_eos = true;
    auto res = specline::Generate(pipeline_, ++seq_, prompt_, g);
    if (!res.ok()) throw std::runtime_error(std::string(res.status().message()));
    return *std::move(res);
  }

 private:
  static specline::SliceOptions Slices(const Options& o) {
    specline::SliceOptions so;
    so.kv_capacity_tokens = o.prompt + o.max_tokens + 16;
    return so;
  }
  std::unique_ptr<specline::ModelSource> model_;
  specline::LocalPipeline pipeline_;
  int max_tokens_;
  std::vector<int32_t> prompt_;
  uint64_t seq_ = 0;
};

struct Row {
  std::string policy;       // "SPD" / "PPSD"
  std::string spec_policy;  // scheduler --spec-policy
  double alpha = 0;
  std::vector<double> ar, spec;  // decode tok/s per round
  std::vector<double> lacc, acceptance, drafts, draft_tokens;
  std::vector<double> ar_cores, spec_cores;  // CPU seconds of the deployment / wall
  std::vector<double> ar_work, spec_work;    // CPU ms of the deployment per token
  std::vector<double> spec_other;  // cores busy outside the deployment during spec requests
  int mismatches = 0;
  double speedup() const { return Median(spec) / Median(ar); }
};

std::string Policy(v1::DecodingPolicy p) {
  return p == v1::DECODING_POLICY_SPD ? "SPD" : p == v1::DECODING_POLICY_PPSD ? "PPSD" : "AR";
}

// Rounds of (AR, spec) on `d`.
Row Measure(Deployment& d, const Options& o, const std::vector<int32_t>& reference,
            v1::DecodingPolicy policy, double alpha, const std::string& spec_policy) {
  Row row;
  row.policy = Policy(policy);
  row.spec_policy = spec_policy;
  row.alpha = alpha;
  for (int r = 0; r < o.repeats; ++r) {
    Run ar = Submit(d, o, v1::DECODING_POLICY_AUTOREGRESSIVE);
    Run sp = Submit(d, o, policy, alpha, &reference);
    row.mismatches += (ar.tokens != reference) + (sp.tokens != reference);
    row.ar.push_back(ar.decode_tok_s());
    row.spec.push_back(sp.decode_tok_s());
    row.ar_cores.push_back(ar.cores());
    row.spec_cores.push_back(sp.cores());
    row.ar_work.push_back(ar.cpu_ms_per_token());
    row.spec_work.push_back(sp.cpu_ms_per_token());
    row.spec_other.push_back(sp.other_cores());
    const auto& s = sp.spec;
    row.lacc.push_back(s.equivalent_acceptance_length());
    const double verified = double(s.num_accepted_tokens() + s.num_flushes());
    row.acceptance.push_back(verified > 0 ? s.num_accepted_tokens() / verified : 0);
    row.drafts.push_back(double(s.num_drafts()));
    row.draft_tokens.push_back(double(s.num_draft_tokens()));
  }
  return row;
}

void PrintRow(const Row& r, int n) {
  const double th = Theory(r.alpha, n);
  std::printf("%-5s %-7s %5.2f %8.1f %8.1f %8.3f %7.3f %7.3f %6.3f %7.3f %7.0f %4d %5.2f %5.2f %5.2f %5.2f\n",
              r.policy.c_str(), r.spec_policy.c_str(), r.alpha, Median(r.ar), Median(r.spec),
              r.speedup(), th, r.speedup() / th, Median(r.lacc), Median(r.acceptance),
              Median(r.draft_tokens), r.mismatches, Median(r.ar_cores), Median(r.spec_cores),
              Median(r.spec_work) / Median(r.ar_work), Median(r.spec_other));
  std::fflush(stdout);
}

nlohmann::json ToJson(const Row& r, int n) {
  return {{"policy", r.policy}, {"spec_policy", r.spec_policy}, {"alpha", r.alpha},
          {"ar_decode_tok_s", Median(r.ar)}, {"spec_decode_tok_s", Median(r.spec)},
          {"speedup", r.speedup()}, {"theory", Theory(r.alpha, n)},
          {"fraction_of_theory", r.speedup() / Theory(r.alpha, n)},
          {"equivalent_acceptance_length", Median(r.lacc)},
          {"acceptance", Median(r.acceptance)}, {"draft_tokens", Median(r.draft_tokens)},
          {"drafts", Median(r.drafts)}, {"mismatches", r.mismatches},
          {"ar_cores", Median(r.ar_cores)}, {"spec_cores", Median(r.spec_cores)},
          {"ar_cpu_ms_per_token", Median(r.ar_work)},
          {"spec_cpu_ms_per_token", Median(r.spec_work)},
          {"spec_other_cores", Median(r.spec_other)}, {"spec_other_rounds", r.spec_other},
          {"spec_cores_rounds", r.spec_cores},
          {"ar_rounds", r.ar}, {"spec_rounds", r.spec}};
}

}  // namespace

int main(int argc, char** argv) try {
  Options o;
  const bool known = specline::bench::ParseArgs(argc, argv, [&](const std::string& a, auto& next) {
    if (a == "--model") o.model = next();
    else if (a == "--stages") o.stages = std::stoi(next());
    else if (a == "--max-tokens") o.max_tokens = std::stoi(next());
    else if (a == "--prompt") o.prompt = std::stoi(next());
    else if (a == "--repeats") o.repeats = std::stoi(next());
    else if (a == "--alphas") o.alphas = specline::bench::ParseDoubles(next());
    else if (a == "--stage-threads") o.stage_threads = std::stoi(next());
    else if (a == "--scheduler-threads") o.scheduler_threads = std::stoi(next());
    else if (a == "--local-threads") o.local_threads = std::stoi(next());
    else if (a == "--scheduler-arg") o.scheduler_args.push_back(next());
    else if (a == "--no-auto") o.run_auto = false;
    else if (a == "--device") o.device = next();
    else if (a == "--shape") o.shape = next();
    else if (a == "--no-local") o.run_local = false;
    else if (a == "--json") o.json = next();
    else return false;
    return true;
  });
  if (!known) {
    std::cerr << kUsage;
    return 2;
  }
  if (o.local_threads <= 0) o.local_threads = std::max(1u, std::thread::hardware_concurrency());
  if (!o.shape.empty()) {
    o.model = specline::bench::EnsureShapedModel(o.shape);
  } else {
    specline::bench::EnsureStories110MShapedModel(o.model);
  }
  // The CPU single-process comparison means nothing next to GPU stages.
  if (!o.device.empty()) o.run_local = false;
  const int n = o.stages;
  nlohmann::json out = {{"bench", "spec"}, {"model", o.model}, {"stages", n},
                        {"device", o.device.empty() ? "cpu" : o.device},
                        {"max_tokens", o.max_tokens}, {"prompt_tokens", o.prompt},
                        {"repeats", o.repeats}, {"stage_threads", o.stage_threads},
                        {"scheduler_threads", o.scheduler_threads},
                        {"local_threads", o.local_threads}, {"scheduler_args", o.scheduler_args},
                        {"cores", std::thread::hardware_concurrency()}};
  const double t_start = Now();
  out["loadavg_start"] = LoadAverage();

  std::vector<Row> rows;
  std::vector<int32_t> reference;
  double local_tok_s = 0, ar_tok_s = 0;
  int local_mismatches = 0;
  {
    Deployment d(Deploy(o, "always"));
    // Warm-up (pages in the weights) and the oracle's reference.
    Run first = Submit(d, o, v1::DECODING_POLICY_AUTOREGRESSIVE);
    reference = first.tokens;
    if (static_cast<int>(reference.size()) != o.max_tokens)
      throw std::runtime_error("the plain run stopped early");
    Submit(d, o, v1::DECODING_POLICY_SPD, 1.0, &reference);
    Submit(d, o, v1::DECODING_POLICY_PPSD, 1.0, &reference);

    // The best single-process run, alternating with the deployment's AR.
    if (o.run_local) {
      Local local(o);
      local.Generate();  // warm-up
      std::vector<double> lr, ar;
      for (int r = 0; r < o.repeats; ++r) {
        auto g = local.Generate();
        local_mismatches += g.tokens != reference;
        lr.push_back((g.tokens.size() - 1) / g.decode_seconds);
        Run a = Submit(d, o, v1::DECODING_POLICY_AUTOREGRESSIVE);
        ar.push_back(a.decode_tok_s());
      }
      local_tok_s = Median(lr);
      ar_tok_s = Median(ar);
      out["single_process"] = {{"threads", o.local_threads}, {"decode_tok_s", local_tok_s},
                               {"rounds", lr}, {"mismatches", local_mismatches},
                               {"deployment_ar_decode_tok_s", ar_tok_s}, {"ar_rounds", ar}};
    }
    std::printf("spec_bench: %d stage process(es) x %d thread(s) + scheduler x %d thread(s), "
                "%d cores; %d tokens after a %d-token prompt, greedy; %d interleaved rounds\n",
                n, o.stage_threads, o.scheduler_threads, std::thread::hardware_concurrency(),
                o.max_tokens, o.prompt, o.repeats);
    // Every token reads every weight once, in any of these schemes: the
    // single process on all cores is about the machine's memory-bandwidth
    // roof, so no speculation on this machine beats local / AR.
    if (o.run_local) {
      std::printf("single process, %d threads: %.1f tok/s; deployment AR: %.1f tok/s (%.3fx); "
                  "speedup bound of this machine (single process / AR): %.3f\n",
                  o.local_threads, local_tok_s, ar_tok_s, ar_tok_s / local_tok_s,
                  local_tok_s / ar_tok_s);
    } else {
      std::printf("device %s, model %s\n", o.device.empty() ? "cpu" : o.device.c_str(),
                  o.model.c_str());
    }
    std::printf("%-5s %-7s %5s %8s %8s %8s %7s %7s %6s %7s %7s %4s %5s %5s %5s %5s\n", "pol",
                "spec-p", "alpha", "AR tok/s", "sp tok/s", "speedup", "theory", "/theory", "L'acc",
                "accept", "drafts", "mism", "ARcpu", "spcpu", "work", "other");
    for (v1::DecodingPolicy p : {v1::DECODING_POLICY_SPD, v1::DECODING_POLICY_PPSD}) {
      for (double alpha : o.alphas) {
        rows.push_back(Measure(d, o, reference, p, alpha, "always"));
        PrintRow(rows.back(), n);
      }
    }
  }
  std::vector<std::string> auto_pace;
  if (o.run_auto) {
    specline::bench::DeploymentOptions auto_options = Deploy(o, "auto");
    auto_options.metrics = true;  // the pace auto measured (PaceGauges)
    Deployment d(auto_options);
    Submit(d, o, v1::DECODING_POLICY_AUTOREGRESSIVE);  // warm-up
    for (v1::DecodingPolicy p : {v1::DECODING_POLICY_SPD, v1::DECODING_POLICY_PPSD}) {
      for (double alpha : o.alphas) {
        rows.push_back(Measure(d, o, reference, p, alpha, "auto"));
        PrintRow(rows.back(), n);
      }
    }
    auto_pace = d.PaceGauges();
    std::printf("auto's measured pace (policies/draft_pace.h):\n");
    for (const std::string& line : auto_pace) std::printf("  %s\n", line.c_str());
  }

  // Summary against the targets.
  int mismatches = local_mismatches;
  const Row* best = nullptr;
  double worst_fraction = 1e9;
  std::map<std::string, double> worst_alpha0;  // by --spec-policy
  double worst_auto = 1e9;  // auto must never run below plain decoding
  for (const Row& r : rows) {
    mismatches += r.mismatches;
    if (r.spec_policy == "always") {
      worst_fraction = std::min(worst_fraction, r.speedup() / Theory(r.alpha, n));
    }
    if (r.alpha == 0) {
      auto [it, fresh] = worst_alpha0.emplace(r.spec_policy, r.speedup());
      if (!fresh) it->second = std::min(it->second, r.speedup());
    }
    if (r.spec_policy == "auto") worst_auto = std::min(worst_auto, r.speedup());
    if (!best || Median(r.spec) > Median(best->spec)) best = &r;
  }
  std::printf("mismatches against the plain run's tokens: %d\n", mismatches);
  std::printf("lowest fraction of theory (spec-policy always): %.3f (target >= 0.85)\n",
              worst_fraction);
  for (const auto& [policy, speedup] : worst_alpha0) {
    std::printf("lowest speedup at alpha 0, --spec-policy %s: %.3f (target >= 0.95)\n",
                policy.c_str(), speedup);
  }
  if (o.run_auto) {
    std::printf("lowest speedup at any alpha, --spec-policy auto: %.3f (target >= 0.95)\n",
                worst_auto);
    out["auto_lowest_speedup"] = worst_auto;
    out["auto_pace"] = auto_pace;
  }
  if (best && o.run_local) {
    std::printf("best: %s alpha %.2f at %.1f tok/s = %.3fx the single process on %d threads\n",
                best->policy.c_str(), best->alpha, Median(best->spec),
                Median(best->spec) / local_tok_s, o.local_threads);
    out["best"] = {{"policy", best->policy}, {"alpha", best->alpha},
                   {"decode_tok_s", Median(best->spec)},
                   {"speedup_vs_single_process", Median(best->spec) / local_tok_s}};
  }
  for (const Row& r : rows) out["results"].push_back(ToJson(r, n));
  out["mismatches"] = mismatches;
  out["seconds"] = Now() - t_start;
  out["loadavg_end"] = LoadAverage();
  std::printf("took %.0f s; load average %s at the start, %s at the end\n", Now() - t_start,
              out["loadavg_start"].get<std::string>().c_str(),
              out["loadavg_end"].get<std::string>().c_str());
  if (!o.json.empty()) {
    std::ofstream(o.json) << out.dump(2) << "\n";
    std::printf("wrote %s\n", o.json.c_str());
  }
  return mismatches == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "spec_bench: %s\n", e.what());
  return 1;
}
