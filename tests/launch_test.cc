// launch/: a topology's argv and ports (what reaches which process), port
// picking below the ephemeral range, and the start-up checks that tell a
// child that could not bind (exit 75) from any other failure.
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "common/listen_error.h"
#include "cli/launch/child_process.h"
#include "cli/launch/ports.h"
#include "cli/launch/router.h"
#include "cli/launch/startup.h"
#include "cli/launch/supervise.h"
#include "cli/launch/topology.h"
#include "tests/test_util.h"

namespace specline::launch {
namespace {

using Argv = std::vector<std::string>;

// The value after `flag` in argv; "<absent>" when the flag is not there.
std::string Flag(const Argv& argv, const std::string& flag) {
  auto it = std::find(argv.begin(), argv.end(), flag);
  if (it == argv.end()) return "<absent>";
  return std::next(it) == argv.end() ? "<no value>" : *std::next(it);
}

int Count(const Argv& argv, const std::string& flag) {
  return static_cast<int>(std::count(argv.begin(), argv.end(), flag));
}

const Binaries kBin{"/b/specline-stage", "/b/specline-scheduler", "/b/specline-gateway"};

// Ports 20000, 20001, ...: distinct and recognisable.
std::vector<int> Ports(const Topology& t) {
  std::vector<int> p(PortsNeeded(t));
  for (size_t i = 0; i < p.size(); ++i) p[i] = 20000 + static_cast<int>(i);
  return p;
}

Topology Serving(int stages) {
  Topology t;
  t.model = "/m/model.gguf";
  t.stages = stages;
  t.stage_threads = 3;
  t.scheduler_threads = 4;
  t.run_dir = "/run";
  t.cluster_secret_file = "/run/cluster-secret";
  t.gateway.emplace();
  return t;
}

TEST(LaunchTopology, LayersSplitEvenlyWithTheRemainderFirst) {
  Topology t = Serving(3);
  const Plan plan = BuildPlan(t, kBin, 8, Ports(t));
  ASSERT_EQ(plan.stages.size(), 3u);
  EXPECT_EQ(Flag(plan.stages[0].argv, "--layers"), "0:3");
  EXPECT_EQ(Flag(plan.stages[1].argv, "--layers"), "3:6");
  EXPECT_EQ(Flag(plan.stages[2].argv, "--layers"), "6:8");
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(plan.stages[i].argv[0], kBin.stage);
    EXPECT_EQ(Flag(plan.stages[i].argv, "--stage"), std::to_string(i));
    EXPECT_EQ(plan.stages[i].name, "stage " + std::to_string(i));
    EXPECT_EQ(plan.stages[i].port_file, "/run/stage-" + std::to_string(i) + ".json");
  }
  EXPECT_EQ(plan.scheduler.port_file, "/run/scheduler.json");
  EXPECT_EQ(plan.gateway->port_file, "/run/gateway.json");
}

TEST(LaunchTopology, ExplicitLayerBoundsAreUsedAndChecked) {
  Topology t = Serving(2);
  t.layer_bounds = {0, 1, 8};
  const Plan plan = BuildPlan(t, kBin, 8, Ports(t));
  EXPECT_EQ(Flag(plan.stages[0].argv, "--layers"), "0:1");
  EXPECT_EQ(Flag(plan.stages[1].argv, "--layers"), "1:8");
  for (const std::vector<int>& bad : std::vector<std::vector<int>>{{0, 8}, {0, 4, 7}, {1, 4, 8}, {0, 5, 5}}) {
    t.layer_bounds = bad;
    EXPECT_THROW(BuildPlan(t, kBin, 8, Ports(t)), std::invalid_argument);
  }
}

TEST(LaunchTopology, StageCountMustFitTheModel) {
  Topology t = Serving(9);
  EXPECT_THROW(BuildPlan(t, kBin, 8, Ports(t)), std::invalid_argument);
  try {
    LayerBounds(t, 8);
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "--stages 9 exceeds the model's 8 layers");
  }
  t.stages = 0;
  EXPECT_THROW(LayerBounds(t, 8), std::invalid_argument);
  t.stages = 8;
  EXPECT_EQ(LayerBounds(t, 8).size(), 9u);
}

