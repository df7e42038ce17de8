#include "cli/launch/topology.h"

#include <unistd.h>

#include <filesystem>
#include <stdexcept>

#include "model/formats/model_source.h"
#include "model/runtime/local_pipeline.h"

namespace fs = std::filesystem;

namespace specline::launch {
namespace {

std::string Tcp(int port) { return "tcp://127.0.0.1:" + std::to_string(port); }

std::string RequireBinary(const std::string& dir, const std::string& name) {
  const std::string path = (fs::path(dir) / name).string();
  if (access(path.c_str(), X_OK) != 0)
    throw std::runtime_error("cannot find " + name + " next to specline (looked for " + path +
                             "); build it first");
  return path;
}

void Add(std::vector<std::string>& argv, const char* flag, const std::string& value) {
  if (!value.empty()) argv.insert(argv.end(), {flag, value});
}

void AddPositive(std::vector<std::string>& argv, const char* flag, long value) {
  if (value > 0) argv.insert(argv.end(), {flag, std::to_string(value)});
}

void Append(std::vector<std::string>& argv, const std::vector<std::string>& more) {
  argv.insert(argv.end(), more.begin(), more.end());
}

// What a stage and the scheduler are told alike: where they listen, where
// they report their ports, their threads and the internal plane's secret.
void AddServerFlags(std::vector<std::string>& argv, const ProcessSpec& p, int threads,
                    const std::string& cluster_secret_file) {
  argv.insert(argv.end(), {"--data-listen", p.data,
                           "--grpc-port", std::to_string(p.grpc_port),
                           "--metrics-port", std::to_string(p.metrics_port),
                           "--port-file", p.port_file,
                           "--threads", std::to_string(threads)});
  Add(argv, "--cluster-secret-file", cluster_secret_file);
}

// Hands out the picked ports in order; throws when they run out.
class PortSource {
 public:
  explicit PortSource(const std::vector<int>& ports) : ports_(ports) {}
  int Next() {
    if (next_ >= ports_.size()) throw std::invalid_argument("BuildPlan: too few ports");
    return ports_[next_++];
  }
  bool used_all() const { return next_ == ports_.size(); }

