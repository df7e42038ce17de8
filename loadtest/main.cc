// specline-loadtest: drives a gateway's public gRPC streaming API and
// reports client-side latency, throughput and goodput (loadtest/README.md).
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "common/client_util.h"
#include "loadtest/grpc_client.h"
#include "loadtest/openai_client.h"
#include "loadtest/report.h"
#include "loadtest/runner.h"
#include "loadtest/search.h"
#include "specline/v1/generation.grpc.pb.h"

namespace specline::loadtest {
namespace {

const char kUsage[] = R"(usage: specline-loadtest --addr HOST:PORT (--rate R | --concurrency N | --sweep R1,R2,.. | --find-max)
                         (--requests N | --duration S) [options]
target:
  --api grpc|openai      grpc (default): specline's gRPC API at --addr;
                         openai: any OpenAI-compatible server's POST /v1/completions
                         (streamed, with usage) at --addr (specline's --http-port,
                         llama-server, vLLM)
  --model NAME           openai: the "model" field (default: none sent)
  --vocab-size N         openai: synthetic prompt ids are drawn below N (default 256)
load:
  --rate R               open loop: R requests/s, Poisson arrivals
  --burstiness K         gamma shape of the inter-arrival gaps (default 1 = Poisson;
                         < 1 burstier, > 1 more regular; CV = 1/sqrt(K))
  --concurrency N        closed loop: N requests in flight, each sent when one ends
  --ramp-up S            open loop: rate grows linearly over S seconds;
                         closed loop: workers start evenly over S seconds
  --requests N           requests per run
  --duration S           no request starts after S seconds
  --sweep R1,R2,...      one open-loop run per rate, in turn
  --find-max             search the highest rate meeting the SLOs (needs an SLO)
  --find-max-start R     first rate tried (default 1); doubled until it fails
  --find-max-steps N     bisection steps after that (default 4)
prompts:
  --prompts FILE         one prompt per line, or JSONL {"prompt":..., "max_tokens":..., "ignore_eos":...}
  --max-tokens N         max_tokens for file prompts without one (default: server's)
  --input-len N          synthetic token-id prompts of N tokens (default 32)
  --output-len N         synthetic: max_tokens, with ignore_eos (default 16)
  --len-dist D           fixed | uniform (default fixed)
  --range-ratio F        uniform: lengths in [N(1-F), N(1+F)] (default 0.5)
  --workload-seed N      seed of arrivals and synthetic prompts (default 0)
request:
  --temperature T  --top-p P  --top-k K  --seed N (sampling seed, every request)
  --policy ar|ppsd|spd|pipo|ptp|recycle   decoding policy (default: the server's)
  --timeout-s S          deadline per request (default none)
  --token FILE           bearer token file
SLOs and output:
  --slo-ttft-ms MS  --slo-tpot-ms MS   goodput counts requests meeting both
  --slo-attainment F     --find-max target fraction (default 0.9)
  --json PATH            every number and per-request record
  --html PATH            self-contained HTML report with charts
)";

class Flags {
 public:
  Flags(int argc, char** argv) {
    static const std::set<std::string> kValued = {
        "addr", "api", "model", "vocab-size", "rate", "burstiness", "concurrency", "ramp-up", "requests", "duration", "sweep",
        "find-max-start", "find-max-steps", "prompts", "max-tokens", "input-len", "output-len",
        "len-dist", "range-ratio", "workload-seed", "temperature", "top-p", "top-k", "seed",
        "policy", "timeout-s", "token", "slo-ttft-ms", "slo-tpot-ms", "slo-attainment", "json",
        "html"};
    static const std::set<std::string> kBool = {"find-max", "help"};
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a.rfind("--", 0) != 0) throw std::invalid_argument("unexpected argument " + a);
      const std::string name = a.substr(2);
      if (kBool.count(name)) {
        values_.insert_or_assign(name, std::string("true"));
      } else if (kValued.count(name)) {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        values_.insert_or_assign(name, std::string(argv[++i]));
      } else {
        throw std::invalid_argument("unknown option " + a);
      }
    }
  }
  bool Has(const std::string& n) const { return values_.count(n) > 0; }
  std::string Str(const std::string& n, const std::string& d = "") const {
    return Has(n) ? values_.at(n) : d;
  }
  double Num(const std::string& n, double d) const {
    if (!Has(n)) return d;
    try {
      size_t used = 0;
      const double v = std::stod(values_.at(n), &used);
      if (used == values_.at(n).size()) return v;
    } catch (const std::exception&) {
    }
    throw std::invalid_argument("--" + n + " wants a number");
  }
  int Int(const std::string& n, int d) const { return static_cast<int>(Num(n, d)); }

 private:
  std::map<std::string, std::string> values_;
};

std::vector<double> ParseRates(const std::string& list) {
  std::vector<double> rates;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const double r = std::stod(item);
    if (r <= 0) throw std::invalid_argument("--sweep rates must be > 0");
    rates.push_back(r);
  }
  if (rates.empty()) throw std::invalid_argument("--sweep wants a comma-separated list of rates");
  return rates;
}

