// The load tester (loadtest/): statistics, arrival processes, the closed
// loop's concurrency bound, the SLO search, and an end-to-end run of
// specline-loadtest against `specline serve` whose figures must agree with
// the gateway's Prometheus histograms.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <numeric>
#include <sstream>
#include <thread>

#include "loadtest/arrivals.h"
#include "loadtest/report.h"
#include "loadtest/runner.h"
#include "loadtest/search.h"
#include "loadtest/stats.h"
#include "loadtest/workload.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

using namespace specline::loadtest;

TEST(LoadtestStats, PercentilesOnKnownData) {
  std::vector<double> v(100);
  std::iota(v.begin(), v.end(), 1.0);  // 1..100, shuffled order must not matter
  std::reverse(v.begin(), v.end());
  EXPECT_DOUBLE_EQ(Percentile(v, 0.5), 50.5);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.9), 90.1);
  EXPECT_DOUBLE_EQ(Percentile(v, 0.99), 99.01);
  EXPECT_DOUBLE_EQ(Percentile(v, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile(v, 1), 100);
  EXPECT_DOUBLE_EQ(Percentile({7}, 0.99), 7);
  EXPECT_DOUBLE_EQ(Percentile({}, 0.5), 0);
  const Distribution d = Describe(v);
  EXPECT_DOUBLE_EQ(d.mean, 50.5);
  EXPECT_DOUBLE_EQ(d.p95, 95.05);
  EXPECT_EQ(d.count, 100);
}

RequestRecord Rec(double start, double ttft, double tpot, int tokens, bool ok = true) {
  RequestRecord r;
  r.start = start;
  r.ttft = ttft;
  r.tpot = tpot;
  r.output_tokens = tokens;
  r.e2e = ttft + tpot * (tokens - 1);
  r.end = start + r.e2e;
  r.ok = ok;
  if (!ok) r.status_code = "UNAVAILABLE";
  return r;
}

TEST(LoadtestStats, GoodputCountsRequestsMeetingBothSlos) {
  std::vector<RequestRecord> rs = {
      Rec(0, 0.05, 0.01, 11),           // good
      Rec(0, 0.20, 0.01, 11),           // TTFT too slow
      Rec(1, 0.05, 0.05, 11),           // TPOT too slow
      Rec(1, 0.05, 0.01, 11),           // good; ends at 1.15
      Rec(1.5, 0.01, 0, 1, false),      // error
      Rec(3.0, 0.1, 0.0, 1),            // good: one token has no TPOT; ends at 3.1
  };
  const Summary s = Summarize(rs, Slo{0.1, 0.02});
  EXPECT_EQ(s.sent, 6);
  EXPECT_EQ(s.completed, 5);
  EXPECT_EQ(s.failed, 1);
  EXPECT_EQ(s.errors.at("UNAVAILABLE"), 1);
  EXPECT_EQ(s.good, 3);
  EXPECT_NEAR(s.duration, 3.1, 1e-9);
  EXPECT_NEAR(s.goodput, 3 / 3.1, 1e-9);
  EXPECT_NEAR(s.goodput_fraction, 0.5, 1e-9);
  EXPECT_NEAR(s.request_throughput, 5 / 3.1, 1e-9);
  EXPECT_EQ(s.tpot.count, 4);  // only requests with >= 2 tokens
  // No SLO: every successful request is good.
  EXPECT_EQ(Summarize(rs, Slo{}).good, 5);
}

void ExpectRenewalProcess(double k, double want_cv) {
  const double rate = 50;
  ArrivalOptions o;
  o.rate = rate;
  o.burstiness = k;
  o.seed = 1234;
  const int n = 200000;
  const std::vector<double> t = ArrivalTimes(o, n, 0);
  ASSERT_EQ(static_cast<int>(t.size()), n);
  std::vector<double> gaps;
  for (int i = 1; i < n; ++i) gaps.push_back(t[i] - t[i - 1]);
  const double mean = std::accumulate(gaps.begin(), gaps.end(), 0.0) / gaps.size();
  double var = 0;
  for (double g : gaps) var += (g - mean) * (g - mean);
  var /= gaps.size();
  EXPECT_NEAR(1 / mean, rate, rate * 0.01) << "k=" << k;
  EXPECT_NEAR(std::sqrt(var) / mean, want_cv, want_cv * 0.03) << "k=" << k;
  EXPECT_TRUE(std::is_sorted(t.begin(), t.end()));
}

