// Pipeline speculation with trained draft heads: wall-clock decode speedup
// of PPSD / SPD / PTP over autoregressive decoding on the same multi-process
// deployment, next to the speedup the measured acceptance predicts.
//
//   build/bench/head_bench [--model PATH] [--head DIR]... [--stages N]
//                          [--temperatures 0,1] [--requests N] [--max-tokens N]
//                          [--prefix-tokens N] [--spec-policy always|auto]
//                          [--stage-threads N] [--ptp-n-aux N] [--json PATH]
//
// Defaults: stories260K from ../shared/models and every head in
// training/heads/stories260K (run from the repository root). For each head,
// one deployment (bench/spec_deployment.h) with the head loaded by the
// scheduler (--ppsd-head / --spd-head, no oracle; a PTP adapter by every
// stage and the scheduler, --ptp-head): N stages = the SPD module's n, or
// ceil(n_layers / E) for a PPSD head at exit E (as training/eval_heads.py),
// or 1 for PTP (the paper's setting: one model, several tokens per call).
// PIPO heads are skipped (not lossless; bench/pipo_bench). Request i's prompt is BOS followed by
// --prefix-tokens tokens the deployment samples from the base model at T=1
// (seed i): the start of the distribution the heads were trained and
// evaluated on, and different for every request (greedy from BOS alone is
// one sequence). Each request is decoded plainly (AUTOREGRESSIVE) and then
// with the head's policy, back to back, so machine drift hits both.
//
// Columns: decode tok/s (median over requests; (tokens - 1) / (e2e - TTFT)
// at the client), speedup = median of the per-request spec / AR ratios,
// acceptance = accepted / (accepted + flushes) summed over the requests
// (the rate of the drafts that were verified), L'acc (median), tok/call =
// tokens per verification (1 + accepted / chains; for PTP tokens per
// call, the paper's Table 3 metric), theory = n / (alpha + (1 - alpha) n)
// at the measured acceptance (what a pipeline whose stages dominate every
// other cost would gain; for PTP tokens per call, what a call that costs
// one token step would gain), speedup / theory, and at T = 0 mismatches
// against the plain run (greedy is lossless: 0; PTP samples with coupled
// u, so only greedy is compared).
// Exits 1 on a mismatch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "bench/spec_deployment.h"
#include "model/formats/model_source.h"

namespace fs = std::filesystem;
namespace v1 = specline::v1;
using specline::bench::Median;
using specline::bench::Now;