TEST(LaunchTopology, ProcessesAreChainedThroughTheirAddresses) {
  Topology t = Serving(3);
  const Plan plan = BuildPlan(t, kBin, 8, Ports(t));
  for (int i = 0; i < 3; ++i) {
    const ProcessSpec& s = plan.stages[i];
    EXPECT_EQ(Flag(s.argv, "--data-listen"), s.data);
    EXPECT_EQ(s.data.rfind("tcp://127.0.0.1:", 0), 0u) << s.data;
    EXPECT_EQ(Flag(s.argv, "--next"), i < 2 ? plan.stages[i + 1].data : plan.scheduler.data);
    EXPECT_EQ(Flag(s.argv, "--grpc-port"), std::to_string(s.grpc_port));
    EXPECT_EQ(Flag(s.argv, "--metrics-port"), std::to_string(s.metrics_port));
    EXPECT_EQ(Flag(s.argv, "--port-file"), s.port_file);
    EXPECT_EQ(Flag(s.argv, "--threads"), "3");
  }
  const Argv& c = plan.scheduler.argv;
  EXPECT_EQ(c[0], kBin.scheduler);
  EXPECT_EQ(Flag(c, "--stage-grpc"), "127.0.0.1:" + std::to_string(plan.stages[0].grpc_port) +
                                          ",127.0.0.1:" + std::to_string(plan.stages[1].grpc_port) +
                                          ",127.0.0.1:" + std::to_string(plan.stages[2].grpc_port));
  EXPECT_EQ(Flag(c, "--data-listen"), plan.scheduler.data);
  EXPECT_EQ(Flag(c, "--threads"), "4");
  const Argv& g = plan.gateway->argv;
  EXPECT_EQ(g[0], kBin.gateway);
  EXPECT_EQ(Flag(g, "--scheduler"), "127.0.0.1:" + std::to_string(plan.scheduler.grpc_port));
  EXPECT_EQ(Flag(g, "--port"), std::to_string(plan.gateway->grpc_port));
  EXPECT_EQ(Flag(g, "--http-port"), std::to_string(plan.gateway->http_port));
  EXPECT_EQ(Count(g, "--data-listen"), 0);
  EXPECT_EQ(Count(g, "--threads"), 0);
  for (const ProcessSpec* p : plan.all()) EXPECT_EQ(Flag(p->argv, "--model"), t.model) << p->name;
}

