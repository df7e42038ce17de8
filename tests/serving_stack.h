// Test harness for the multi-process serving path: `specline serve`
// (gateway + scheduler + stage workers, each its own process) on loopback,
// a streaming client, the single-process reference to compare with, and a
// /metrics scraper. Header-only; shared by serving_e2e_test and
// python_client_test.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "common/cluster_secret.h"
#include "model/formats/model_source.h"
#include "model/formats/random_model.h"
#include "model/runtime/generator.h"
#include "model/runtime/local_pipeline.h"
#include "model/tokenizer/model_tokenizer.h"
#include "specline/internal/scheduler.grpc.pb.h"
#include "specline/v1/generation.grpc.pb.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

namespace specline::testing {

using namespace std::chrono_literals;

inline std::string BinaryPath(const std::string& name) {
  return std::string(SPECLINE_BINARY_DIR) + "/" + name;
}

// A random llama2.c model of shape `c` in the test's temp dir, named
// `name` + ".bin" (the gateway serves it as `name`).
inline std::string WriteServingModel(const ModelConfig& c, const std::string& name, uint64_t seed) {
  const std::string path = TempDir() + "/" + name + ".bin";
  WriteRandomModel(c, ModelFormat::kLlama2c, path, seed);
  return path;
}

// A model slow enough (a few ms a decoding step on 2 cores) that a long
// request outlives whatever a test does while it runs (kill a process,
// abort, open another stream), with a context of `context` positions.
inline std::string SlowServingModel(int context, uint64_t seed) {
  return WriteServingModel(LlamaShape(256, 768, 8, 8, 4, 256, context), "slow-model", seed);
}

// A chat template whose rendering is easy to read and to compare: "role:
// content\n" per turn after the BOS token, "assistant:" as the generation
// prompt; written once into the test's temp dir.
inline std::string RoleColonChatTemplate() {
  static const std::string path = [] {
    const std::string p = TempDir() + "/role-colon.jinja";
    std::ofstream(p) << "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n"
                        "{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}";
    return p;
  }();
  return path;
}

// One `specline serve` process and the ports it reported.
struct ServingStack {
  ChildProcess launcher;
  nlohmann::json ports;
  std::string port_file;

  std::string gateway() const { return "127.0.0.1:" + std::to_string(ports["gateway"]["grpc"].get<int>()); }
  std::string scheduler() const {
    return "127.0.0.1:" + std::to_string(ports["scheduler"]["grpc"].get<int>());
  }
  int metrics_port() const { return ports["gateway"]["metrics"].get<int>(); }
  std::shared_ptr<grpc::Channel> channel() const {
    return grpc::CreateChannel(gateway(), grpc::InsecureChannelCredentials());
  }
  // The run's internal-plane secret (the launcher makes one per run).
  std::string cluster_secret() const {
    return ReadClusterSecret(ports["cluster_secret_file"].get<std::string>()).value();
  }
  // A channel to the scheduler that carries the secret.
  std::shared_ptr<grpc::Channel> scheduler_channel() const {
    return InternalChannel(scheduler(), cluster_secret());
  }
  nlohmann::json Reload() {
    ports = nlohmann::json::parse(ReadFile(port_file));
    return ports;
  }
};

// Starts the stack; the launcher writes its port file once every process is
// healthy. `extra` goes to `specline serve` as is.
inline std::unique_ptr<ServingStack> StartStack(const std::string& model, int stages,
                                                std::vector<std::string> extra = {}) {
  auto s = std::make_unique<ServingStack>();
  const std::string dir = TempDir();
  s->port_file = dir + "/serve.json";
  std::vector<std::string> argv = {BinaryPath("specline"), "serve", "--model", model,
                                   "--stages", std::to_string(stages), "--port", "0",
                                   "--threads", "1", "--port-file", s->port_file};
  argv.insert(argv.end(), extra.begin(), extra.end());
  s->launcher = ChildProcess(argv, dir + "/serve.log");
  s->ports = s->launcher.WaitForPortFile(s->port_file, 120s);
  return s;
}

// A self-signed certificate for 127.0.0.1 / localhost, as dir/cert.pem and
// dir/key.pem; false when openssl is not there to make one.
inline bool MakeTestCertificate(const std::string& dir) {
  const std::string cmd = "openssl req -x509 -newkey rsa:2048 -nodes -subj /CN=localhost "
                          "-addext subjectAltName=IP:127.0.0.1,DNS:localhost -days 1 -keyout " +
                          dir + "/key.pem -out " + dir + "/cert.pem >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

struct Streamed {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  v1::GenerateResponse last;
  int messages = 0;
  int lossless_messages = 0;  // messages that said lossless
};

// Streams one request. `after_first` (optional) runs once the first
// message arrived, with the call's context (to cancel it, kill a stage...).
inline Streamed StreamOnce(const std::shared_ptr<grpc::Channel>& channel,
                           const v1::GenerateRequest& req,
                           std::optional<std::chrono::milliseconds> deadline = std::nullopt,
                           const std::function<void(grpc::ClientContext&)>& after_first = {}) {
  auto stub = v1::Generation::NewStub(channel);
  grpc::ClientContext ctx;
  if (deadline) ctx.set_deadline(std::chrono::system_clock::now() + *deadline);
  Streamed out;
  auto reader = stub->Generate(&ctx, req);
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    out.tokens.insert(out.tokens.end(), msg.token_ids().begin(), msg.token_ids().end());
    out.text += msg.text();
    if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) out.finish = msg.finish_reason();
    out.last = msg;
    out.lossless_messages += msg.lossless() ? 1 : 0;
    if (out.messages++ == 0 && after_first) after_first(ctx);
  }
  out.status = reader->Finish();
  return out;
}

