// GET /kv_event_sources' body: vLLM's shape, and endpoints a router on
// another machine can dial (services/openai/kv_event_sources.h).
#include "services/openai/kv_event_sources.h"

#include <gtest/gtest.h>

namespace specline::openai {
namespace {

TEST(KvEventSources, AnyAddressEndpointsNameTheSchedulersHostUnlessItIsBesideTheGateway) {
  // Beside the gateway: the router fills in the gateway's host itself.
  EXPECT_EQ(ReachableKvEventsEndpoint("tcp://0.0.0.0:5557", "127.0.0.1:50052"), "tcp://*:5557");
  EXPECT_EQ(ReachableKvEventsEndpoint("tcp://*:5557", "localhost:50052"), "tcp://*:5557");
  // Elsewhere: the scheduler's own host.
  EXPECT_EQ(ReachableKvEventsEndpoint("tcp://0.0.0.0:5557", "scheduler.ns.svc:50052"),
            "tcp://scheduler.ns.svc:5557");
  EXPECT_EQ(ReachableKvEventsEndpoint("tcp://[::]:5557", "10.0.0.7:50052"), "tcp://10.0.0.7:5557");
  EXPECT_EQ(ReachableKvEventsEndpoint("tcp://*:5557", "[fd00::7]:50052"), "tcp://[fd00::7]:5557");
  // A host the scheduler bound explicitly, and other transports, as they are.
  EXPECT_EQ(ReachableKvEventsEndpoint("tcp://10.1.2.3:5557", "127.0.0.1:1"), "tcp://10.1.2.3:5557");
  EXPECT_EQ(ReachableKvEventsEndpoint("ipc:///tmp/kv", "10.0.0.7:1"), "ipc:///tmp/kv");
}

TEST(KvEventSources, TheBodyIsVllmsRankMapWithTheWireDeclarations) {
  internal::KvEventsSource source;
  source.set_endpoint("tcp://0.0.0.0:5557");
  source.set_topic("kv");
  source.set_hwm(100);
  source.set_buffer_steps(50);
  nlohmann::json body = KvEventSourcesJson(source, "sched:1");
  ASSERT_TRUE(body.contains("0")) << body.dump();
  const nlohmann::json& rank = body["0"];
  // What vllm-router's kv_aware requires before it subscribes.
  EXPECT_EQ(rank["publisher"], "zmq");
  EXPECT_EQ(rank["encoding"], "msgpack");
  EXPECT_EQ(rank["schema_version"], 1);
  EXPECT_EQ(rank["enable_kv_cache_events"], true);
  EXPECT_EQ(rank["endpoint"], "tcp://sched:5557");
  EXPECT_TRUE(rank["replay_endpoint"].is_null());
  EXPECT_EQ(rank["topic"], "kv");
  EXPECT_EQ(rank["hwm"], 100);
  EXPECT_EQ(rank["buffer_steps"], 50);
  source.set_replay_endpoint("tcp://0.0.0.0:5558");
  EXPECT_EQ(KvEventSourcesJson(source, "sched:1")["0"]["replay_endpoint"], "tcp://sched:5558");
}

}  // namespace
}  // namespace specline::openai