TEST(LoadtestArrivals, PoissonMeanRateAndUnitCv) { ExpectRenewalProcess(1, 1); }
TEST(LoadtestArrivals, GammaCvIsOneOverSqrtShape) {
  ExpectRenewalProcess(0.25, 2);
  ExpectRenewalProcess(4, 0.5);
}

TEST(LoadtestArrivals, DurationAndRampUp) {
  ArrivalOptions o;
  o.rate = 100;
  o.ramp_up = 10;
  const std::vector<double> t = ArrivalTimes(o, 0, 20);
  ASSERT_FALSE(t.empty());
  EXPECT_LT(t.back(), 20);
  // Expected arrivals: 100*10/2 during the ramp plus 100*10 after it.
  EXPECT_NEAR(static_cast<double>(t.size()), 1500, 120);
  const auto in_first = std::count_if(t.begin(), t.end(), [](double x) { return x < 5; });
  EXPECT_NEAR(static_cast<double>(in_first), 100 * 5 * 5 / 20.0, 50);  // rate*t^2/(2R)
}

// Blocks until `n` calls are inside it at once (a barrier the runner must
// fill): true, or false after a generous bound if it never fills (a hang,
// not a timing assumption).
class Rendezvous {
 public:
  explicit Rendezvous(int n) : n_(n) {}
  bool Arrive() {
    std::unique_lock<std::mutex> lock(mu_);
    if (++arrived_ >= n_) cv_.notify_all();
    return cv_.wait_for(lock, std::chrono::seconds(120), [&] { return arrived_ >= n_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_, arrived_ = 0;
};

TEST(LoadtestRunner, ClosedLoopNeverExceedsConcurrency) {
  std::atomic<int> in_flight{0}, peak{0}, calls{0}, timed_out{0};
  Rendezvous first_four(4);  // requests 0..3 are in flight together, or this hangs
  const SendFn send = [&](int index, const WorkItem&, Clock::time_point start) {
    RequestRecord r;
    r.start = std::chrono::duration<double>(Clock::now() - start).count();
    const int now = ++in_flight;
    int p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
    ++calls;
    if (index < 4 && !first_four.Arrive()) ++timed_out;
    std::this_thread::sleep_for(std::chrono::microseconds(200 + (index * 7919) % 1500));
    --in_flight;
    r.end = std::chrono::duration<double>(Clock::now() - start).count();
    r.ok = true;
    r.output_tokens = 1;
    return r;
  };
  RunConfig c;
  c.concurrency = 4;
  c.requests = 300;
  const std::vector<RequestRecord> rs = loadtest::Run(c, {WorkItem{}}, send);
  EXPECT_EQ(timed_out.load(), 0) << "the closed loop never had its 4 workers busy at once";
  EXPECT_EQ(rs.size(), 300u);
  EXPECT_EQ(calls.load(), 300);
  EXPECT_EQ(peak.load(), 4);  // reached (the rendezvous) and never exceeded
  EXPECT_EQ(Summarize(rs, Slo{}).max_in_flight, 4);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(rs[i].index, i);
}

// The open loop sends each request at its scheduled time whatever is in
// flight: request 0 does not return until request 1 has been sent (a
// closed loop would hang there), and the schedule is the arrival process's.
// No assertion on how late a send is (that depends on the machine's load),
// only that none is early.
TEST(LoadtestRunner, OpenLoopSendsOnSchedule) {
  Rendezvous first_two(2);
  std::atomic<int> timed_out{0};
  const SendFn send = [&](int index, const WorkItem&, Clock::time_point start) {
    RequestRecord r;
    r.start = std::chrono::duration<double>(Clock::now() - start).count();
    if (index < 2 && !first_two.Arrive()) ++timed_out;
    r.end = std::chrono::duration<double>(Clock::now() - start).count();
    r.ok = true;
    return r;
  };
  RunConfig c;
  c.rate = 200;
  c.requests = 100;
  c.seed = 3;
  const std::vector<RequestRecord> rs = loadtest::Run(c, {WorkItem{}}, send);
  EXPECT_EQ(timed_out.load(), 0) << "request 1 was not sent while request 0 was in flight";
  ArrivalOptions ao;
  ao.rate = c.rate;
  ao.seed = c.seed;
  const std::vector<double> schedule = ArrivalTimes(ao, c.requests, 0);
  ASSERT_EQ(rs.size(), schedule.size());
  ASSERT_EQ(rs.size(), 100u);
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(rs[i].index, static_cast<int>(i));
    EXPECT_EQ(rs[i].scheduled, schedule[i]) << i;
    EXPECT_GE(rs[i].start, rs[i].scheduled - 1e-6) << "sent before its time: " << i;
  }
  EXPECT_GT(Summarize(rs, Slo{}).max_in_flight, 1);
}

TEST(LoadtestSearch, DoublesThenBisects) {
  // Attainment passes below 10 req/s.
  const SearchResult r = FindMaxRate([](double rate) { return rate <= 10 ? 1.0 : 0.5; }, 1, 0.9, 8, 6);
  EXPECT_EQ(r.rates[0], 1);
  EXPECT_EQ(r.rates[4], 16);  // 1, 2, 4, 8 pass; 16 fails
  EXPECT_LE(r.max_rate, 10);
  EXPECT_GT(r.max_rate, 9.5);
  EXPECT_EQ(FindMaxRate([](double) { return 0.0; }, 1, 0.9, 8, 3).max_rate, 0);
}

TEST(LoadtestWorkload, PromptFileLinesAndJsonl) {
  const std::string path = TempDir() + "/prompts.txt";
  std::ofstream(path) << "Once upon a time\n\n{\"prompt\": \"The cat\", \"max_tokens\": 7}\nplain\r\n";
  const std::vector<WorkItem> items = LoadPrompts(path, 5);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].text, "Once upon a time");
  EXPECT_EQ(items[0].max_tokens, 5);
  EXPECT_EQ(items[1].text, "The cat");
  EXPECT_EQ(items[1].max_tokens, 7);
  EXPECT_EQ(items[2].text, "plain");
  SyntheticOptions so;
  so.input_len = 20;
  so.dist = "uniform";
  so.range_ratio = 0.5;
  so.vocab_size = 50;
  for (const WorkItem& w : SyntheticPrompts(50, so)) {
    EXPECT_GE(w.ids.size(), 10u);
    EXPECT_LE(w.ids.size(), 30u);
    for (int32_t id : w.ids) EXPECT_LT(id, 50);
  }
  RequestOptions ro;
  ro.temperature = 0.7f;
  ro.seed = 9;
  ro.policy = ParsePolicy("spd");
  const v1::GenerateRequest req = BuildRequest(items[1], ro, "x-1");
  EXPECT_EQ(req.text(), "The cat");
  EXPECT_EQ(req.max_tokens(), 7);
  EXPECT_FLOAT_EQ(req.sampling().temperature(), 0.7f);
  EXPECT_EQ(req.sampling().seed(), 9u);
  EXPECT_EQ(req.policy(), v1::DECODING_POLICY_SPD);
  EXPECT_EQ(ParsePolicy("ptp"), v1::DECODING_POLICY_PTP);
  EXPECT_EQ(ParsePolicy("pipo"), v1::DECODING_POLICY_PIPO);
  EXPECT_EQ(ParsePolicy(""), v1::DECODING_POLICY_UNSPECIFIED);
  EXPECT_THROW(ParsePolicy("medusa"), std::invalid_argument);
}

