// A local deployment described once, and what it takes to start it: the
// argv of every process (N `specline-stage`, one `specline-scheduler`, an
// optional `specline-gateway`), the ports and addresses they use and where
// each writes its port file. Pure: nothing is started here, so the argv and
// the ports are unit-tested (tests/launch_test.cc).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace specline::launch {

// The public gateway in front of the scheduler (`specline serve` has one;
// the speculation benches talk to the scheduler directly).
struct GatewayOptions {
  std::string host = "127.0.0.1";  // listen address
  int port = 0;                    // gRPC; 0 = pick
  int metrics_port = 0;            // /metrics; 0 = pick
  int http_port = 0;               // OpenAI HTTP API; 0 = pick, -1 = off
  int drain_timeout_ms = 10000;
  std::string tokenizer;           // "" = the model's own
  std::string chat_template;       // "" = the model's own
  std::string tool_call_parser;    // "" = the gateway's default (auto)
  std::string auth_token_file;
  std::string served_model_name;   // "" = the model file's stem
  int max_streams_per_principal = 0;  // 0 = no per-principal cap
  std::vector<std::string> cache_share_groups;  // --cache-share-group values, in order
  long max_tokens_per_minute_per_principal = 0;  // 0 = no token quota
  bool metrics_per_principal = false;  // /metrics series labelled by principal
  bool accept_any_model = false;   // --accept-any-model: any model name is the served one
  std::string tls_cert, tls_key;   // TLS at the gateway ("" = plaintext)
  std::string cors_origins;        // the HTTP API's CORS origins ("" = none)
  int max_concurrent_streams = 0;  // 0 = its default
  int default_max_tokens = 0;      // 0 = its default
};

struct Topology {
  std::string model;
  int stages = 2;
  // stages + 1 layer boundaries (stage i runs [b[i], b[i+1])); empty = the
  // model's layers split evenly (EvenSplit).
  std::vector<int> layer_bounds;
  int stage_threads = 1;
  int scheduler_threads = 1;
  long kv_capacity_tokens = 0;  // stages and scheduler; 0 = each one's default
  int max_waiting = 0;          // scheduler queue limit; 0 = its default
  bool metrics = true;          // false: --metrics-port -1 on stages and scheduler
  std::string device;           // stages and scheduler; "" = their default (cpu)
  std::string dtype;            // stages and scheduler; "" = their default
  // Heads every stage and the scheduler load ("" = none): a PTP adapter, a
  // PIPO head (its backbone on the stages, its other heads on the scheduler).
  std::string ptp_head, pipo_head;
  std::vector<std::string> stage_args;      // extra flags for every stage, as is
  std::vector<std::string> scheduler_args;  // extra flags for the scheduler, as is
  std::string log_level;                    // every process; "" = their default
  std::string cluster_secret_file;          // every process; "" = no internal auth
  std::string run_dir;                      // where the port files go
  std::optional<GatewayOptions> gateway;
};

// Where the binaries are.
struct Binaries {
  std::string stage, scheduler, gateway;
};

// specline-stage, specline-scheduler (and specline-gateway when `gateway`)
// in `dir`. Throws std::runtime_error naming the one that is missing.
Binaries FindBinaries(const std::string& dir, bool gateway);

// One process of the plan.
struct ProcessSpec {
  std::string name;  // "stage 0", "scheduler", "gateway"
  std::vector<std::string> argv;
  std::string port_file;
  std::string data;       // data-plane listen address (tcp://127.0.0.1:P); "" for the gateway
  int grpc_port = 0;
  int metrics_port = -1;  // -1 = off
  int http_port = -1;     // the gateway's OpenAI HTTP API; -1 = off
};

struct Plan {
  std::vector<ProcessSpec> stages;
  ProcessSpec scheduler;
  std::optional<ProcessSpec> gateway;
  // stages, scheduler, gateway: the start order.
  std::vector<const ProcessSpec*> all() const;
};

// How many ports BuildPlan takes from `ports`.
int PortsNeeded(const Topology& t);

// The layer boundaries of `t` over a model of `n_layers`. Throws
// std::invalid_argument when stages < 1, stages > n_layers, or explicit
// bounds do not cover [0, n_layers) in increasing order, one range a stage.
std::vector<int> LayerBounds(const Topology& t, int n_layers);

// The plan for `t` over a model of `n_layers`, taking PortsNeeded(t) ports
// from `ports` (picked free ports, PickFreePorts). Throws
// std::invalid_argument on a bad topology or the wrong number of ports.
Plan BuildPlan(const Topology& t, const Binaries& binaries, int n_layers,
               const std::vector<int>& ports);

// The number of layers of the model at `path` (opens it).
int ModelLayers(const std::string& path);

// "127.0.0.1:port", for a gRPC client.
std::string Loopback(int port);

}  // namespace specline::launch