TEST(LaunchTopology, FlagsReachTheProcessesThatTakeThem) {
  Topology t = Serving(2);
  t.kv_capacity_tokens = 4096;
  t.max_waiting = 7;
  t.device = "cuda";
  t.dtype = "f16";
  t.ptp_head = "/h/ptp";
  t.pipo_head = "/h/pipo";
  t.stage_args = {"--stage-only", "s"};
  t.scheduler_args = {"--spd-head", "/h/spd"};
  t.log_level = "debug";
  GatewayOptions& o = *t.gateway;
  o.tokenizer = "/m/tok.json";
  o.auth_token_file = "/etc/tokens";
  o.served_model_name = "mine";
  o.tls_cert = "/c.pem";
  o.tls_key = "/k.pem";
  o.cors_origins = "https://app.example";
  o.max_streams_per_principal = 5;
  o.cache_share_groups = {"team=alice,bob", "ops=carol"};
  o.max_tokens_per_minute_per_principal = 6000;
  o.metrics_per_principal = true;
  o.max_concurrent_streams = 64;
  o.default_max_tokens = 99;
  o.drain_timeout_ms = 1234;
  o.host = "0.0.0.0";
  const Plan plan = BuildPlan(t, kBin, 8, Ports(t));
  const Argv& g = plan.gateway->argv;
  const Argv& c = plan.scheduler.argv;
  for (const ProcessSpec& s : plan.stages) {
    EXPECT_EQ(Flag(s.argv, "--kv-capacity-tokens"), "4096");
    EXPECT_EQ(Flag(s.argv, "--device"), "cuda");
    EXPECT_EQ(Flag(s.argv, "--dtype"), "f16");
    EXPECT_EQ(Flag(s.argv, "--adapter"), "/h/ptp");
    EXPECT_EQ(Flag(s.argv, "--weight-set"), "/h/pipo");
    EXPECT_EQ(Flag(s.argv, "--ptp-head"), "<absent>");
    EXPECT_EQ(Flag(s.argv, "--stage-only"), "s");
    EXPECT_EQ(Flag(s.argv, "--spd-head"), "<absent>");
    EXPECT_EQ(Flag(s.argv, "--max-waiting"), "<absent>");
    EXPECT_EQ(Flag(s.argv, "--tls-cert"), "<absent>");
  }
  EXPECT_EQ(Flag(c, "--kv-capacity-tokens"), "4096");
  EXPECT_EQ(Flag(c, "--max-waiting"), "7");
  EXPECT_EQ(Flag(c, "--device"), "cuda");
  EXPECT_EQ(Flag(c, "--dtype"), "f16");
  EXPECT_EQ(Flag(c, "--ptp-head"), "/h/ptp");
  EXPECT_EQ(Flag(c, "--pipo-head"), "/h/pipo");
  EXPECT_EQ(Flag(c, "--spd-head"), "/h/spd");
  EXPECT_EQ(Flag(c, "--stage-only"), "<absent>");
  EXPECT_EQ(Flag(c, "--auth-token-file"), "<absent>");
  EXPECT_EQ(Flag(g, "--tokenizer"), "/m/tok.json");
  EXPECT_EQ(Flag(g, "--auth-token-file"), "/etc/tokens");
  EXPECT_EQ(Flag(g, "--served-model-name"), "mine");
  EXPECT_EQ(Flag(g, "--tls-cert"), "/c.pem");
  EXPECT_EQ(Flag(g, "--tls-key"), "/k.pem");
  EXPECT_EQ(Flag(g, "--cors-origins"), "https://app.example");
  EXPECT_EQ(Flag(g, "--max-streams-per-principal"), "5");
  // Repeatable: every group, in order.
  EXPECT_EQ(Count(g, "--cache-share-group"), 2);
  const auto at = static_cast<size_t>(std::find(g.begin(), g.end(), "--cache-share-group") - g.begin());
  ASSERT_LT(at + 3, g.size());
  EXPECT_EQ(g[at + 1], "team=alice,bob");
  EXPECT_EQ(g[at + 2], "--cache-share-group");
  EXPECT_EQ(g[at + 3], "ops=carol");
  EXPECT_EQ(Count(c, "--cache-share-group"), 0);
  EXPECT_EQ(Flag(g, "--max-tokens-per-minute-per-principal"), "6000");
  EXPECT_EQ(Flag(g, "--metrics-per-principal"), "true");
  EXPECT_EQ(Flag(c, "--max-tokens-per-minute-per-principal"), "<absent>");
  EXPECT_EQ(Flag(g, "--max-concurrent-streams"), "64");
  EXPECT_EQ(Flag(g, "--default-max-tokens"), "99");
  EXPECT_EQ(Flag(g, "--drain-timeout-ms"), "1234");
  EXPECT_EQ(Flag(g, "--host"), "0.0.0.0");
  for (const char* f : {"--kv-capacity-tokens", "--device", "--ptp-head", "--adapter", "--spd-head",
                        "--max-waiting"}) {
    EXPECT_EQ(Count(g, f), 0) << f;
  }
  // Every process: the cluster secret and the log level, once each.
  for (const ProcessSpec* p : plan.all()) {
    EXPECT_EQ(Flag(p->argv, "--cluster-secret-file"), "/run/cluster-secret") << p->name;
    EXPECT_EQ(Flag(p->argv, "--log-level"), "debug") << p->name;
    EXPECT_EQ(Count(p->argv, "--log-level"), 1) << p->name;
  }
}