// The cumulative bucket counts of histogram `name` in a /metrics body:
// upper bound (le) -> count; +Inf left out.
// Cumulative bucket counts of histogram `name` by upper bound, summed over
// its other labels (the gateway's `api`).
std::map<double, double> HistogramBuckets(const std::string& text, const std::string& name) {
  std::map<double, double> out;
  const std::string key = name + "_bucket{";
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t le_at = line.find("le=\"", key.size());
    if (le_at == std::string::npos) continue;
    const size_t close = line.find('"', le_at + 4);
    const std::string le = line.substr(le_at + 4, close - le_at - 4);
    if (close == std::string::npos || le == "+Inf") continue;
    out[std::stod(le)] += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return out;
}

TEST(LoadtestE2E, ClosedLoopAgreesWithGatewayMetrics) {
  const std::string model = SharedModelPath("stories260K/stories260K.bin");
  if (model.empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  // Plain decoding: one token per message, so the client's gaps and the
  // gateway's per-token ITL count alike. (Under the default, recycle with
  // --spec-policy auto, a message carries as many tokens as the call
  // accepted, which depends on the measured call cost: a timing.)
  auto stack = StartStack(model, 2, {"--default-policy", "ar"});
  const std::string dir = TempDir();
  const std::string json_path = dir + "/lt.json", html_path = dir + "/lt.html";
  const std::string before = ScrapeMetrics(stack->metrics_port());
  const int n = 30;
  const std::string cmd = BinaryPath("specline-loadtest") + " --addr " + stack->gateway() +
                          " --concurrency 4 --requests " + std::to_string(n) +
                          " --input-len 24 --output-len 16 --len-dist uniform --range-ratio 0.25"
                          " --slo-ttft-ms 1000 --slo-tpot-ms 1000 --json " + json_path +
                          " --html " + html_path + " > " + dir + "/lt.out 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << ReadFile(dir + "/lt.out");
  const std::string after = ScrapeMetrics(stack->metrics_port());
  ASSERT_FALSE(after.empty());

  const nlohmann::json j = nlohmann::json::parse(ReadFile(json_path));
  ASSERT_EQ(j["runs"].size(), 1u);
  const nlohmann::json& s = j["runs"][0]["summary"];
  EXPECT_EQ(s["sent"], n);
  EXPECT_EQ(s["completed"], n);
  EXPECT_EQ(s["failed"], 0);
  EXPECT_TRUE(s["errors"].empty());
  // Goodput is the requests meeting both SLOs, per the records (how many
  // do depends on the machine's speed, so that is not asserted).
  const double slo_ttft_ms = 1000, slo_tpot_ms = 1000;
  int meets = 0;
  for (const nlohmann::json& r : j["runs"][0]["requests"]) {
    meets += r["ok"].get<bool>() && r["ttft_ms"].get<double>() <= slo_ttft_ms &&
             (r["output_tokens"].get<int>() < 2 || r["tpot_ms"].get<double>() <= slo_tpot_ms);
  }
  EXPECT_EQ(s["good"], meets);
  EXPECT_LE(s["max_in_flight"].get<int>(), 4);
  EXPECT_EQ(j["runs"][0]["requests"].size(), static_cast<size_t>(n));
  EXPECT_GT(s["request_throughput"].get<double>(), 0);
  for (const char* m : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    const nlohmann::json& d = s[m];
    EXPECT_GT(d["count"].get<int>(), 0) << m;
    EXPECT_LE(d["p50"].get<double>(), d["p90"].get<double>()) << m;
    EXPECT_LE(d["p90"].get<double>(), d["p95"].get<double>()) << m;
    EXPECT_LE(d["p95"].get<double>(), d["p99"].get<double>()) << m;
    EXPECT_GT(d["mean"].get<double>(), 0) << m;
  }
  const std::string html = ReadFile(html_path);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);  // self-contained, nothing fetched
  EXPECT_EQ(html.find("http://www.w3.org/2000/svg"), html.find("http"));  // no external URL

  // The gateway saw the same requests...
  auto delta = [&](const std::string& name, const std::string& labels = "") {
    return MetricDelta(before, after, name, labels);
  };
  const double count = delta("specline_time_to_first_token_seconds_count");
  EXPECT_EQ(count, n);
  EXPECT_EQ(delta("specline_e2e_request_latency_seconds_count"), n);
  EXPECT_EQ(delta("specline_generation_tokens_total"), s["output_tokens"].get<double>());
  // ...and timed them inside our own measurements: the gateway's TTFT of a
  // request starts after we sent it and ends before we read its first token,
  // so per request server <= client (the same monotonic clock). Hence for
  // every bucket bound b, at least as many server TTFTs as client TTFTs are
  // <= b, and the server's mean is at most ours. How far apart they are
  // depends on the machine's load and is not asserted.
  std::vector<double> client_ttft;
  for (const nlohmann::json& r : j["runs"][0]["requests"]) client_ttft.push_back(r["ttft_ms"].get<double>() / 1e3);
  const std::map<double, double> buckets_before = HistogramBuckets(before, "specline_time_to_first_token_seconds");
  const std::map<double, double> buckets_after = HistogramBuckets(after, "specline_time_to_first_token_seconds");
  ASSERT_FALSE(buckets_after.empty()) << "no TTFT histogram buckets";
  for (const auto& [le, cum] : buckets_after) {
    auto it = buckets_before.find(le);
    const double server = cum - (it == buckets_before.end() ? 0 : it->second);
    const auto client = std::count_if(client_ttft.begin(), client_ttft.end(), [&](double t) { return t <= le; });
    EXPECT_GE(server, static_cast<double>(client)) << "TTFT bucket le=" << le;
  }
  const double server_mean = delta("specline_time_to_first_token_seconds_sum") / count;
  const double client_mean = s["ttft_ms"]["mean"].get<double>() / 1e3;
  EXPECT_LE(server_mean, client_mean + 1e-6) << "server " << server_mean << " s, client " << client_mean << " s";
  const double server_e2e = delta("specline_e2e_request_latency_seconds_sum") / n;
  EXPECT_LE(server_e2e, s["e2e_ms"]["mean"].get<double>() / 1e3 + 1e-6);
  // TPOT and ITL: one observation per request / per token after the first
  // (with one token per message, plain decoding as here).
  EXPECT_EQ(delta("specline_request_time_per_output_token_seconds_count"), n);
  EXPECT_EQ(delta("specline_inter_token_latency_seconds_count"), s["itl_ms"]["count"].get<double>());

  // A short sweep: one run per rate and the latency-vs-throughput chart.
  const std::string sweep = BinaryPath("specline-loadtest") + " --addr " + stack->gateway() +
                            " --sweep 40,120 --requests 12 --burstiness 0.5 --input-len 16"
                            " --output-len 8 --slo-ttft-ms 1000 --json " + json_path +
                            " --html " + html_path + " > " + dir + "/sweep.out 2>&1";
  ASSERT_EQ(std::system(sweep.c_str()), 0) << ReadFile(dir + "/sweep.out");
  const nlohmann::json js = nlohmann::json::parse(ReadFile(json_path));
  ASSERT_EQ(js["runs"].size(), 2u);
  EXPECT_EQ(js["runs"][1]["offered_rate"], 120);
  EXPECT_EQ(js["runs"][1]["summary"]["completed"], 12);
  EXPECT_NE(ReadFile(html_path).find("Latency vs throughput"), std::string::npos);
}