int Main(int argc, char** argv) {
  const Flags f(argc, argv);
  if (f.Has("help") || argc == 1) {
    std::cout << kUsage;
    return argc == 1 ? 2 : 0;
  }
  const std::string api = f.Str("api", "grpc");
  if (api != "grpc" && api != "openai") throw std::invalid_argument("--api wants grpc or openai");
  const bool openai = api == "openai";
  const std::string addr = f.Str("addr", openai ? "127.0.0.1:8000" : "127.0.0.1:50051");
  auto channel = grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
  ClientOptions co;
  if (f.Has("token")) co.bearer_token = ReadTrimmedFile(f.Str("token"));
  co.timeout = f.Num("timeout-s", 0);
  if (f.Has("temperature")) co.request.temperature = static_cast<float>(f.Num("temperature", 0));
  if (f.Has("top-p")) co.request.top_p = static_cast<float>(f.Num("top-p", 0));
  if (f.Has("top-k")) co.request.top_k = f.Int("top-k", 0);
  if (f.Has("seed")) co.request.seed = static_cast<uint64_t>(f.Num("seed", 0));
  co.request.policy = ParsePolicy(f.Str("policy"));

  RunConfig base;
  base.burstiness = f.Num("burstiness", 1);
  base.concurrency = f.Int("concurrency", 0);
  base.ramp_up = f.Num("ramp-up", 0);
  base.duration = f.Num("duration", 0);
  base.requests = f.Int("requests", 0);
  base.seed = static_cast<uint64_t>(f.Num("workload-seed", 0));
  if (base.requests <= 0 && base.duration <= 0)
    throw std::invalid_argument("give --requests or --duration");

  std::vector<WorkItem> items;
  if (f.Has("prompts")) {
    items = LoadPrompts(f.Str("prompts"), f.Int("max-tokens", 0));
  } else {
    SyntheticOptions so;
    so.input_len = f.Int("input-len", 32);
    so.output_len = f.Int("output-len", 16);
    so.dist = f.Str("len-dist", "fixed");
    so.range_ratio = f.Num("range-ratio", 0.5);
    so.seed = base.seed;
    // Token ids must fit the served vocabulary: ask the gateway (the
    // OpenAI API has no such question: --vocab-size).
    if (openai) {
      so.vocab_size = f.Int("vocab-size", 256);
      items = SyntheticPrompts(base.requests > 0 ? base.requests : 1000, so);
    } else {
    auto stub = v1::Generation::NewStub(channel);
    grpc::ClientContext ctx;
    if (!co.bearer_token.empty()) ctx.AddMetadata("authorization", "Bearer " + co.bearer_token);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ModelInfo info;
    const grpc::Status st = stub->GetModelInfo(&ctx, v1::ModelInfoRequest(), &info);
    if (!st.ok()) throw std::runtime_error("GetModelInfo on " + addr + " failed: " + st.error_message());
    so.vocab_size = info.vocab_size();
    items = SyntheticPrompts(base.requests > 0 ? base.requests : 1000, so);
    }
  }

  Report report;
  report.slo.ttft = f.Num("slo-ttft-ms", 0) / 1e3;
  report.slo.tpot = f.Num("slo-tpot-ms", 0) / 1e3;
  report.config = {{"addr", addr}, {"api", api}};
  for (const char* n : {"rate", "burstiness", "concurrency", "ramp-up", "requests", "duration",
                        "sweep", "prompts", "input-len", "output-len", "len-dist", "policy",
                        "temperature", "top-p", "top-k", "seed", "slo-ttft-ms", "slo-tpot-ms"})
    if (f.Has(n)) report.config[n] = f.Str(n);
  if (f.Has("find-max")) report.config["find-max"] = true;

  SendFn send;
  if (openai) {
    OpenAiTarget target = ParseOpenAiAddress(addr);
    target.model = f.Str("model");
    send = OpenAiSender(target, co);
  } else {
    send = GrpcSender(channel, co);
  }
  auto run_at = [&](double rate) -> const RunReport& {
    RunConfig c = base;
    c.rate = rate;
    RunReport run;
    run.offered_rate = rate;
    run.concurrency = rate > 0 ? 0 : c.concurrency;
    char label[64];
    if (rate > 0) {
      std::snprintf(label, sizeof label, "rate %g req/s", rate);
    } else {
      std::snprintf(label, sizeof label, "concurrency %d", c.concurrency);
    }
    run.label = label;
    std::cerr << "running " << run.label << " ...\n";
    run.records = Run(c, items, send);
    run.summary = Summarize(run.records, report.slo);
    run.series = PerSecond(run.records);
    report.runs.push_back(std::move(run));
    return report.runs.back();
  };

  if (f.Has("find-max")) {
    if (report.slo.ttft <= 0 && report.slo.tpot <= 0)
      throw std::invalid_argument("--find-max needs --slo-ttft-ms and/or --slo-tpot-ms");
    report.searched = true;
    report.search = FindMaxRate(
        [&](double rate) { return run_at(rate).summary.goodput_fraction; },
        f.Num("find-max-start", 1), f.Num("slo-attainment", 0.9), 8, f.Int("find-max-steps", 4));
  } else if (f.Has("sweep")) {
    for (double rate : ParseRates(f.Str("sweep"))) run_at(rate);
  } else if (f.Has("rate")) {
    const double rate = f.Num("rate", 0);
    if (rate <= 0) throw std::invalid_argument("--rate must be > 0");
    run_at(rate);
  } else {
    if (base.concurrency <= 0) throw std::invalid_argument("give --rate, --concurrency, --sweep or --find-max");
    run_at(0);
  }
  PrintTable(std::cout, report);
  if (f.Has("json")) WriteJson(f.Str("json"), report);
  if (f.Has("html")) WriteHtml(f.Str("html"), report);
  int failed = 0;
  for (const RunReport& r : report.runs) failed += r.summary.failed;
  return failed == 0 ? 0 : 3;
}

}  // namespace
}  // namespace specline::loadtest

int main(int argc, char** argv) {
  try {
    return specline::loadtest::Main(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "specline-loadtest: " << e.what() << "\n";
    return 2;
  }
}
