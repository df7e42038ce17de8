// KV events: the prefix cache's record of what it starts and stops holding
// (KvEventLog), vLLM's wire format for it (decoded here with msgpack-cxx's
// own parser), and the ZeroMQ publisher as a subscriber sees it (a real
// SUB socket, and a DEALER asking for a replay as vllm-router does).
#include <gtest/gtest.h>

#include <msgpack.hpp>
#include <numeric>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "scheduler/kv_event_publisher.h"
#include "scheduler/kv_event_wire.h"
#include "scheduler/prefix_cache.h"

namespace specline::scheduler {
namespace {

using namespace std::chrono_literals;

std::vector<int32_t> Tokens(int n, int32_t first = 1) {
  std::vector<int32_t> t(n);
  std::iota(t.begin(), t.end(), first);
  return t;
}

std::vector<KvEvent> TakeNow(KvEventLog& log) { return log.WaitAndTake(0ms); }

TEST(KvEventLog, AChainTravelsAsOneStoredEventAndABreakStartsAnother) {
  KvEventLog log;
  const std::vector<int32_t> a = Tokens(2), b = Tokens(2, 3), c = Tokens(2, 5);
  log.Stored(std::nullopt, 10, a);
  log.Stored(10, 11, b);  // continues the chain
  log.Stored(99, 12, c);  // another parent: a new event
  log.Removed(10);
  log.Removed(11);
  const std::vector<KvEvent> events = TakeNow(log);
  ASSERT_EQ(events.size(), 3u);
  const auto& first = std::get<KvBlocksStored>(events[0]);
  EXPECT_EQ(first.parent, std::nullopt);
  EXPECT_EQ(first.hashes, (std::vector<uint64_t>{10, 11}));
  EXPECT_EQ(first.tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(first.block_size, 2);
  const auto& second = std::get<KvBlocksStored>(events[1]);
  EXPECT_EQ(second.parent, 99u);
  EXPECT_EQ(second.hashes, (std::vector<uint64_t>{12}));
  EXPECT_EQ(std::get<KvBlocksRemoved>(events[2]).hashes, (std::vector<uint64_t>{10, 11}));
  EXPECT_TRUE(TakeNow(log).empty());
}

TEST(KvEventLog, ClearedSupersedesWhatIsPendingAndOverflowClearsToo) {
  KvEventLog log(/*max_pending_blocks=*/3);
  log.Stored(std::nullopt, 1, Tokens(2));
  log.Cleared();
  std::vector<KvEvent> events = TakeNow(log);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(events[0]));
  // A fourth pending block: the subscriber is told to forget everything
  // rather than miss a removal.
  for (uint64_t h = 1; h <= 4; ++h) log.Removed(h);
  events = TakeNow(log);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(events[0]));
}

TEST(KvEventLog, WaitAndTakeWakesForAnEventAndReturnsAtOnceWhenClosed) {
  KvEventLog log;
  std::thread producer([&] {
    std::this_thread::sleep_for(20ms);
    log.Removed(7);
  });
  const std::vector<KvEvent> events = log.WaitAndTake(10s);
  producer.join();
  ASSERT_EQ(events.size(), 1u);
  log.Close();
  // Closed: no wait (without it, this would hang past ctest's timeout).
  EXPECT_TRUE(log.WaitAndTake(std::chrono::hours(1)).empty());
}

// The prefix cache records exactly what starts and stops matching.
TEST(PrefixCacheEvents, InsertEvictForgetAndClearAreRecorded) {
  KvEventLog log;
  PrefixCache c(4, &log);
  const uint64_t salt = PrefixCache::Salt("m.gguf", 0, 0, "");
  const std::vector<int32_t> tokens = Tokens(12);
  const std::vector<uint64_t> keys = c.BlockKeys(tokens, 3, salt);
  for (int i = 0; i < 3; ++i) c.Insert(keys, i, tokens, salt, 0);
  std::vector<KvEvent> events = TakeNow(log);
  ASSERT_EQ(events.size(), 1u);
  const auto& stored = std::get<KvBlocksStored>(events[0]);
  EXPECT_EQ(stored.parent, std::nullopt);  // the salt is ours, not a block
  EXPECT_EQ(stored.hashes, keys);
  EXPECT_EQ(stored.tokens, tokens);
  EXPECT_EQ(stored.block_size, 4);

  // Forgotten while held: removed now (it matches nothing), not again when
  // its holder lets go.
  c.Forget(std::span(keys).subspan(2, 1));
  c.Unref(keys);
  events = TakeNow(log);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(std::get<KvBlocksRemoved>(events[0]).hashes, (std::vector<uint64_t>{keys[2]}));

  // Evicted least recently used first: the chain's deepest block first.
  c.EvictLru(1);
  events = TakeNow(log);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(std::get<KvBlocksRemoved>(events[0]).hashes, (std::vector<uint64_t>{keys[1]}));

  c.Clear();
  events = TakeNow(log);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_TRUE(std::holds_alternative<KvAllBlocksCleared>(events[0]));
  c.Clear();  // nothing held: nothing to tell
  EXPECT_TRUE(TakeNow(log).empty());

  // A block of a principal's own cache scope is never announced, nor its
  // removal: routers would place other principals' requests by it.
  const uint64_t scoped = PrefixCache::Salt("m.gguf", 0, 0, "alice");
  const std::vector<uint64_t> own = c.BlockKeys(tokens, 1, scoped);
  c.Insert(own, 0, tokens, scoped, 0, /*announce=*/false);
  c.Unref(own);
  c.EvictLru(1);
  EXPECT_FALSE(c.Contains(own[0]));
  EXPECT_TRUE(TakeNow(log).empty());
}

// Decodes `payload` with msgpack-cxx's parser and returns the map of event
// `i` as key -> object.
struct DecodedBatch {
  msgpack::object_handle handle;
  const msgpack::object& root() const { return handle.get(); }
  std::map<std::string, msgpack::object> Event(size_t i) const {
    const msgpack::object& e = root().via.array.ptr[1].via.array.ptr[i];
    EXPECT_EQ(e.type, msgpack::type::MAP);
    std::map<std::string, msgpack::object> fields;
    for (uint32_t k = 0; k < e.via.map.size; ++k) {
      fields[e.via.map.ptr[k].key.as<std::string>()] = e.via.map.ptr[k].val;
    }
    return fields;
  }
};
DecodedBatch Decode(const std::string& payload) {
  return DecodedBatch{msgpack::unpack(payload.data(), payload.size())};
}

TEST(KvEventWire, BatchesAreVllmsTaggedMapsInAPositionalArray) {
  std::vector<KvEvent> events;
  events.emplace_back(KvBlocksStored{std::nullopt, {1, 0xfedcba9876543210ull}, {5, 6, 7, 8}, 2});
  events.emplace_back(KvBlocksStored{1, {3}, {9, 10}, 2});
  events.emplace_back(KvBlocksRemoved{{3}});
  events.emplace_back(KvAllBlocksCleared{});
  const DecodedBatch batch = Decode(EncodeKvEventBatch(1700000000.25, events, 0));
  ASSERT_EQ(batch.root().type, msgpack::type::ARRAY);
  ASSERT_EQ(batch.root().via.array.size, 3u);
  EXPECT_EQ(batch.root().via.array.ptr[0].type, msgpack::type::FLOAT64);
  EXPECT_DOUBLE_EQ(batch.root().via.array.ptr[0].as<double>(), 1700000000.25);
  EXPECT_EQ(batch.root().via.array.ptr[2].as<uint32_t>(), 0u);  // data-parallel rank
  ASSERT_EQ(batch.root().via.array.ptr[1].via.array.size, 4u);

  auto stored = batch.Event(0);
  EXPECT_EQ(stored.size(), 8u);
  EXPECT_EQ(stored["type"].as<std::string>(), "BlockStored");
  EXPECT_EQ(stored["block_hashes"].as<std::vector<uint64_t>>(),
            (std::vector<uint64_t>{1, 0xfedcba9876543210ull}));
  EXPECT_TRUE(stored["parent_block_hash"].is_nil());
  EXPECT_EQ(stored["token_ids"].as<std::vector<uint32_t>>(), (std::vector<uint32_t>{5, 6, 7, 8}));
  EXPECT_EQ(stored["block_size"].as<uint32_t>(), 2u);
  for (const char* nil : {"lora_id", "medium", "lora_name"}) EXPECT_TRUE(stored[nil].is_nil()) << nil;
  EXPECT_EQ(batch.Event(1)["parent_block_hash"].as<uint64_t>(), 1u);

  auto removed = batch.Event(2);
  EXPECT_EQ(removed.size(), 3u);
  EXPECT_EQ(removed["type"].as<std::string>(), "BlockRemoved");
  EXPECT_EQ(removed["block_hashes"].as<std::vector<uint64_t>>(), (std::vector<uint64_t>{3}));
  EXPECT_TRUE(removed["medium"].is_nil());
  auto cleared = batch.Event(3);
  EXPECT_EQ(cleared.size(), 1u);
  EXPECT_EQ(cleared["type"].as<std::string>(), "AllBlocksCleared");
}

TEST(KvEventsConfig, ParsesVllmsJsonAndNamesWhatIsWrong) {
  absl::StatusOr<KvEventsConfig> c = ParseKvEventsConfig(
      R"({"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:6000",
          "replay_endpoint": "tcp://*:6001", "buffer_steps": 5, "hwm": 10, "topic": "kv",
          "max_queue_size": 100})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->enable_kv_cache_events);
  EXPECT_EQ(c->endpoint, "tcp://*:6000");
  EXPECT_EQ(c->replay_endpoint, "tcp://*:6001");
  EXPECT_EQ(c->buffer_steps, 5);
  EXPECT_EQ(c->hwm, 10);
  EXPECT_EQ(c->topic, "kv");
  EXPECT_FALSE(ParseKvEventsConfig("{}")->enable_kv_cache_events);  // vLLM's default: off
  for (const auto& [json, named] : std::vector<std::pair<std::string, std::string>>{
           {"not json", "not a JSON object"},
           {R"({"endpoint": 5})", "\"endpoint\""},
           {R"({"publisher": "kafka"})", "kafka"},
           {R"({"buffer_steps": 0})", "buffer_steps"},
           {R"({"enpoint": "tcp://*:1"})", "enpoint"}}) {
    absl::StatusOr<KvEventsConfig> bad = ParseKvEventsConfig(json);
    ASSERT_FALSE(bad.ok()) << json;
    EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(bad.status().message().find(named), std::string::npos) << bad.status();
  }
}

int64_t SeqOf(const zmq::message_t& frame) {
  EXPECT_EQ(frame.size(), 8u);
  uint64_t v = 0;
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | static_cast<const unsigned char*>(frame.data())[i];
  return static_cast<int64_t>(v);
}

std::vector<zmq::message_t> Receive(zmq::socket_t& s) {
  std::vector<zmq::message_t> frames;
  EXPECT_TRUE(zmq::recv_multipart(s, std::back_inserter(frames)));
  return frames;
}

// What vllm-router's subscriber does: SUB on the topic, frames
// [topic, seq, payload] with seq counting from 0, and on a gap a DEALER
// asking the replay socket for everything from a seq, answered batch by
// batch and closed by seq -1.
TEST(KvEventPublisher, SubscribersGetNumberedBatchesAndReplayFillsAGap) {
  KvEventsConfig config;
  config.enable_kv_cache_events = true;
  config.endpoint = "tcp://127.0.0.1:*";
  config.replay_endpoint = "tcp://127.0.0.1:*";
  config.topic = "kv@test";
  absl::StatusOr<std::unique_ptr<KvEventPublisher>> publisher = KvEventPublisher::Start(config);
  ASSERT_TRUE(publisher.ok()) << publisher.status();
  KvEventPublisher& p = **publisher;
  ASSERT_TRUE(p.endpoint().starts_with("tcp://127.0.0.1:")) << p.endpoint();
  EXPECT_NE(p.endpoint(), "tcp://127.0.0.1:*");  // the port it picked

  zmq::context_t context;
  zmq::socket_t sub(context, zmq::socket_type::sub);
  sub.set(zmq::sockopt::subscribe, config.topic);
  sub.set(zmq::sockopt::rcvtimeo, 10000);
  sub.connect(p.endpoint());
  // PUB drops what it sends before the subscription arrives (ZeroMQ's slow
  // joiner): probe until one batch gets through, then count from there.
  int64_t first = -1;
  for (int attempt = 0; attempt < 200 && first < 0; ++attempt) {
    p.log()->Removed(static_cast<uint64_t>(1000 + attempt));
    zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, 50ms) > 0) first = SeqOf(Receive(sub)[1]);
  }
  ASSERT_GE(first, 0) << "no batch reached the subscriber";
  while (p.batches_sent() <= first) std::this_thread::sleep_for(1ms);
  // Drain the probes sent after it.
  for (int64_t seq = first + 1; seq < p.batches_sent(); ++seq) ASSERT_EQ(SeqOf(Receive(sub)[1]), seq);

  const int64_t next = p.batches_sent();
  p.log()->Stored(std::nullopt, 42, Tokens(4));
  std::vector<zmq::message_t> frames = Receive(sub);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].to_string(), config.topic);
  EXPECT_EQ(SeqOf(frames[1]), next);
  const DecodedBatch batch = Decode(frames[2].to_string());
  EXPECT_EQ(batch.Event(0)["block_hashes"].as<std::vector<uint64_t>>(), (std::vector<uint64_t>{42}));

  // Replay from seq 0: every batch so far, in order, then the end marker.
  zmq::socket_t dealer(context, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::rcvtimeo, 10000);
  dealer.connect(p.replay_endpoint());
  const std::string zero(8, '\0');
  dealer.send(zmq::message_t(), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(zero), zmq::send_flags::none);
  for (int64_t seq = 0;; ++seq) {
    std::vector<zmq::message_t> reply = Receive(dealer);
    ASSERT_EQ(reply.size(), 4u);  // "", topic, seq, payload
    EXPECT_EQ(reply[0].size(), 0u);
    if (SeqOf(reply[2]) == -1) {
      EXPECT_EQ(seq, next + 1) << "replay ended early";
      EXPECT_EQ(reply[1].size(), 0u);
      EXPECT_EQ(reply[3].size(), 0u);
      break;
    }
    ASSERT_EQ(SeqOf(reply[2]), seq);
    EXPECT_EQ(reply[1].to_string(), config.topic);
    Decode(reply[3].to_string());  // a whole batch
  }
}

TEST(KvEventPublisher, AnEndpointThatCannotBeBoundIsAClearError) {
  KvEventsConfig config;
  config.endpoint = "tcp://127.0.0.1:*";
  absl::StatusOr<std::unique_ptr<KvEventPublisher>> first = KvEventPublisher::Start(config);
  ASSERT_TRUE(first.ok()) << first.status();
  config.endpoint = (*first)->endpoint();  // taken
  absl::StatusOr<std::unique_ptr<KvEventPublisher>> second = KvEventPublisher::Start(config);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(config.endpoint), std::string::npos) << second.status();
}

}  // namespace
}  // namespace specline::scheduler