 private:
  const std::vector<int>& ports_;
  size_t next_ = 0;
};

}  // namespace

std::string Loopback(int port) { return "127.0.0.1:" + std::to_string(port); }

Binaries FindBinaries(const std::string& dir, bool gateway) {
  Binaries b;
  b.stage = RequireBinary(dir, "specline-stage");
  b.scheduler = RequireBinary(dir, "specline-scheduler");
  if (gateway) b.gateway = RequireBinary(dir, "specline-gateway");
  return b;
}

std::vector<const ProcessSpec*> Plan::all() const {
  std::vector<const ProcessSpec*> v;
  for (const ProcessSpec& s : stages) v.push_back(&s);
  v.push_back(&scheduler);
  if (gateway) v.push_back(&*gateway);
  return v;
}

int PortsNeeded(const Topology& t) {
  // data + gRPC (+ metrics) for each stage and the scheduler; the
  // gateway's ports that are left to pick.
  int n = (t.stages + 1) * (t.metrics ? 3 : 2);
  if (t.gateway) {
    n += t.gateway->port > 0 ? 0 : 1;
    n += t.gateway->metrics_port > 0 ? 0 : 1;
    n += t.gateway->http_port != 0 ? 0 : 1;
  }
  return n;
}

std::vector<int> LayerBounds(const Topology& t, int n_layers) {
  if (t.stages < 1) throw std::invalid_argument("--stages must be >= 1");
  if (t.stages > n_layers)
    throw std::invalid_argument("--stages " + std::to_string(t.stages) + " exceeds the model's " +
                                std::to_string(n_layers) + " layers");
  if (t.layer_bounds.empty()) return EvenSplit(n_layers, t.stages);
  const std::vector<int>& b = t.layer_bounds;
  bool ok = static_cast<int>(b.size()) == t.stages + 1 && b.front() == 0 && b.back() == n_layers;
  for (size_t i = 1; ok && i < b.size(); ++i) ok = b[i] > b[i - 1];
  if (!ok)
    throw std::invalid_argument("layer bounds must be " + std::to_string(t.stages + 1) +
                                " increasing values from 0 to " + std::to_string(n_layers));
  return b;
}

Plan BuildPlan(const Topology& t, const Binaries& binaries, int n_layers,
               const std::vector<int>& ports) {
  const std::vector<int> bounds = LayerBounds(t, n_layers);
  if (static_cast<int>(ports.size()) != PortsNeeded(t))
    throw std::invalid_argument("BuildPlan: " + std::to_string(PortsNeeded(t)) + " ports needed, " +
                                std::to_string(ports.size()) + " given");
  if (t.gateway && binaries.gateway.empty())
    throw std::invalid_argument("BuildPlan: no specline-gateway binary");
  const int n = t.stages;
  const fs::path dir(t.run_dir);
  PortSource port(ports);
  Plan plan;
  auto place = [&](ProcessSpec& p, const std::string& name, const std::string& port_file) {
    p.name = name;
    p.data = Tcp(port.Next());
    p.grpc_port = port.Next();
    p.metrics_port = t.metrics ? port.Next() : -1;
    p.port_file = (dir / port_file).string();
  };
  plan.stages.resize(n);
  for (int i = 0; i < n; ++i) {
    place(plan.stages[i], "stage " + std::to_string(i), "stage-" + std::to_string(i) + ".json");
  }
  place(plan.scheduler, "scheduler", "scheduler.json");

  auto device = [&](std::vector<std::string>& argv) {
    Add(argv, "--device", t.device);
    Add(argv, "--dtype", t.dtype);
  };
  // The scheduler loads each head whole (PTP's coupling, PIPO's compressor
  // and MTP layer); the stages host what of it runs on them: PTP's adapter,
  // PIPO's backbone as a weight set.
  auto scheduler_heads = [&](std::vector<std::string>& argv) {
    Add(argv, "--ptp-head", t.ptp_head);
    Add(argv, "--pipo-head", t.pipo_head);
  };
  auto stage_heads = [&](std::vector<std::string>& argv) {
    Add(argv, "--adapter", t.ptp_head);
    Add(argv, "--weight-set", t.pipo_head);
  };

  std::string stage_grpc;
  for (int i = 0; i < n; ++i) {
    ProcessSpec& s = plan.stages[i];
    s.argv = {binaries.stage, "--model", t.model,
              "--layers", std::to_string(bounds[i]) + ":" + std::to_string(bounds[i + 1]),
              "--stage", std::to_string(i),
              "--next", i + 1 < n ? plan.stages[i + 1].data : plan.scheduler.data};
    AddServerFlags(s.argv, s, t.stage_threads, t.cluster_secret_file);
    AddPositive(s.argv, "--kv-capacity-tokens", t.kv_capacity_tokens);
    device(s.argv);
    stage_heads(s.argv);
    Append(s.argv, t.stage_args);
    Add(s.argv, "--log-level", t.log_level);
    stage_grpc += (i ? "," : "") + Loopback(s.grpc_port);
  }

  ProcessSpec& c = plan.scheduler;
  c.argv = {binaries.scheduler, "--model", t.model, "--stage-grpc", stage_grpc};
  AddServerFlags(c.argv, c, t.scheduler_threads, t.cluster_secret_file);
  AddPositive(c.argv, "--max-waiting", t.max_waiting);
  AddPositive(c.argv, "--kv-capacity-tokens", t.kv_capacity_tokens);
  Append(c.argv, t.scheduler_args);
  scheduler_heads(c.argv);
  device(c.argv);  // the output head runs there too
  Add(c.argv, "--log-level", t.log_level);
  // Structured output compiles grammars over the vocabulary the gateway
  // encodes with.
  if (t.gateway) Add(c.argv, "--tokenizer", t.gateway->tokenizer);

  if (t.gateway) {
    const GatewayOptions& o = *t.gateway;
    ProcessSpec g;
    g.name = "gateway";
    g.grpc_port = o.port > 0 ? o.port : port.Next();
    g.metrics_port = o.metrics_port > 0 ? o.metrics_port : port.Next();
    g.http_port = o.http_port != 0 ? o.http_port : port.Next();
    g.port_file = (dir / "gateway.json").string();
    g.argv = {binaries.gateway, "--model", t.model,
              "--scheduler", Loopback(c.grpc_port),
              "--host", o.host,
              "--port", std::to_string(g.grpc_port),
              "--metrics-port", std::to_string(g.metrics_port),
              "--port-file", g.port_file,
              "--http-port", std::to_string(g.http_port),
              "--drain-timeout-ms", std::to_string(o.drain_timeout_ms)};
    Add(g.argv, "--cluster-secret-file", t.cluster_secret_file);
    Add(g.argv, "--tokenizer", o.tokenizer);
    Add(g.argv, "--chat-template", o.chat_template);
    Add(g.argv, "--tool-call-parser", o.tool_call_parser);
    Add(g.argv, "--auth-token-file", o.auth_token_file);
    Add(g.argv, "--served-model-name", o.served_model_name);
    AddPositive(g.argv, "--max-streams-per-principal", o.max_streams_per_principal);
    for (const std::string& group : o.cache_share_groups) Add(g.argv, "--cache-share-group", group);
    AddPositive(g.argv, "--max-tokens-per-minute-per-principal",
                o.max_tokens_per_minute_per_principal);
    if (o.metrics_per_principal) Append(g.argv, {"--metrics-per-principal", "true"});
    if (o.accept_any_model) Append(g.argv, {"--accept-any-model", "true"});
    Add(g.argv, "--tls-cert", o.tls_cert);
    Add(g.argv, "--tls-key", o.tls_key);
    Add(g.argv, "--cors-origins", o.cors_origins);
    AddPositive(g.argv, "--max-concurrent-streams", o.max_concurrent_streams);
    AddPositive(g.argv, "--default-max-tokens", o.default_max_tokens);
    Add(g.argv, "--log-level", t.log_level);
    plan.gateway = std::move(g);
  }
  if (!port.used_all()) throw std::logic_error("BuildPlan: PortsNeeded disagrees with the plan");
  return plan;
}

int ModelLayers(const std::string& path) { return OpenModel(path)->config().n_layers; }

}  // namespace specline::launch
