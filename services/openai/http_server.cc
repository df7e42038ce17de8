#include "services/openai/http_server.h"

#include <atomic>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/str_cat.h"
#include "common/listen_error.h"
#include "services/openai/api_routes.h"
#include "services/openai/cors.h"
#include "services/openai/http_connection.h"

namespace specline::openai {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;

struct HttpServer::Impl {
  Impl(GenerationService& service, Options o)
      : options(std::move(o)), routes(service, options.scheduler_address) {}
  void Accept();

  Options options;
  CorsPolicy cors;
  // Answers held and not written out yet (Stop waits for them).
  std::atomic<int> open_responses{0};
  ApiRoutes routes;
  ConnectionOptions connection;  // refers to the members above
  std::optional<ssl::context> tls;
  // After what the connections refer to, so they are gone first.
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::vector<std::thread> threads;
};

void HttpServer::Impl::Accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec != net::error::operation_aborted) Accept();
      return;
    }
    ServeConnection(std::move(socket), tls ? &*tls : nullptr, connection);
    Accept();
  });
}

HttpServer::HttpServer(GenerationService& service, Options options)
    : impl_(std::make_unique<Impl>(service, std::move(options))) {
  Impl& s = *impl_;
  absl::StatusOr<CorsPolicy> cors = CorsPolicy::Parse(s.options.cors_origins);
  if (!cors.ok()) throw std::invalid_argument(std::string(cors.status().message()));
  s.cors = *std::move(cors);
  s.connection.max_body_bytes = s.options.max_body_bytes;
  s.connection.cors = &s.cors;
  s.connection.open_responses = &s.open_responses;
  s.connection.route = [&s](HttpExchange& x) { s.routes.Handle(x); };
  if (s.options.tls_cert.empty() != s.options.tls_key.empty())
    throw std::invalid_argument("--tls-cert and --tls-key go together");
  if (!s.options.tls_cert.empty()) {
    s.tls.emplace(ssl::context::tls_server);
    s.tls->set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 |
                       ssl::context::no_sslv3 | ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
    s.tls->use_certificate_chain_file(s.options.tls_cert);
    s.tls->use_private_key_file(s.options.tls_key, ssl::context::pem);
  }
  beast::error_code ec;
  const auto address = net::ip::make_address(s.options.host, ec);
  if (ec) throw std::invalid_argument("--host: not an IP address: " + s.options.host);
  const tcp::endpoint at(address, static_cast<unsigned short>(s.options.port));
  s.acceptor.open(at.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(at, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    throw ListenError(absl::StrCat("gateway: cannot listen for HTTP on ", s.options.host, ":",
                                   s.options.port, ": ", ec.message()));
  port_ = s.acceptor.local_endpoint().port();
  s.Accept();
  for (int i = 0; i < std::max(1, s.options.io_threads); ++i) s.threads.emplace_back([&s] { s.ioc.run(); });
}

void HttpServer::Stop(int grace_ms) {
  Impl& s = *impl_;
  if (s.threads.empty()) return;
  net::post(s.acceptor.get_executor(), [&s] {
    beast::error_code ec;
    s.acceptor.close(ec);
  });
  // Streams that ended (the drain waited for them) still have their last
  // chunks to write: give them a moment.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(grace_ms);
  while (s.open_responses > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  s.ioc.stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
}

HttpServer::~HttpServer() { Stop(0); }

bool HealthOk(int port) {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.expires_after(std::chrono::seconds(2));
  beast::error_code ec;
  stream.connect(tcp::endpoint(net::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)), ec);
  if (ec) return false;
  http::request<http::empty_body> req{http::verb::get, "/health", 11};
  req.set(http::field::host, "127.0.0.1");
  http::write(stream, req, ec);
  if (ec) return false;
  beast::flat_buffer buffer;
  http::response<http::string_body> res;
  http::read(stream, buffer, res, ec);
  return !ec && res.result() == http::status::ok;
}

}  // namespace specline::openai