namespace {

struct Options {
  std::string model = "../shared/models/stories260K/stories260K.bin";
  std::vector<std::string> heads;  // default: every head in training/heads/stories260K
  int stages = 0;                  // 0: from the head
  std::vector<double> temperatures = {0, 1};
  int requests = 8;
  int max_tokens = 128;
  int prefix_tokens = 3;
  std::string spec_policy = "always";
  int stage_threads = 1;
  int ptp_n_aux = 0;  // PTP auxiliary rows per call; 0 = the adapter's N
  std::string json = "head_bench.json";
};

const char* kUsage =
    "usage: head_bench [--model PATH] [--head DIR]... [--stages N] [--temperatures 0,1]\n"
    "  [--requests N] [--max-tokens N] [--prefix-tokens N] [--spec-policy always|auto]\n"
    "  [--stage-threads N] [--ptp-n-aux N] [--json PATH]\n";

struct Head {
  std::string dir, name, method;  // method: spd / ppsd-norm / ppsd-layer / ptp
  int stages = 0;
  v1::DecodingPolicy policy() const {
    if (method == "ptp") return v1::DECODING_POLICY_PTP;
    return method == "spd" ? v1::DECODING_POLICY_SPD : v1::DECODING_POLICY_PPSD;
  }
};

Head ReadHead(const std::string& dir, int stages_override) {
  std::ifstream in(fs::path(dir) / "head.json");
  if (!in) throw std::runtime_error("no head.json in " + dir);
  const nlohmann::json j = nlohmann::json::parse(in);
  Head h;
  h.dir = dir;
  h.name = fs::path(dir).lexically_normal().filename().string();
  if (h.name.empty()) h.name = fs::path(dir).lexically_normal().parent_path().filename().string();
  h.method = j.at("method").get<std::string>();
  if (stages_override > 0) {
    h.stages = stages_override;
  } else if (h.method == "spd") {
    h.stages = j.at("spd").at("n_stages").get<int>();
  } else if (h.method == "ptp") {
    h.stages = 1;
  } else {
    const int layers = j.at("base").at("n_layers").get<int>();
    const int e = j.at("exit_layer").get<int>();
    h.stages = (layers + e - 1) / e;
  }
  return h;
}

struct Row {
  std::string head;
  int stages = 0;
  double temperature = 0;
  std::vector<double> ar, spec, ratio, lacc;
  int64_t accepted = 0, flushes = 0, draft_tokens = 0, chains = 0;
  bool ptp = false;
  int mismatches = 0;
  double acceptance() const {
    return accepted + flushes > 0 ? double(accepted) / double(accepted + flushes) : 0;
  }
  double tokens_per_call() const { return chains > 0 ? 1.0 + double(accepted) / double(chains) : 1; }
  double theory() const {
    return ptp ? tokens_per_call() : specline::bench::Theory(acceptance(), stages);
  }
};

Row Measure(specline::bench::Deployment& d, const Options& o, const Head& h, double t) {
  Row row;
  row.head = h.name;
  row.stages = h.stages;
  row.temperature = t;
  row.ptp = h.method == "ptp";
  for (int r = 1; r <= o.requests; ++r) {
    specline::bench::BenchRequest q;
    q.prompt = {1};  // BOS
    if (o.prefix_tokens > 0) {
      q.max_tokens = o.prefix_tokens;
      q.temperature = 1;
      q.seed = static_cast<uint64_t>(r);
      const std::vector<int32_t> prefix = d.Submit(q).tokens;
      q.prompt.insert(q.prompt.end(), prefix.begin(), prefix.end());
    }
    q.max_tokens = o.max_tokens;
    q.temperature = static_cast<float>(t);
    q.seed = static_cast<uint64_t>(r);
    const specline::bench::Run ar = d.Submit(q);
    q.policy = h.policy();
    const specline::bench::Run sp = d.Submit(q);
    if (t == 0 && sp.tokens != ar.tokens) ++row.mismatches;
    row.ar.push_back(ar.decode_tok_s());
    row.spec.push_back(sp.decode_tok_s());
    row.ratio.push_back(sp.decode_tok_s() / ar.decode_tok_s());
    row.lacc.push_back(sp.spec.equivalent_acceptance_length());
    row.accepted += sp.spec.num_accepted_tokens();
    row.flushes += sp.spec.num_flushes();
    row.draft_tokens += sp.spec.num_draft_tokens();
    row.chains += sp.spec.num_drafts();
  }
  return row;
}

void PrintRow(const Row& r) {
  std::printf("%-14s %3d %4.1f %9.1f %9.1f %8.3f %7.3f %6.2f %8.3f %7.3f %8.3f %7lld %4d\n",
              r.head.c_str(), r.stages, r.temperature, Median(r.ar), Median(r.spec),
              Median(r.ratio), r.acceptance(), Median(r.lacc), r.tokens_per_call(), r.theory(),
              Median(r.ratio) / r.theory(), static_cast<long long>(r.draft_tokens),
              r.mismatches);
  std::fflush(stdout);
}

nlohmann::json ToJson(const Row& r) {
  return {{"head", r.head}, {"stages", r.stages}, {"temperature", r.temperature},
          {"ar_decode_tok_s", Median(r.ar)}, {"spec_decode_tok_s", Median(r.spec)},
          {"speedup", Median(r.ratio)}, {"acceptance", r.acceptance()},
          {"accepted", r.accepted}, {"flushes", r.flushes}, {"draft_tokens", r.draft_tokens},
          {"equivalent_acceptance_length", Median(r.lacc)}, {"chains", r.chains},
          {"tokens_per_call", r.tokens_per_call()}, {"theory", r.theory()},
          {"fraction_of_theory", Median(r.ratio) / r.theory()}, {"mismatches", r.mismatches},
          {"ar_rounds", r.ar}, {"spec_rounds", r.spec}, {"ratio_rounds", r.ratio}};
}

std::vector<std::string> DefaultHeads() {
  std::vector<std::string> heads;
  const fs::path root = "training/heads/stories260K";
  if (!fs::is_directory(root)) return heads;
  for (const auto& e : fs::directory_iterator(root)) {
    if (!fs::exists(e.path() / "head.json")) continue;
    std::ifstream in(e.path() / "head.json");
    if (nlohmann::json::parse(in).value("method", "") == "pipo") continue;  // not lossless
    heads.push_back(e.path().string());
  }
  std::sort(heads.begin(), heads.end());
  return heads;
}

}  // namespace

