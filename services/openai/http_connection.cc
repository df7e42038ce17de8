#include "services/openai/http_connection.h"

#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <deque>
#include <optional>
#include <sstream>

#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>

#include "absl/strings/str_cat.h"
#include "services/openai/openai_response.h"

namespace specline::openai {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;

namespace {

// An idle keep-alive connection, or a client slow to send its request, is
// closed after this long.
constexpr auto kReadTimeout = std::chrono::seconds(60);

// One connection. Stream is beast::tcp_stream or an ssl_stream over one.
template <class Stream>
class Connection final : public HttpExchange {
 public:
  Connection(const ConnectionOptions& options, Stream stream)
      : o_(options), stream_(std::move(stream)) {}

  void Run() {
    if constexpr (kTls) {
      beast::get_lowest_layer(stream_).expires_after(kReadTimeout);
      stream_.async_handshake(ssl::stream_base::server, [self = Self()](beast::error_code ec) {
        if (ec) return;  // not a TLS client; nothing to answer
        self->ReadRequest();
      });
    } else {
      net::dispatch(stream_.get_executor(), [self = Self()] { self->ReadRequest(); });
    }
  }

  const HttpRequest& request() const override { return request_; }

  void SendBody(http::status status, std::string_view content_type, std::string body,
                int64_t retry_after_seconds) override {
    http::response<http::string_body> res{status, request_.version()};
    res.set(http::field::content_type, beast::string_view(content_type.data(), content_type.size()));
    SetCorsHeaders(res);
    if (retry_after_seconds > 0) res.set(http::field::retry_after, std::to_string(retry_after_seconds));
    res.keep_alive(keep_alive_);
    res.body() = std::move(body);
    res.prepare_payload();
    std::ostringstream out;
    out << res;
    Queue(Item{Item::kWhole, out.str()});
  }

  void Hold(std::function<void()> client_gone) override {
    held_ = true;
    client_gone_ = std::move(client_gone);
    ++*o_.open_responses;
    counted_ = true;
    ++serial_;
    WatchForDisconnect();
  }

  void StartStream(std::string_view content_type) override {
    http::response<http::empty_body> header{http::status::ok, request_.version()};
    header.set(http::field::content_type, beast::string_view(content_type.data(), content_type.size()));
    header.set(http::field::cache_control, "no-cache");
    SetCorsHeaders(header);
    header.keep_alive(keep_alive_);
    header.chunked(true);
    std::ostringstream out;
    out << header.base();
    Queue(Item{Item::kHeader, out.str()});
  }

  void SendChunk(std::string data) override { Queue(Item{Item::kChunk, std::move(data)}); }
  void EndStream() override { Queue(Item{Item::kLastChunk, {}}); }

  void Post(std::function<void()> fn) override {
    net::post(stream_.get_executor(), [self = Self(), fn = std::move(fn)] { fn(); });
  }

 private:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  // The write queue: an answer is a header then chunks (SSE) or one whole
  // message; the next request is read once the last one is written.
  struct Item {
    enum Kind { kWhole, kHeader, kChunk, kLastChunk } kind;
    std::string data;
  };

  std::shared_ptr<Connection> Self() {
    return std::static_pointer_cast<Connection>(this->shared_from_this());
  }
  tcp::socket& Socket() { return beast::get_lowest_layer(stream_).socket(); }

  void ReadRequest() {
    parser_.emplace();
    parser_->body_limit(o_.max_body_bytes);
    beast::get_lowest_layer(stream_).expires_after(kReadTimeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = Self()](beast::error_code ec, size_t) { self->OnRead(ec); });
  }

  void OnRead(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      // The transport's own error, in the API's default (OpenAI's) shape.
      ApiError e;
      e.http_status = 413;
      e.message = absl::StrCat("the request body is larger than ", o_.max_body_bytes, " bytes");
      return SendJson(http::status::payload_too_large, ErrorBody(e));
    }
    if (ec) return Close();  // end of stream, timeout, garbage: nothing to answer
    request_ = parser_->release();
    keep_alive_ = request_.keep_alive();
    beast::get_lowest_layer(stream_).expires_never();
    cors_origin_ = o_.cors->AllowOrigin(header(http::field::origin));
    // A browser's CORS preflight: answered before authentication (it
    // carries no credentials), and only for origins --cors-origins allows.
    if (verb() == http::verb::options && request_.find(http::field::origin) != request_.end() &&
        o_.cors->enabled())
      return Preflight();
    o_.route(*this);
  }

  void Preflight() {
    http::response<http::empty_body> res{cors_origin_ ? http::status::no_content : http::status::forbidden,
                                         request_.version()};
    if (cors_origin_) {
      res.set(http::field::access_control_allow_origin, *cors_origin_);
      if (*cors_origin_ != "*") res.set(http::field::vary, "Origin");
      res.set(http::field::access_control_allow_methods, CorsPolicy::kAllowMethods);
      // Echo what the browser asks to send (the SDKs add their own x-stainless-*
      // headers), else the usual two.
      const std::string asked = header(http::field::access_control_request_headers);
      res.set(http::field::access_control_allow_headers,
              asked.empty() ? std::string(CorsPolicy::kDefaultAllowHeaders) : asked);
      res.set(http::field::access_control_max_age, CorsPolicy::kMaxAgeSeconds);
    }
    res.keep_alive(keep_alive_);
    res.prepare_payload();
    std::ostringstream out;
    out << res;
    Queue(Item{Item::kWhole, out.str()});
  }

