#include "services/openai/kv_event_sources.h"

#include <string>


namespace specline::openai {
namespace {

// "host" of "host:port" / "[v6]:port".
std::string_view HostOf(std::string_view address) {
  const size_t colon = address.rfind(':');
  std::string_view host = colon == std::string_view::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

bool IsLoopback(std::string_view host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

bool IsAnyAddress(std::string_view host) {
  return host == "*" || host == "0.0.0.0" || host == "[::]" || host == "::";
}

}  // namespace

std::string ReachableKvEventsEndpoint(std::string_view endpoint, std::string_view scheduler_address) {
  constexpr std::string_view kTcp = "tcp://";
  if (!endpoint.starts_with(kTcp)) return std::string(endpoint);
  const std::string_view rest = endpoint.substr(kTcp.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos || !IsAnyAddress(rest.substr(0, colon))) {
    return std::string(endpoint);
  }
  const std::string_view port = rest.substr(colon + 1);
  const std::string_view host = HostOf(scheduler_address);
  if (host.empty() || IsAnyAddress(host) || IsLoopback(host)) return "tcp://*:" + std::string(port);
  const bool v6 = host.find(':') != std::string_view::npos;
  return std::string(kTcp) + (v6 ? "[" : "") + std::string(host) + (v6 ? "]" : "") + ":" +
         std::string(port);
}

nlohmann::json KvEventSourcesJson(const internal::KvEventsSource& source,
                                  std::string_view scheduler_address) {
  nlohmann::json rank = {
      {"enable_kv_cache_events", true},
      {"publisher", "zmq"},
      {"encoding", "msgpack"},
      {"schema_version", 1},
      {"endpoint", ReachableKvEventsEndpoint(source.endpoint(), scheduler_address)},
      {"replay_endpoint", source.replay_endpoint().empty()
                              ? nlohmann::json(nullptr)
                              : nlohmann::json(ReachableKvEventsEndpoint(source.replay_endpoint(),
                                                                         scheduler_address))},
      {"topic", source.topic()},
      {"hwm", source.hwm()},
      {"buffer_steps", source.buffer_steps()},
  };
  return nlohmann::json{{"0", std::move(rank)}};
}

}  // namespace specline::openai
