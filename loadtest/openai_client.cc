#include "loadtest/openai_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

#include "proto/policy_names.h"

namespace specline::loadtest {
namespace {

namespace beast = boost::beast;
namespace http = beast::http;
using nlohmann::json;

json RequestBody(const WorkItem& item, const ClientOptions& o, const OpenAiTarget& target) {
  json body = {{"stream", true}, {"stream_options", {{"include_usage", true}}}};
  if (!target.model.empty()) body["model"] = target.model;
  if (item.ids.empty()) {
    body["prompt"] = item.text;
  } else {
    body["prompt"] = item.ids;
  }
  if (item.max_tokens > 0) body["max_tokens"] = item.max_tokens;
  if (item.ignore_eos) body["ignore_eos"] = true;
  // The gRPC API's default is greedy; OpenAI's is temperature 1. Say it.
  body["temperature"] = o.request.temperature.value_or(0.0f);
  if (o.request.top_p) body["top_p"] = *o.request.top_p;
  if (o.request.top_k) body["top_k"] = *o.request.top_k;
  if (o.request.seed) body["seed"] = *o.request.seed;
  if (o.request.policy != v1::DECODING_POLICY_UNSPECIFIED)
    body["policy"] = PolicyShortName(o.request.policy);
  return body;
}

// Reads the SSE events of one response as they arrive, filling `r`.
class EventReader {
 public:
  EventReader(RequestRecord& r, Clock::time_point t0, Clock::time_point run_start,
              const std::function<void(const std::string&)>& on_text)
      : r_(r), t0_(t0), run_start_(run_start), on_text_(on_text) {}

  void Feed(std::string_view bytes) {
    pending_.append(bytes.data(), bytes.size());
    size_t end;
    while ((end = pending_.find("\n\n")) != std::string::npos) {
      const std::string event = pending_.substr(0, end);
      pending_.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0) OnData(event.substr(6));
    }
  }

  void Finish() {
    // usage is exact; text-bearing chunks may be fewer (several tokens in
    // one chunk, or tokens that decode to no text yet).
    if (usage_tokens_ > r_.output_tokens && !r_.message_tokens.empty()) {
      r_.message_tokens.back() += usage_tokens_ - r_.output_tokens;
      r_.output_tokens = usage_tokens_;
    }
  }

  bool done() const { return done_; }

 private:
  void OnData(const std::string& payload) {
    if (payload == "[DONE]") {
      done_ = true;
      return;
    }
    const json chunk = json::parse(payload, nullptr, false);
    if (chunk.is_discarded()) return;
    if (chunk.contains("error")) {
      r_.ok = false;
      r_.status_code = "STREAM_ERROR";
      r_.error = chunk["error"].value("message", chunk["error"].dump());
      return;
    }
    if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) {
      usage_tokens_ = u->value("completion_tokens", 0);
      r_.prompt_tokens = u->value("prompt_tokens", 0);
    }
    auto choices = chunk.find("choices");
    if (choices == chunk.end() || !choices->is_array() || choices->empty()) return;
    const json& c = (*choices)[0];
    std::string text;
    if (auto t = c.find("text"); t != c.end() && t->is_string()) text = t->get<std::string>();
    if (auto d = c.find("delta"); d != c.end() && d->is_object())
      if (auto t = d->find("content"); t != d->end() && t->is_string()) text = t->get<std::string>();
    if (!text.empty()) {
      RecordMessage(r_, t0_, run_start_, Clock::now(), 1, &last_);
      if (on_text_) on_text_(text);
    }
    if (auto f = c.find("finish_reason"); f != c.end() && f->is_string()) r_.finish_reason = *f;
  }

  RequestRecord& r_;
  const Clock::time_point t0_, run_start_;
  const std::function<void(const std::string&)>& on_text_;
  Clock::time_point last_{};
  std::string pending_;
  int usage_tokens_ = 0;
  bool done_ = false;
};

}  // namespace

OpenAiTarget ParseOpenAiAddress(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon + 1 == addr.size())
    throw std::invalid_argument("--addr wants HOST:PORT, got '" + addr + "'");
  OpenAiTarget t;
  t.host = addr.substr(0, colon);
  t.port = std::stoi(addr.substr(colon + 1));
  return t;
}

SendFn OpenAiSender(OpenAiTarget target, ClientOptions options) {
  return [target, options](int /*index*/, const WorkItem& item, Clock::time_point run_start) {
    RequestRecord r;
    r.ok = true;
    const std::string body = RequestBody(item, options, target).dump();
    boost::asio::io_context ioc;
    beast::tcp_stream stream(ioc);
    if (options.timeout > 0)
      stream.expires_after(std::chrono::microseconds(static_cast<int64_t>(options.timeout * 1e6)));
    const Clock::time_point t0 = Clock::now();
    r.start = Seconds(run_start, t0);
    auto fail = [&](const std::string& code, const std::string& why) {
      r.ok = false;
      r.status_code = code;
      r.error = why;
    };
    beast::error_code ec;
    boost::asio::ip::tcp::resolver resolver(ioc);
    auto endpoints = resolver.resolve(target.host, std::to_string(target.port), ec);
    if (!ec) stream.connect(endpoints, ec);
    EventReader events(r, t0, run_start, target.on_text);
    if (ec) {
      fail("UNAVAILABLE", "connect: " + ec.message());
    } else {
      http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
      req.set(http::field::host, target.host);
      req.set(http::field::content_type, "application/json");
      req.set(http::field::accept, "text/event-stream");
      if (!options.bearer_token.empty())
        req.set(http::field::authorization, "Bearer " + options.bearer_token);
      req.body() = body;
      req.prepare_payload();
      http::write(stream, req, ec);
      beast::flat_buffer buffer;
      http::response_parser<http::string_body> parser;
      parser.body_limit(std::numeric_limits<std::uint64_t>::max());
      // Beast keeps a reference to the callback: it must outlive the reads.
      auto on_chunk = [&](std::uint64_t, beast::string_view data, beast::error_code&) {
        events.Feed(std::string_view(data.data(), data.size()));
        return data.size();
      };
      parser.on_chunk_body(on_chunk);
      if (!ec) http::read_header(stream, buffer, parser, ec);
      while (!ec && !parser.is_done()) http::read_some(stream, buffer, parser, ec);
      if (ec == beast::error::timeout) {
        fail("DEADLINE_EXCEEDED", "timed out");
      } else if (ec) {
        fail("UNAVAILABLE", "read: " + ec.message());
      } else if (parser.get().result_int() != 200) {
        fail("HTTP_" + std::to_string(parser.get().result_int()), parser.get().body());
      } else {
        // A non-chunked event stream (HTTP/1.0 style) lands in the body.
        if (!parser.get().body().empty()) events.Feed(parser.get().body());
        if (!events.done() && r.ok) fail("INTERNAL", "the stream ended without data: [DONE]");
      }
    }
    events.Finish();
    FinishRecord(r, t0, run_start, Clock::now());
    return r;
  };
}

}  // namespace specline::loadtest
