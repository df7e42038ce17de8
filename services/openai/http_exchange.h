// One HTTP request and the answer to it, as the endpoint handlers see them
// (api_routes.h): the connection that reads the request and writes the
// answer's bytes lives in http_connection.cc, so a handler never names a
// socket, TLS or the write queue. Everything runs on the connection's
// strand; Post brings work there from other threads (a generation's
// messages arrive on gRPC's).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include <boost/beast/http.hpp>

namespace specline::openai {

namespace http = boost::beast::http;
using HttpRequest = http::request<http::string_body>;

struct ApiError;
// An error's body in an API's shape (OpenAI's ErrorBody, Anthropic's).
using ErrorWriter = std::string (*)(const ApiError&);

class HttpExchange : public std::enable_shared_from_this<HttpExchange> {
 public:
  virtual ~HttpExchange() = default;

  virtual const HttpRequest& request() const = 0;
  // The target without its query.
  std::string path() const;
  http::verb verb() const { return request().method(); }
  // A request header's value ("" when absent).
  std::string header(http::field field) const;
  std::string header(std::string_view name) const;

  // One whole answer; the exchange is over once it is written.
  virtual void SendBody(http::status status, std::string_view content_type, std::string body,
                        int64_t retry_after_seconds = 0) = 0;
  void SendJson(http::status status, std::string body, int64_t retry_after_seconds = 0) {
    SendBody(status, "application/json", std::move(body), retry_after_seconds);
  }

  // A long answer (a generation): counted as open until its last bytes are
  // written (HttpServer::Stop waits for those), and `client_gone` runs once,
  // on the strand, if the client disconnects or a write fails before.
  virtual void Hold(std::function<void()> client_gone) = 0;
  // A streamed answer, after Hold: a chunked header, chunks, the end.
  virtual void StartStream(std::string_view content_type) = 0;
  virtual void SendChunk(std::string data) = 0;
  virtual void EndStream() = 0;

  // Runs `fn` on the strand; the connection lives until it has run.
  virtual void Post(std::function<void()> fn) = 0;

  // The shape this exchange's errors are written in: OpenAI's unless the
  // route's API has its own (RequestPipeline::SendError reads it).
  void set_error_writer(ErrorWriter writer) { error_writer_ = writer; }
  ErrorWriter error_writer() const { return error_writer_; }

 private:
  ErrorWriter error_writer_ = nullptr;
};

}  // namespace specline::openai