int main(int argc, char** argv) try {
  Options o;
  const bool known = specline::bench::ParseArgs(argc, argv, [&](const std::string& a, auto& next) {
    if (a == "--model") o.model = next();
    else if (a == "--head") o.heads.push_back(next());
    else if (a == "--stages") o.stages = std::stoi(next());
    else if (a == "--temperatures") o.temperatures = specline::bench::ParseDoubles(next());
    else if (a == "--requests") o.requests = std::stoi(next());
    else if (a == "--max-tokens") o.max_tokens = std::stoi(next());
    else if (a == "--prefix-tokens") o.prefix_tokens = std::stoi(next());
    else if (a == "--spec-policy") o.spec_policy = next();
    else if (a == "--stage-threads") o.stage_threads = std::stoi(next());
    else if (a == "--ptp-n-aux") o.ptp_n_aux = std::stoi(next());
    else if (a == "--json") o.json = next();
    else return false;
    return true;
  });
  if (!known) {
    std::cerr << kUsage;
    return 2;
  }
  if (o.heads.empty()) o.heads = DefaultHeads();
  if (o.heads.empty()) throw std::runtime_error("no heads: pass --head DIR (run from the repository root)");
  if (!fs::exists(o.model)) throw std::runtime_error("no model at " + o.model);

  nlohmann::json out = {{"bench", "head"}, {"model", o.model}, {"requests", o.requests},
                        {"max_tokens", o.max_tokens}, {"spec_policy", o.spec_policy},
                        {"stage_threads", o.stage_threads}, {"prefix_tokens", o.prefix_tokens},
                        {"ptp_n_aux", o.ptp_n_aux},
                        {"cores", std::thread::hardware_concurrency()},
                        {"loadavg_start", specline::bench::LoadAverage()}};
  const double t_start = Now();
  std::printf("head_bench: %s, %d requests x %d tokens per row after BOS + %d sampled tokens, "
              "AR and spec back to back; --spec-policy %s; %u cores\n",
              o.model.c_str(), o.requests, o.max_tokens, o.prefix_tokens, o.spec_policy.c_str(),
              std::thread::hardware_concurrency());
  std::printf("%-14s %3s %4s %9s %9s %8s %7s %6s %8s %7s %8s %7s %4s\n", "head", "n", "T",
              "AR tok/s", "sp tok/s", "speedup", "accept", "L'acc", "tok/call", "theory",
              "/theory", "drafts", "mism");
  int mismatches = 0;
  for (const std::string& dir : o.heads) {
    const Head h = ReadHead(dir, o.stages);
    specline::bench::DeploymentOptions d;
    d.model = o.model;
    d.stages = h.stages;
    d.stage_threads = o.stage_threads;
    d.kv_tokens = std::max(1024, o.max_tokens + 32);
    d.spec_policy = o.spec_policy;
    d.metrics = true;  // the pace auto measured (PaceGauges)
    if (h.method == "ptp") {
      d.scheduler_args = {"--ptp-head", h.dir};
      if (o.ptp_n_aux > 0) {
        d.scheduler_args.insert(d.scheduler_args.end(), {"--ptp-n-aux", std::to_string(o.ptp_n_aux)});
      }
      d.stage_args = {"--adapter", h.dir};
    } else {
      d.scheduler_args = {h.method == "spd" ? "--spd-head" : "--ppsd-head", h.dir};
    }
    specline::bench::Deployment deployment(d);
    for (int w = 0; w < 4; ++w) {  // warm-up: pages in the weights, starts the connections
      specline::bench::BenchRequest q;
      q.prompt = {1};
      q.max_tokens = 32;
      deployment.Submit(q);
      q.policy = h.policy();
      deployment.Submit(q);
    }
    for (double t : o.temperatures) {
      const Row row = Measure(deployment, o, h, t);
      PrintRow(row);
      mismatches += row.mismatches;
      nlohmann::json j = ToJson(row);
      j["head_dir"] = h.dir;
      j["method"] = h.method;
      out["results"].push_back(j);
    }
    if (o.spec_policy == "auto") {
      const std::vector<std::string> pace = deployment.PaceGauges();
      for (const std::string& line : pace) std::printf("  %s\n", line.c_str());
      out["auto_pace"][h.dir] = pace;
    }
  }
  out["mismatches"] = mismatches;
  out["seconds"] = Now() - t_start;
  out["loadavg_end"] = specline::bench::LoadAverage();
  std::printf("mismatches against the plain run (T = 0): %d; took %.0f s; load average %s at "
              "the start, %s at the end\n",
              mismatches, Now() - t_start, out["loadavg_start"].get<std::string>().c_str(),
              out["loadavg_end"].get<std::string>().c_str());
  if (!o.json.empty()) {
    std::ofstream(o.json) << out.dump(2) << "\n";
    std::printf("wrote %s\n", o.json.c_str());
  }
  return mismatches == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "head_bench: %s\n", e.what());
  return 1;
}