TEST(LaunchTopology, UnsetOptionsPassNoFlag) {
  Topology t = Serving(2);
  t.cluster_secret_file.clear();
  const Plan plan = BuildPlan(t, kBin, 8, Ports(t));
  for (const ProcessSpec* p : plan.all()) {
    for (const char* f : {"--cluster-secret-file", "--log-level", "--kv-capacity-tokens", "--device",
                          "--dtype", "--ptp-head", "--pipo-head", "--adapter", "--weight-set",
                          "--max-waiting", "--tokenizer",
                          "--tls-cert", "--auth-token-file", "--max-concurrent-streams",
                          "--cache-share-group", "--max-tokens-per-minute-per-principal",
                          "--metrics-per-principal", "--cors-origins"}) {
      EXPECT_EQ(Count(p->argv, f), 0) << p->name << " " << f;
    }
  }
}

TEST(LaunchTopology, EveryPortIsDistinctAndComesFromThePickedOnes) {
  Topology t = Serving(4);
  const std::vector<int> ports = Ports(t);
  EXPECT_EQ(ports.size(), 3u * 5 + 3);  // data, gRPC, metrics each; the gateway's three
  const Plan plan = BuildPlan(t, kBin, 8, ports);
  std::vector<int> used;
  for (const ProcessSpec* p : plan.all()) {
    if (!p->data.empty()) used.push_back(std::stoi(p->data.substr(p->data.rfind(':') + 1)));
    used.push_back(p->grpc_port);
    used.push_back(p->metrics_port);
    if (p->http_port >= 0) used.push_back(p->http_port);
  }
  std::sort(used.begin(), used.end());
  EXPECT_EQ(used, ports);
  EXPECT_THROW(BuildPlan(t, kBin, 8, std::vector<int>(ports.begin(), ports.end() - 1)),
               std::invalid_argument);
}

TEST(LaunchTopology, GivenGatewayPortsAreKeptAndNotPicked) {
  Topology t = Serving(2);
  t.gateway->port = 50051;
  t.gateway->metrics_port = 9400;
  t.gateway->http_port = -1;  // off
  EXPECT_EQ(PortsNeeded(t), 3 * 3);
  const Plan plan = BuildPlan(t, kBin, 8, Ports(t));
  EXPECT_EQ(Flag(plan.gateway->argv, "--port"), "50051");
  EXPECT_EQ(Flag(plan.gateway->argv, "--metrics-port"), "9400");
  EXPECT_EQ(Flag(plan.gateway->argv, "--http-port"), "-1");
  EXPECT_EQ(plan.gateway->http_port, -1);
}

TEST(LaunchTopology, WithoutMetricsOrGateway) {
  Topology t = Serving(2);
  t.gateway.reset();
  t.metrics = false;
  EXPECT_EQ(PortsNeeded(t), 2 * 3);
  const Plan plan = BuildPlan(t, Binaries{kBin.stage, kBin.scheduler, ""}, 8, Ports(t));
  EXPECT_FALSE(plan.gateway.has_value());
  EXPECT_EQ(plan.all().size(), 3u);
  for (const ProcessSpec* p : plan.all()) {
    EXPECT_EQ(Flag(p->argv, "--metrics-port"), "-1") << p->name;
    EXPECT_EQ(p->metrics_port, -1);
  }
  // A gateway needs its binary.
  t.gateway.emplace();
  EXPECT_THROW(BuildPlan(t, Binaries{kBin.stage, kBin.scheduler, ""}, 8, Ports(t)),
               std::invalid_argument);
}

