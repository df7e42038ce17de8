// End-to-end serving benchmark: decode tokens/s through gateway + scheduler
// + 1 and 2 stage processes (`specline serve`) against the in-process
// engine (LocalPipeline + Generate) at one stream, then aggregate throughput
// and TTFT/TPOT percentiles at 1, 8, 32, 64 concurrent streams.
//
//   build/bench/serving_bench [--model PATH] [--tokens N] [--threads N] [--quick]
//                       [--json PATH]
//
// The default model is a random stories110M-shaped checkpoint (dim 768,
// 12 layers, vocab 32000, fp32) written to /tmp on first use: the speed of
// the serving path does not depend on the weights' values.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <signal.h>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "bench/synthetic_workload.h"
#include "bench/bench_util.h"
#include "cli/launch/child_process.h"
#include "model/formats/model_source.h"
#include "model/formats/random_model.h"
#include "model/runtime/generator.h"
#include "model/runtime/local_pipeline.h"
#include "specline/v1/generation.grpc.pb.h"

namespace fs = std::filesystem;
using specline::bench::Median;
using specline::bench::Now;

namespace {

struct Options {
  std::string model = "/tmp/specline-random-stories110M.bin";
  int tokens = 128;
  int prompt = 16;
  int threads = 0;
  bool quick = false;
  std::string json;
  std::vector<int> concurrency = {1, 8, 32, 64};
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5))];
}

// One stream's client-side timings.
struct Stream {
  bool ok = false;
  std::string error;
  int tokens = 0;
  double ttft = 0, e2e = 0;
  double tpot() const { return tokens > 1 ? (e2e - ttft) / (tokens - 1) : 0; }
};

Stream RunStream(const std::shared_ptr<grpc::Channel>& channel, const std::vector<int32_t>& prompt,
                 int max_tokens) {
  auto stub = specline::v1::Generation::NewStub(channel);
  specline::v1::GenerateRequest req;
  for (int32_t t : prompt) req.mutable_token_ids()->add_ids(t);
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(true);
  // Plain decoding, as the in-process baseline does: the server's default
  // policy (recycle) would measure drafting, not the serving path.
  req.set_policy(specline::v1::DECODING_POLICY_AUTOREGRESSIVE);
  grpc::ClientContext ctx;
  Stream s;
  const double t0 = Now();
  auto reader = stub->Generate(&ctx, req);
  specline::v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    if (msg.token_ids_size() > 0 && s.tokens == 0) s.ttft = Now() - t0;
    s.tokens += msg.token_ids_size();
  }
  s.e2e = Now() - t0;
  grpc::Status st = reader->Finish();
  s.ok = st.ok();
  s.error = st.error_message();
  return s;
}

