// The HTTP/1.1 transport of the API port: one connection per client, read
// request by request (keep-alive, a body limit, a read timeout), each
// request handed to the routes as an HttpExchange (http_exchange.h), the
// answers written in order (whole, or chunked for SSE), CORS's origin
// header and preflight, a client that closes while its answer is pending
// noticed, and a lingering close after an early answer. Plain TCP or TLS.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "services/openai/cors.h"
#include "services/openai/http_exchange.h"

namespace specline::openai {

// What every connection of a server shares; outlives them (HttpServer).
struct ConnectionOptions {
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  const CorsPolicy* cors = nullptr;
  std::atomic<int>* open_responses = nullptr;  // held answers not written out yet
  std::function<void(HttpExchange&)> route;    // answers one request
};

// Serves the client on `socket` until it goes; TLS when `tls` is set.
// Runs on the socket's executor (a strand).
void ServeConnection(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context* tls,
                     const ConnectionOptions& options);

}  // namespace specline::openai
