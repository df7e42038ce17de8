// A small blocking HTTP client for the OpenAI API tests (Boost.Beast), and
// the SSE helpers they check the server's event stream with.
#pragma once

#include <cctype>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace specline::testing {

struct HttpResult {
  int status = 0;  // 0: no response (connection failed)
  std::string content_type;
  std::string retry_after;  // the Retry-After header; "" when absent
  std::string body;  // de-chunked
  bool chunked = false;
  std::map<std::string, std::string> headers;  // every header, names lower-cased
  nlohmann::json Json() const { return nlohmann::json::parse(body, nullptr, false); }
};

// A keep-alive connection to 127.0.0.1:port: requests go one after another
// on the same socket, as HTTP clients' connection pools send them.
class HttpConnection {
 public:
  explicit HttpConnection(int port) : stream_(ioc_) {
    boost::beast::error_code ec;
    stream_.connect(boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"),
                                                   static_cast<unsigned short>(port)),
                    ec);
    connected_ = !ec;
  }

  HttpResult Call(const std::string& method, const std::string& target, const std::string& body = "",
                  const std::map<std::string, std::string>& headers = {
                      {"Content-Type", "application/json"}}) {
    namespace http = boost::beast::http;
    HttpResult out;
    if (!connected_) return out;
    boost::beast::error_code ec;
    http::request<http::string_body> req{http::string_to_verb(method), target, 11};
    req.set(http::field::host, "127.0.0.1");
    for (const auto& [k, v] : headers) req.set(k, v);
    req.body() = body;
    req.prepare_payload();
    http::write(stream_, req, ec);
    if (ec) return out;
    http::response_parser<http::string_body> parser;
    parser.body_limit(64 << 20);
    http::read(stream_, buffer_, parser, ec);
    if (ec) return out;
    auto res = parser.release();
    out.status = res.result_int();
    out.content_type = std::string(res[http::field::content_type]);
    out.retry_after = std::string(res[http::field::retry_after]);
    out.chunked = res.chunked();
    out.body = res.body();
    for (const auto& field : res) {
      std::string name(field.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      out.headers[name] = std::string(field.value());
    }
    return out;
  }

 private:
  boost::asio::io_context ioc_;
  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  bool connected_ = false;
};

// One request on a fresh connection to 127.0.0.1:port.
inline HttpResult HttpCall(int port, const std::string& method, const std::string& target,
                           const std::string& body = "",
                           const std::map<std::string, std::string>& headers = {
                               {"Content-Type", "application/json"}}) {
  HttpConnection connection(port);
  return connection.Call(method, target, body, headers);
}

inline HttpResult PostJson(int port, const std::string& target, const nlohmann::json& body,
                           std::map<std::string, std::string> headers = {}) {
  headers.emplace("Content-Type", "application/json");
  return HttpCall(port, "POST", target, body.dump(), headers);
}

// Whether the gateway on `port` answers GET /health with 200 within
// `seconds`: it does once every stage answered and the scheduler's KV
// capacity is known, which on a loaded machine (the whole suite at -j2)
// took longer than 10 s.
inline bool WaitForHttpHealth(int port, int seconds = 60) {
  for (int i = 0; i < seconds * 40; ++i) {
    if (HttpCall(port, "GET", "/health").status == 200) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

// The `data:` payloads of an SSE body; a malformed frame is a test failure
// (reported in `error`).
struct SseEvents {
  std::vector<std::string> data;
  std::string error;
};

inline SseEvents ParseSse(const std::string& body) {
  SseEvents out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) {
      out.error = "unterminated event at byte " + std::to_string(pos);
      return out;
    }
    const std::string event = body.substr(pos, end - pos);
    if (event.rfind("data: ", 0) != 0 || event.find('\n') != std::string::npos) {
      out.error = "not one data line: '" + event + "'";
      return out;
    }
    out.data.push_back(event.substr(6));
    pos = end + 2;
  }
  return out;
}

}  // namespace specline::testing