// `specline serve` with `stages` processes; killed on destruction.
class Stack {
 public:
  Stack(const Options& o, int stages) {
    dir_ = fs::temp_directory_path() /
           ("specline-bench-" + std::to_string(getpid()) + "-" + std::to_string(stages));
    fs::create_directories(dir_);
    const std::string port_file = (dir_ / "serve.json").string();
    fs::remove(port_file);
    // bench binaries live in <build>/bench, specline at <build>.
    std::string bin = specline::launch::ExecutableDir() + "/specline";
    if (!fs::exists(bin)) bin = specline::launch::ExecutableDir() + "/../specline";
    // The processes' logs go to a file, not into the table.
    const std::string log = (dir_ / "serve.log").string();
    std::fflush(stdout);
    const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int saved = dup(STDERR_FILENO);
    const int saved_out = dup(STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    dup2(log_fd, STDOUT_FILENO);
    pid_ = specline::launch::SpawnProcess(
        {bin, "serve", "--model", o.model, "--stages", std::to_string(stages), "--port", "0",
         "--threads", std::to_string(o.threads), "--port-file", port_file,
         "--max-concurrent-streams", "1024", "--max-waiting", "1024"});
    dup2(saved, STDERR_FILENO);
    dup2(saved_out, STDOUT_FILENO);
    close(saved);
    close(saved_out);
    close(log_fd);
    const double deadline = Now() + 300;
    while (!fs::exists(port_file)) {
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) throw std::runtime_error("specline serve exited");
      if (Now() > deadline) throw std::runtime_error("specline serve did not start");
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::ifstream in(port_file);
    const auto j = nlohmann::json::parse(in);
    addr_ = "127.0.0.1:" + std::to_string(j["gateway"]["grpc"].get<int>());
  }
  ~Stack() {
    specline::launch::StopProcess(pid_, SIGTERM, std::chrono::seconds(30));
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::shared_ptr<grpc::Channel> channel() const {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    return grpc::CreateCustomChannel(addr_, grpc::InsecureChannelCredentials(), args);
  }

 private:
  fs::path dir_;
  pid_t pid_;
  std::string addr_;
};

// The in-process engine, kept loaded so its runs can interleave with the
// distributed ones.
class InProcess {
 public:
  explicit InProcess(const Options& o)
      : o_(o), model_(specline::OpenModel(o.model)),
        pipeline_(*model_, specline::EvenSplit(model_->config().n_layers, 1), Slices(*model_),
                  o.threads) {}
  // Decode tokens/s of one generation.
  double Run() {
    specline::GenerationOptions g;
    g.max_tokens = o_.tokens;
    g.ignore_eos = true;
    auto res = specline::Generate(pipeline_, ++seq_, specline::bench::SyntheticPrompt(o_.prompt), g);
    if (!res.ok()) throw std::runtime_error(std::string(res.status().message()));
    return (res->tokens.size() - 1) / res->decode_seconds;
  }

 private:
  static specline::SliceOptions Slices(const specline::ModelSource& m) {
    specline::SliceOptions so;
    so.kv_capacity_tokens = m.config().max_seq_len;
    return so;
  }
  const Options& o_;
  std::unique_ptr<specline::ModelSource> model_;
  specline::LocalPipeline pipeline_;
  uint64_t seq_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--model") o.model = next();
    else if (a == "--tokens") o.tokens = std::stoi(next());
    else if (a == "--threads") o.threads = std::stoi(next());
    else if (a == "--json") o.json = next();
    else if (a == "--quick") o.quick = true;
    else {
      std::cerr << "usage: serving_bench [--model PATH] [--tokens N] [--threads N] [--quick] [--json PATH]\n";
      return 2;
    }
  }
  if (o.threads <= 0) o.threads = std::max(1u, std::thread::hardware_concurrency());
  if (o.quick) {
    o.tokens = std::min(o.tokens, 48);
    o.concurrency = {1, 8};
  }
  specline::bench::EnsureStories110MShapedModel(o.model);
  // Single stream: the in-process engine and both stacks stay up, and one
  // run of each is taken per round, so drift on a shared machine hits all
  // three alike; the ratios reported are medians of per-round ratios.
  const int rounds = o.quick ? 5 : 9;
  nlohmann::json out = {{"model", o.model}, {"tokens", o.tokens}, {"prompt_tokens", o.prompt},
                        {"threads_per_process", o.threads}, {"rounds", rounds},
                        {"cores", std::thread::hardware_concurrency()}};
  InProcess inproc(o);
  std::vector<std::unique_ptr<Stack>> stacks;
  for (int stages : {1, 2}) stacks.push_back(std::make_unique<Stack>(o, stages));
  inproc.Run();  // warm-up: page in the weights
  for (auto& st : stacks) RunStream(st->channel(), specline::bench::SyntheticPrompt(o.prompt), 4);
  std::vector<double> base;
  std::vector<std::vector<double>> rate(stacks.size()), ratio(stacks.size());
  for (int r = 0; r < rounds; ++r) {
    base.push_back(inproc.Run());
    for (size_t k = 0; k < stacks.size(); ++k) {
      Stream s = RunStream(stacks[k]->channel(), specline::bench::SyntheticPrompt(o.prompt), o.tokens);
      if (!s.ok) throw std::runtime_error("stream failed: " + s.error);
      rate[k].push_back(1.0 / s.tpot());
      ratio[k].push_back(rate[k].back() / base.back());
    }
  }
  std::printf("single stream decode, %d tokens after a %d-token prompt, %d threads per process, "
              "median of %d interleaved rounds\n", o.tokens, o.prompt, o.threads, rounds);
  std::printf("%-34s %10s %10s %16s\n", "path", "tok/s", "vs in-proc", "ratio min..max");
  std::printf("%-34s %10.1f %10s\n", "in-process (LocalPipeline)", Median(base), "1.000");
  out["in_process_tok_s"] = Median(base);

  for (size_t k = 0; k < stacks.size(); ++k) {
    const int stages = static_cast<int>(k) + 1;
    auto channel = stacks[k]->channel();
    const double tok_s = Median(rate[k]);
    const double rel = Median(ratio[k]);
    char name[64];
    std::snprintf(name, sizeof name, "gateway+scheduler+%d stage proc", stages);
    std::printf("%-34s %10.1f %10.3f %7.3f..%.3f\n", name, tok_s, rel,
                *std::min_element(ratio[k].begin(), ratio[k].end()),
                *std::max_element(ratio[k].begin(), ratio[k].end()));
    nlohmann::json row = {{"stages", stages}, {"single_stream_tok_s", tok_s},
                          {"ratio_vs_in_process", rel}, {"ratios", ratio[k]}};

    // Concurrency sweep on this stack.
    std::printf("  %-6s %12s %10s %10s %10s %10s\n", "conc", "agg tok/s", "TTFT p50", "TTFT p99",
                "TPOT p50", "TPOT p99");
    for (int c : o.concurrency) {
      std::vector<std::future<Stream>> fs;
      const double t0 = Now();
      for (int i = 0; i < c; ++i)
        fs.push_back(std::async(std::launch::async, [&, i] {
          return RunStream(channel, specline::bench::SyntheticPrompt(o.prompt + i % 8), o.tokens);
        }));
      std::vector<double> ttft, tpot;
      long total = 0;
      for (auto& f : fs) {
        Stream s = f.get();
        if (!s.ok) throw std::runtime_error("stream failed: " + s.error);
        ttft.push_back(s.ttft);
        tpot.push_back(s.tpot());
        total += s.tokens;
      }
      const double wall = Now() - t0;
      const double agg = total / wall;
      std::printf("  %-6d %12.1f %8.1fms %8.1fms %8.2fms %8.2fms\n", c, agg,
                  Percentile(ttft, 0.5) * 1e3, Percentile(ttft, 0.99) * 1e3,
                  Percentile(tpot, 0.5) * 1e3, Percentile(tpot, 0.99) * 1e3);
      row["concurrency"].push_back({{"streams", c}, {"aggregate_tok_s", agg},
                                    {"ttft_p50_s", Percentile(ttft, 0.5)},
                                    {"ttft_p99_s", Percentile(ttft, 0.99)},
                                    {"tpot_p50_s", Percentile(tpot, 0.5)},
                                    {"tpot_p99_s", Percentile(tpot, 0.99)}});
    }
    out["distributed"].push_back(row);
  }
  if (!o.json.empty()) {
    std::ofstream(o.json) << out.dump(2) << "\n";
    std::printf("wrote %s\n", o.json.c_str());
  }
  return 0;
}