TEST(LaunchPorts, PickedPortsAreDistinctFreeAndBelowTheEphemeralRange) {
  const int ephemeral = EphemeralPortLow();
  ASSERT_GT(ephemeral, 1024);
  const std::vector<int> ports = PickFreePorts(40);
  ASSERT_EQ(ports.size(), 40u);
  EXPECT_EQ(std::set<int>(ports.begin(), ports.end()).size(), ports.size());
  for (int p : ports) {
    EXPECT_GE(p, 1024);
    EXPECT_LT(p, ephemeral);
  }
}

TEST(LaunchChildProcess, LogFileTakesStdoutAndStderr) {
  const std::string log = testing::TempDir() + "/child.log";
  const pid_t pid = SpawnProcess({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, {.log_path = log});
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_EQ(DescribeExit(status), "exited with code 3");
  std::ifstream in(log);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), "out\nerr\n");
  EXPECT_THROW(SpawnProcess({}), std::invalid_argument);
}

TEST(LaunchStartup, ExitSeventyFiveMeansThePortWasTaken) {
  Child c;
  c.spec.name = "stage 1";
  c.spec.argv = {"/bin/sh", "-c", "exit " + std::to_string(kExitCannotListen)};
  c.spec.port_file = testing::TempDir() + "/none.json";
  Spawn(c);
  while (true) {
    try {
      CheckStarted(c, " (hint)");
    } catch (const PortTaken& e) {
      EXPECT_EQ(std::string(e.what()),
                "stage 1 exited with code 75 during start-up: a port picked for it was taken");
      break;
    }
    ASSERT_GT(c.pid, 0) << "CheckStarted reaped it without throwing PortTaken";
  }
  EXPECT_EQ(c.pid, -1);

  c.spec.argv = {"/bin/sh", "-c", "exit 1"};
  Spawn(c);
  try {
    while (true) CheckStarted(c, " (hint)");
  } catch (const PortTaken&) {
    ADD_FAILURE() << "exit 1 is not a taken port";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "stage 1 exited with code 1 during start-up (hint)");
  }
}

TEST(LaunchStartup, RetriesOnlyOnPortTakenAndAtMostTheAttempts) {
  int runs = 0, retries = 0;
  RetryOnPortTaken(3, [&] { if (++runs < 3) throw PortTaken("taken"); }, [&](const PortTaken&) { ++retries; });
  EXPECT_EQ(runs, 3);
  EXPECT_EQ(retries, 2);
  runs = 0;
  EXPECT_THROW(RetryOnPortTaken(3, [&] { ++runs; throw PortTaken("taken"); }, [](const PortTaken&) {}),
               PortTaken);
  EXPECT_EQ(runs, 3);
  runs = 0;
  EXPECT_THROW(RetryOnPortTaken(3, [&] { ++runs; throw std::runtime_error("bad flag"); }, [](const PortTaken&) {}),
               std::runtime_error);
  EXPECT_EQ(runs, 1);
}

