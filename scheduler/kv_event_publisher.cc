#include "scheduler/kv_event_publisher.h"

#include <chrono>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "scheduler/kv_event_wire.h"
#include "spdlog/spdlog.h"

namespace specline::scheduler {
namespace {

// vllm-router refuses a batch of more than 4096 events; a long step's
// events go out as several batches instead.
constexpr size_t kMaxEventsPerBatch = 1024;
constexpr int64_t kEndOfReplay = -1;  // the seq of the frame that ends a replay

std::string SeqFrame(int64_t seq) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((static_cast<uint64_t>(seq) >> (56 - 8 * i)) & 0xff);
  return bytes;
}

int64_t ReadSeqFrame(const zmq::message_t& frame) {
  uint64_t v = 0;
  const auto* p = static_cast<const unsigned char*>(frame.data());
  for (size_t i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return static_cast<int64_t>(v);
}

}  // namespace

absl::StatusOr<KvEventsConfig> ParseKvEventsConfig(std::string_view json) {
  const auto bad = [](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("--kv-events-config: ", std::string(why)));
  };
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return bad("not a JSON object");
  KvEventsConfig c;
  for (auto& [key, value] : j.items()) {
    try {
      if (key == "enable_kv_cache_events") c.enable_kv_cache_events = value.get<bool>();
      else if (key == "publisher") c.publisher = value.get<std::string>();
      else if (key == "endpoint") c.endpoint = value.get<std::string>();
      else if (key == "replay_endpoint") c.replay_endpoint = value.is_null() ? "" : value.get<std::string>();
      else if (key == "buffer_steps") c.buffer_steps = value.get<int>();
      else if (key == "hwm") c.hwm = value.get<int>();
      else if (key == "topic") c.topic = value.get<std::string>();
      // vLLM's in-process queue bound: ours is KvEventLog's, fixed.
      else if (key == "max_queue_size") (void)value.get<int>();
      else return bad(absl::StrCat("unknown field \"", key, "\""));
    } catch (const nlohmann::json::exception&) {
      return bad(absl::StrCat("field \"", key, "\" has the wrong type"));
    }
  }
  if (c.publisher != "zmq" && c.publisher != "null") {
    return bad(absl::StrCat("publisher \"", c.publisher, "\" is not zmq or null"));
  }
  if (c.endpoint.empty()) return bad("endpoint is empty");
  if (c.buffer_steps < 1) return bad("buffer_steps must be >= 1");
  if (c.hwm < 0) return bad("hwm must be >= 0");
  return c;
}

struct KvEventPublisher::Sockets {
  zmq::context_t context{1};
  zmq::socket_t pub{context, zmq::socket_type::pub};
  std::optional<zmq::socket_t> replay;
};

KvEventPublisher::KvEventPublisher(const KvEventsConfig& config)
    : config_(config), sockets_(std::make_unique<Sockets>()) {}

absl::StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Start(
    const KvEventsConfig& config) {
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(config));
  Sockets& s = *p->sockets_;
  std::string binding = config.endpoint;
  try {
    s.pub.set(zmq::sockopt::sndhwm, config.hwm);
    s.pub.set(zmq::sockopt::linger, 500);  // what is queued at exit still leaves
    s.pub.bind(binding);
    p->endpoint_ = s.pub.get(zmq::sockopt::last_endpoint);
    if (!config.replay_endpoint.empty()) {
      binding = config.replay_endpoint;
      s.replay.emplace(s.context, zmq::socket_type::router);
      s.replay->set(zmq::sockopt::linger, 0);
      s.replay->bind(binding);
      p->replay_endpoint_ = s.replay->get(zmq::sockopt::last_endpoint);
    }
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("KV events: cannot bind ", binding, ": ", e.what()));
  }
  p->thread_ = std::thread([raw = p.get()] { raw->Run(); });
  spdlog::info("KV events: publishing on {}{}{}", p->endpoint_,
               p->replay_endpoint_.empty() ? "" : ", replay on ", p->replay_endpoint_);
  return p;
}

KvEventPublisher::~KvEventPublisher() {
  stop_ = true;
  log_.Close();
  if (thread_.joinable()) thread_.join();
}

void KvEventPublisher::Run() {
  // With replay the loop also answers replay requests, so it wakes often.
  const std::chrono::milliseconds wait(sockets_->replay ? 5 : 100);
  while (true) {
    std::vector<KvEvent> events = log_.WaitAndTake(wait);
    const double ts =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    for (size_t first = 0; first < events.size(); first += kMaxEventsPerBatch) {
      const size_t n = std::min(kMaxEventsPerBatch, events.size() - first);
      Send(EncodeKvEventBatch(ts, std::span(events).subspan(first, n), /*data_parallel_rank=*/0));
    }
    if (sockets_->replay) ServeReplay();
    if (stop_.load() && events.empty()) break;
  }
}

void KvEventPublisher::Send(std::string payload) {
  const int64_t seq = next_seq_.load();
  const std::string seq_frame = SeqFrame(seq);
  try {
    zmq::socket_t& pub = sockets_->pub;
    pub.send(zmq::buffer(config_.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    pub.send(zmq::buffer(seq_frame), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    spdlog::warn("KV events: batch {} not sent: {}", seq, e.what());
  }
  if (sockets_->replay) {
    replay_buffer_.emplace_back(seq, std::move(payload));
    while (replay_buffer_.size() > static_cast<size_t>(config_.buffer_steps)) replay_buffer_.pop_front();
  }
  next_seq_.store(seq + 1);
}

// A request is [identity, "", start seq]; the answer is every buffered
// batch from there as [identity, "", topic, seq, payload], then
// [identity, "", "", -1, ""] (vLLM's replay protocol).
void KvEventPublisher::ServeReplay() {
  zmq::socket_t& replay = *sockets_->replay;
  while (true) {
    std::vector<zmq::message_t> request;
    try {
      if (!zmq::recv_multipart(replay, std::back_inserter(request), zmq::recv_flags::dontwait)) return;
    } catch (const zmq::error_t& e) {
      spdlog::warn("KV events: replay request: {}", e.what());
      return;
    }
    if (request.size() != 3 || request[2].size() != 8) {
      spdlog::warn("KV events: malformed replay request ({} frames) ignored", request.size());
      continue;
    }
    const int64_t start = ReadSeqFrame(request[2]);
    const std::string identity = request[0].to_string();
    const auto reply = [&](std::string_view topic, int64_t seq, std::string_view payload) {
      replay.send(zmq::buffer(identity), zmq::send_flags::sndmore);
      replay.send(zmq::message_t(), zmq::send_flags::sndmore);
      replay.send(zmq::buffer(topic), zmq::send_flags::sndmore);
      replay.send(zmq::buffer(SeqFrame(seq)), zmq::send_flags::sndmore);
      replay.send(zmq::buffer(payload), zmq::send_flags::none);
    };
    try {
      for (const auto& [seq, payload] : replay_buffer_) {
        if (seq >= start) reply(config_.topic, seq, payload);
      }
      reply("", kEndOfReplay, "");
    } catch (const zmq::error_t& e) {
      spdlog::warn("KV events: replay answer: {}", e.what());
    }
  }
}

}  // namespace specline::scheduler