// A token-id prompt of `prompt_len` ids that runs exactly `max_tokens`
// (ignore_eos): for models without a tokenizer and tests that count tokens.
inline v1::GenerateRequest IgnoreEosIdRequest(int prompt_len, int max_tokens) {
  v1::GenerateRequest req;
  for (int i = 0; i < prompt_len; ++i) req.mutable_token_ids()->add_ids(1 + (i * 7) % 200);
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(true);
  return req;
}

// Polls (bounded) until `pred` holds: the processes work asynchronously,
// and progress, never time, is what the suites assert.
template <typename Pred>
bool Eventually(Pred pred, std::chrono::seconds bound = 60s) {
  const auto give_up = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < give_up) {
    if (pred()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return pred();
}

inline internal::SchedulerStats SchedulerStats(const ServingStack& s) {
  auto stub = internal::Scheduler::NewStub(s.scheduler_channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 5s);
  internal::SchedulerStats stats;
  grpc::Status st = stub->GetStats(&ctx, internal::StatsRequest(), &stats);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return stats;
}

// The single-process engine's greedy output for the same prompt: tokens and
// streamed text (as the gateway would detokenize them).
struct Reference {
  std::vector<int32_t> tokens;
  std::string text;
};

class ReferenceEngine {
 public:
  explicit ReferenceEngine(const std::string& model_path) : model_(OpenModel(model_path)) {
    try {
      tokenizer_ = OpenTokenizerFor(*model_);
    } catch (const std::exception&) {
      // Random checkpoints have none: token ids only, as the gateway does.
    }
    SliceOptions options;
    options.kv_capacity_tokens = model_->config().max_seq_len;
    pipeline_ = std::make_unique<LocalPipeline>(*model_, EvenSplit(model_->config().n_layers, 1),
                                                options, 1);
  }
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const ModelConfig& config() const { return model_->config(); }

  std::vector<int32_t> EncodeText(const std::string& text) const {
    return tokenizer_->Encode(text, tokenizer_->add_bos_by_default());
  }

  Reference Run(const std::vector<int32_t>& prompt, int max_tokens, bool ignore_eos) {
    GenerationOptions o;
    o.max_tokens = max_tokens;
    o.ignore_eos = ignore_eos;
    if (tokenizer_) o.stop_ids = tokenizer_->stop_ids();
    auto r = Generate(*pipeline_, seq_++, prompt, o);
    EXPECT_TRUE(r.ok()) << r.status();
    Reference ref;
    if (!r.ok()) return ref;
    ref.tokens = r->tokens;
    if (tokenizer_) {
      IncrementalDetokenizer detok(*tokenizer_, prompt.back());
      for (int32_t t : ref.tokens) ref.text += detok.Push(t);
      ref.text += detok.Flush();
    }
    return ref;
  }

 private:
  std::unique_ptr<ModelSource> model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<LocalPipeline> pipeline_;
  uint64_t seq_ = 1;
};

// A TCP connection to 127.0.0.1:port; -1 when it cannot be made.
inline int ConnectLoopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// GET http://127.0.0.1:port/metrics; the body, or "" on failure.
inline std::string ScrapeMetrics(int port) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return "";
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return "";
  }
  std::string resp;
  char buf[8192];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) resp.append(buf, n);
  close(fd);
  const size_t body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

// The sum of the samples `name` whose labels include every label in
// `labels` (label text such as {finished_reason="length"}; "" = any
// labels) in a /metrics body; nullopt when no sample matches. So a series
// split by a label the test does not name (the gateway's `api`) is summed.
// For what may legitimately be absent (a labelled counter before its first
// increment); everything else uses MetricValue.
inline std::optional<double> MetricValueIfPresent(const std::string& text, const std::string& name,
                                                  const std::string& labels = "") {
  // The wanted labels, each as its k="v" text.
  std::vector<std::string> wanted;
  if (labels.size() > 2) {
    const std::string inner = labels.substr(1, labels.size() - 2);
    size_t start = 0;
    while (start < inner.size()) {
      size_t end = inner.find("\",", start);
      end = end == std::string::npos ? inner.size() : end + 1;
      wanted.push_back(inner.substr(start, end - start));
      start = end + 1;
    }
  }
  std::optional<double> sum;
  size_t line_start = 0;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string::npos) line_end = text.size();
    const std::string line = text.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != ' ' && next != '{') continue;
    std::string have;
    if (next == '{') {
      // Appended, not `"," + substr + ","`: that trips GCC 12's -Wrestrict
      // false positive at -O3.
      have.append(",").append(line, name.size() + 1, line.find('}') - name.size() - 1).append(",");
    }
    bool match = true;
    for (const std::string& w : wanted) match = match && have.find("," + w + ",") != std::string::npos;
    if (!match) continue;
    sum = sum.value_or(0) + std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

// The same, for a series that must be there: its absence (a dropped or
// renamed metric) is a test failure, and the NaN returned then fails every
// comparison it is used in.
inline double MetricValue(const std::string& text, const std::string& name,
                          const std::string& labels = "") {
  const std::optional<double> v = MetricValueIfPresent(text, name, labels);
  if (!v) {
    ADD_FAILURE() << "metric " << name << labels << " is not exposed";
    return std::nan("");
  }
  return *v;
}

// after - before of a series that must be in `after` and may be absent from
// `before` (a labelled series appears with its first increment).
inline double MetricDelta(const std::string& before, const std::string& after,
                          const std::string& name, const std::string& labels = "") {
  return MetricValue(after, name, labels) - MetricValueIfPresent(before, name, labels).value_or(0);
}

}  // namespace specline::testing