TEST(LaunchRouter, VllmRouterIsStartedOverEveryReplicasApi) {
  RouterOptions o;
  o.binary = "/venv/bin/vllm-router";
  o.policy = "round_robin";
  o.host = "0.0.0.0";
  o.port = 8000;
  o.metrics_port = 20009;
  o.log_level = "warn";
  const Argv argv = RouterArgv(o, {20001, 20005});
  EXPECT_EQ(argv.front(), "/venv/bin/vllm-router");
  EXPECT_EQ(Flag(argv, "--host"), "0.0.0.0");
  EXPECT_EQ(Flag(argv, "--port"), "8000");
  EXPECT_EQ(Flag(argv, "--policy"), "round_robin");
  // Every replica, as the URL of its OpenAI API, in order.
  const auto urls = std::find(argv.begin(), argv.end(), "--worker-urls");
  ASSERT_NE(urls, argv.end());
  EXPECT_EQ(*std::next(urls, 1), "http://127.0.0.1:20001");
  EXPECT_EQ(*std::next(urls, 2), "http://127.0.0.1:20005");
  EXPECT_EQ(std::next(urls, 3)->rfind("--", 0), 0u) << "only the replicas follow --worker-urls";
  EXPECT_EQ(Flag(argv, "--prometheus-port"), "20009");
  EXPECT_EQ(Flag(argv, "--prometheus-host"), "127.0.0.1");
  EXPECT_EQ(Flag(argv, "--health-check-interval-secs"), "2");
  EXPECT_EQ(Flag(argv, "--log-level"), "warning");  // Python's spelling

  o.log_level.clear();
  EXPECT_EQ(Count(RouterArgv(o, {1}), "--log-level"), 0);
  o.policy = "kv_aware";  // on the KV events ReplicaSet turns on
  EXPECT_EQ(Flag(RouterArgv(o, {1}), "--policy"), "kv_aware");
  o.policy = "least_loaded_maybe";
  EXPECT_THROW(RouterArgv(o, {1}), std::invalid_argument);
  o.policy = "cache_aware";
  EXPECT_THROW(RouterArgv(o, {}), std::invalid_argument);
}

TEST(LaunchRouter, BinaryIsFoundWhereSetUpPutsItOrAsNamed) {
  const std::string dir = testing::TempDir() + "/router-find";
  const std::string bin = dir + "/vllm-router";
  ASSERT_EQ(system(("mkdir -p " + dir + " && printf '#!/bin/sh\n' > " + bin).c_str()), 0);
  EXPECT_THROW(FindRouterBinary(bin), std::runtime_error) << "not executable yet";
  ASSERT_EQ(chmod(bin.c_str(), 0755), 0);
  EXPECT_EQ(FindRouterBinary(bin), bin);
  setenv("SPECLINE_VLLM_ROUTER", bin.c_str(), 1);
  EXPECT_EQ(FindRouterBinary(""), bin);
  setenv("SPECLINE_VLLM_ROUTER", (dir + "/missing").c_str(), 1);
  EXPECT_THROW(FindRouterBinary(""), std::runtime_error);
  unsetenv("SPECLINE_VLLM_ROUTER");
  // With no venv and no PATH entry, the error says how to install it.
  const std::string home = getenv("HOME") ? getenv("HOME") : "";
  const std::string path = getenv("PATH") ? getenv("PATH") : "";
  setenv("HOME", dir.c_str(), 1);
  setenv("PATH", "/nonexistent", 1);
  try {
    FindRouterBinary("");
    ADD_FAILURE() << "found a router where there is none";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("scripts/setup.sh"), std::string::npos) << e.what();
  }
  setenv("PATH", dir.c_str(), 1);
  EXPECT_EQ(FindRouterBinary(""), bin);
  setenv("HOME", home.c_str(), 1);
  setenv("PATH", path.c_str(), 1);
}

TEST(LaunchSupervise, AnExitedChildIsSpawnedAgainAfterItsBackoff) {
  Child c;
  c.spec.name = "router";
  c.spec.argv = {"/bin/sh", "-c", "exit 1"};
  Spawn(c);
  RestartState r;
  // Reaped once it exits; nothing spawned before the backoff is due.
  while (c.pid > 0) EXPECT_FALSE(SuperviseChild(c, r));
  EXPECT_TRUE(r.waiting);
  EXPECT_EQ(r.backoff, std::chrono::milliseconds(500)) << "a quick crash doubles the next wait";
  r.at = Clock::now();  // due now
  EXPECT_TRUE(SuperviseChild(c, r));
  EXPECT_GT(c.pid, 0);
  EXPECT_FALSE(r.waiting);
  int status = 0;
  ASSERT_EQ(waitpid(c.pid, &status, 0), c.pid);
}

}  // namespace
}  // namespace specline::launch
