// GET /kv_event_sources: where a router subscribes to this pipeline's KV
// events (vllm-router's kv_aware reads it with /get_server_info), in the
// shape vLLM serves: {"<data parallel rank>": KVEventsConfig}. One rank:
// the scheduler's publisher (scheduler/kv_event_publisher.h).
#pragma once

#include <string_view>

#include "nlohmann/json.hpp"
#include "specline/internal/scheduler.pb.h"

namespace specline::openai {

// The body for `source` as the scheduler at `scheduler_address` (host:port,
// the gateway's --scheduler) reported it. An endpoint bound on every
// address names no host a router can dial: a router substitutes the host
// of the gateway it found, which is the scheduler's when the scheduler is
// on loopback beside it; otherwise the scheduler's own host is filled in.
nlohmann::json KvEventSourcesJson(const internal::KvEventsSource& source,
                                  std::string_view scheduler_address);

// `endpoint` (tcp://HOST:PORT) with a wildcard or any-address HOST
// ("*", 0.0.0.0, [::]) replaced by the scheduler's host, unless that is
// loopback (see above). Other endpoints are returned as they are.
std::string ReachableKvEventsEndpoint(std::string_view endpoint, std::string_view scheduler_address);

}  // namespace specline::openai