  template <class Response>
  void SetCorsHeaders(Response& res) const {
    if (!cors_origin_) return;
    res.set(http::field::access_control_allow_origin, *cors_origin_);
    if (*cors_origin_ != "*") res.set(http::field::vary, "Origin");
  }

  // A client sends nothing while its answer is pending, so a socket that
  // turns readable and, peeked at, shows end of stream means it closed;
  // bytes waiting are a pipelined request, left for the parser. The event
  // loop may also wake the wait with nothing to read (readiness it saw
  // before the parser drained the socket): then it waits again.
  void WatchForDisconnect() {
    const uint64_t serial = serial_;
    Socket().async_wait(tcp::socket::wait_read,
                        net::bind_executor(stream_.get_executor(), [self = Self(), serial](
                                                                       beast::error_code ec) {
                          if (!self->held_ || self->serial_ != serial) return;  // a later request
                          if (ec) return self->ClientGone();
                          char byte;
                          const ssize_t n = ::recv(self->Socket().native_handle(), &byte, 1,
                                                   MSG_PEEK | MSG_DONTWAIT);
                          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                                         errno != EINTR))
                            return self->ClientGone();
                          if (n < 0) self->WatchForDisconnect();  // woken with nothing to read
                        }));
  }

  void ClientGone() {
    if (!held_ || !client_gone_) return;
    std::function<void()> gone = std::move(client_gone_);
    client_gone_ = nullptr;
    gone();
  }

  // The held answer is written out (or abandoned).
  void Release() {
    held_ = false;
    client_gone_ = nullptr;
    if (counted_) {
      counted_ = false;
      --*o_.open_responses;
    }
  }

  void Queue(Item item) {
    queue_.push_back(std::move(item));
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    if (queue_.empty()) {
      writing_ = false;
      return;
    }
    writing_ = true;
    Item& item = queue_.front();
    auto done = [self = Self()](beast::error_code ec, size_t) { self->OnWritten(ec); };
    switch (item.kind) {
      case Item::kWhole:
      case Item::kHeader:
        net::async_write(stream_, net::buffer(item.data), std::move(done));
        break;
      case Item::kChunk:
        net::async_write(stream_, http::make_chunk(net::buffer(item.data)), std::move(done));
        break;
      case Item::kLastChunk:
        net::async_write(stream_, http::make_chunk_last(), std::move(done));
        break;
    }
  }

  void OnWritten(beast::error_code ec) {
    const auto kind = queue_.front().kind;
    queue_.pop_front();
    if (ec) {
      ClientGone();
      queue_.clear();
      writing_ = false;
      return Close();
    }
    if (kind == Item::kLastChunk || kind == Item::kWhole) {  // the answer is over
      Release();
      if (!keep_alive_) {
        queue_.clear();
        writing_ = false;
        return LingeringClose();
      }
      if (queue_.empty()) {
        writing_ = false;
        return ReadRequest();
      }
    }
    WriteNext();
  }

  // After an early answer (413) the client may still be sending its body:
  // closing at once would reset the connection and lose the answer, so stop
  // sending, read and drop what comes for a while, then close.
  void LingeringClose() {
    beast::error_code ec;
    Socket().shutdown(tcp::socket::shutdown_send, ec);
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(5));
    Discard();
  }

  void Discard() {
    beast::get_lowest_layer(stream_).async_read_some(net::buffer(discard_),
                                                     [self = Self()](beast::error_code ec, size_t) {
                                                       if (ec) return self->Close();
                                                       self->Discard();
                                                     });
  }

  void Close() {
    Release();
    beast::error_code ec;
    Socket().shutdown(tcp::socket::shutdown_both, ec);
    Socket().close(ec);
  }

  const ConnectionOptions& o_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  HttpRequest request_;
  bool keep_alive_ = true;
  std::optional<std::string> cors_origin_;  // this request's Access-Control-Allow-Origin
  bool held_ = false;                       // an answer is held (Hold) and not over
  std::function<void()> client_gone_;
  bool counted_ = false;  // counted in open_responses
  uint64_t serial_ = 0;   // answers held on this connection
  std::deque<Item> queue_;
  bool writing_ = false;
  std::array<char, 16384> discard_;
};

}  // namespace

void ServeConnection(tcp::socket socket, ssl::context* tls, const ConnectionOptions& options) {
  socket.set_option(tcp::no_delay(true));
  if (tls) {
    using TlsStream = beast::ssl_stream<beast::tcp_stream>;
    std::make_shared<Connection<TlsStream>>(options, TlsStream(beast::tcp_stream(std::move(socket)), *tls))
        ->Run();
  } else {
    std::make_shared<Connection<beast::tcp_stream>>(options, beast::tcp_stream(std::move(socket)))->Run();
  }
}

}  // namespace specline::openai