// --api openai: the same runner and reports over the gateway's OpenAI HTTP
// API (the client that also measures llama-server or vLLM). Token counts come
// from the usage chunk, so they are exact; the gateway counts the requests
// under api="openai".
TEST(LoadtestE2E, OpenAiApiModeAgreesWithGatewayMetrics) {
  const std::string model = SharedModelPath("stories260K/stories260K.bin");
  if (model.empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  auto stack = StartStack(model, 2);
  const std::string dir = TempDir();
  const std::string before = ScrapeMetrics(stack->metrics_port());
  const int n = 12, output_len = 16;
  const std::string cmd = BinaryPath("specline-loadtest") + " --api openai --addr 127.0.0.1:" +
                          std::to_string(stack->ports["gateway"]["http"].get<int>()) +
                          " --model stories260K --concurrency 3 --requests " + std::to_string(n) +
                          " --input-len 12 --output-len " + std::to_string(output_len) +
                          " --json " + dir + "/lt.json > " + dir + "/lt.log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << ReadFile(dir + "/lt.log");
  const std::string after = ScrapeMetrics(stack->metrics_port());
  const nlohmann::json j = nlohmann::json::parse(ReadFile(dir + "/lt.json"));
  const nlohmann::json& s = j["runs"][0]["summary"];
  EXPECT_EQ(s["completed"], n);
  EXPECT_EQ(s["failed"], 0);
  EXPECT_EQ(s["output_tokens"], n * output_len);
  for (const nlohmann::json& r : j["runs"][0]["requests"]) {
    EXPECT_EQ(r["output_tokens"], output_len);
    EXPECT_EQ(r["prompt_tokens"], 12);
    EXPECT_EQ(r["finish_reason"], "length");
    EXPECT_GT(r["ttft_ms"].get<double>(), 0);
  }
  const std::string api = "{api=\"openai\"}";
  EXPECT_EQ(MetricDelta(before, after, "specline_time_to_first_token_seconds_count", api), n);
  EXPECT_EQ(MetricDelta(before, after, "specline_generation_tokens_total", api), n * output_len);
  EXPECT_EQ(MetricDelta(before, after, "specline_generation_tokens_total", "{api=\"grpc\"}"), 0);
}

// The operator's sweep from issue 26, on a KV cache small enough that
// admission evicts: prompts of exactly 4 blocks (a match stops at 3, so
// block 3 is recomputed and published again), the same workload seed twice
// (the second run finds the first one's prompts cached), rising rates.
// Every request must succeed (a pipeline failure fails every stream in
// flight), and the scheduler's KV must come back to its baseline.
TEST(LoadtestE2E, SweepOfRepeatedBlockPromptsUnderEvictionPressure) {
  const std::string model = SharedModelPath("stories260K/stories260K.bin");
  if (model.empty()) GTEST_SKIP() << "../shared/models/stories260K absent";
  auto stack = StartStack(model, 2, {"--kv-capacity-tokens", "1024", "--default-policy", "ar"});
  const std::string dir = TempDir();
  const int n = 12;  // 48 prompt blocks: they stay cached between runs, if not all at once
  for (int run = 0; run < 2; ++run) {
    const std::string json_path = dir + "/sweep" + std::to_string(run) + ".json";
    const std::string cmd = BinaryPath("specline-loadtest") + " --addr " + stack->gateway() +
                            " --sweep 40,160 --requests " + std::to_string(n) +
                            " --input-len 64 --output-len 32 --json " + json_path + " > " + dir +
                            "/sweep.out 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << ReadFile(dir + "/sweep.out");
    const nlohmann::json j = nlohmann::json::parse(ReadFile(json_path));
    ASSERT_EQ(j["runs"].size(), 2u);
    for (const nlohmann::json& r : j["runs"]) {
      EXPECT_EQ(r["summary"]["completed"], n) << "run " << run << " at " << r["offered_rate"];
      EXPECT_EQ(r["summary"]["failed"], 0) << r["summary"]["errors"].dump();
    }
  }
  internal::SchedulerStats stats;
  for (int i = 0; i < 500; ++i) {  // the last releases travel with the next batch
    stats = SchedulerStats(*stack);
    if (stats.running() == 0 && stats.kv_free_tokens() == stats.kv_capacity_tokens()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(stats.running(), 0);
  EXPECT_EQ(stats.waiting(), 0);
  EXPECT_EQ(stats.kv_free_tokens(), stats.kv_capacity_tokens());
  EXPECT_GT(stats.kv_cached_tokens(), 0);
  EXPECT_GT(stats.prefix_cache_hits(), 0u) << "no prompt was found cached: nothing was tested ("
                                          << stats.prefix_cache_queries() << " queried)";
  for (bool up : stats.stage_up()) EXPECT_TRUE(up);
}

}  // namespace
}  // namespace specline::testing
