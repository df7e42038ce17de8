#include "services/openai/http_server.h"

#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <deque>
#include <mutex>
#include <sstream>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "absl/strings/str_cat.h"
#include "common/cluster_secret.h"
#include "common/listen_error.h"
#include "services/choice_fanout.h"
#include "services/openai/cors.h"
#include "services/openai/openai_request.h"
#include "services/openai/responses_api.h"
#include "services/openai/logprobs_json.h"
#include "services/openai/openai_response.h"
#include "services/openai/render_response.h"
#include "services/openai/tool_call_response.h"
#include "services/openai/kv_event_sources.h"
#include "services/openai/vllm_metrics.h"

namespace specline::openai {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = boost::asio::ssl;
using tcp = net::ip::tcp;

namespace {

// An idle keep-alive connection, or a client slow to send its request, is
// closed after this long.
constexpr auto kReadTimeout = std::chrono::seconds(60);

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string SseEvent(const std::string& payload) { return "data: " + payload + "\n\n"; }

}  // namespace

struct HttpServer::Impl {
  GenerationService& service;
  Options options;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::optional<ssl::context> tls;
  CorsPolicy cors;
  std::vector<std::thread> threads;
  // Responses whose last bytes are not written yet (Stop waits for them).
  std::atomic<int> open_responses{0};

  Impl(GenerationService& s, Options o) : service(s), options(std::move(o)) {}
  void Accept();
};

namespace {

// What a generation hands to its HTTP session: the messages, posted to the
// session's strand, and whether the client is still there.
template <class Session>
class SessionSink final : public GenerationSink {
 public:
  explicit SessionSink(std::shared_ptr<Session> session) : session_(std::move(session)) {}
  void OnMessage(const v1::GenerateResponse& message) override {
    net::post(session_->executor(), [s = session_, message] { s->OnGenerationMessage(message); });
  }
  void OnEnd(const grpc::Status& status, int64_t retry_after_seconds) override {
    net::post(session_->executor(), [s = session_, status, retry_after_seconds] {
      s->OnGenerationEnd(status, retry_after_seconds);
    });
  }
  bool ClientGone() const override { return gone_; }
  void MarkGone() { gone_ = true; }

 private:
  std::shared_ptr<Session> session_;
  std::atomic<bool> gone_{false};
};

// One connection. Stream is beast::tcp_stream or an ssl_stream over one.
template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(HttpServer::Impl& server, Stream stream)
      : server_(server), stream_(std::move(stream)) {}

  auto executor() { return stream_.get_executor(); }

  void Run() {
    if constexpr (kTls) {
      beast::get_lowest_layer(stream_).expires_after(kReadTimeout);
      stream_.async_handshake(ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (ec) return;  // not a TLS client; nothing to answer
                                self->ReadRequest();
                              });
    } else {
      net::dispatch(executor(), [self = this->shared_from_this()] { self->ReadRequest(); });
    }
  }

  void OnGenerationMessage(const v1::GenerateResponse& message) {
    if (!gen_) return;
    Generation& g = *gen_;
    const int i = static_cast<int>(message.index());
    if (i < 0 || i >= static_cast<int>(g.choices.size())) return;
    ChoiceResult& c = g.choices[i];
    const bool last = message.finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
    if (last) {
      c.finish = message.finish_reason();
      // n samples of one prompt count its tokens once.
      if (i % g.n == 0) {
        g.usage.set_prompt_tokens(g.usage.prompt_tokens() + message.usage().prompt_tokens());
        g.usage.set_cached_tokens(g.usage.cached_tokens() + message.usage().cached_tokens());
      }
      g.usage.set_completion_tokens(g.usage.completion_tokens() + message.usage().completion_tokens());
    }
    if (!g.stream) {
      if (!g.tools.empty()) g.tools[i]->Collect(message);
      else c.text += message.text();
      if (!g.logprobs.empty()) g.logprobs[i].Add(message);
      return;
    }
    if (!g.tools.empty()) {
      for (const std::string& chunk : g.tools[i]->StreamChunks(g.who, i, message))
        QueueChunk(SseEvent(chunk));
      return;
    }
    if (g.responses) {
      if (!message.text().empty()) QueueChunk(g.responses->Delta(message.text()));
      return;
    }
    const std::optional<nlohmann::json> logprobs =
        !g.logprobs.empty() && message.logprobs_size() > 0 ? std::optional(g.logprobs[i].Add(message))
                                                          : std::nullopt;
    // A message with tokens is a chunk even when its text is empty (a model
    // served without a tokenizer, or bytes of a character not complete
    // yet): clients see progress, and the stream's pace is the tokens'.
    if (!message.text().empty() || message.token_ids_size() > 0)
      QueueChunk(SseEvent(TextChunk(g.who, i, message.text(), logprobs ? &*logprobs : nullptr)));
    if (last) QueueChunk(SseEvent(FinishChunk(g.who, i, c.finish)));
  }

  void OnGenerationEnd(const grpc::Status& status, int64_t retry_after_seconds) {
    if (!gen_) return;
    Generation g = std::move(*gen_);
    gen_.reset();
    if (g.stream) {
      if (g.responses) {
        if (!status.ok()) {
          QueueChunk(g.responses->Failed(ErrorFromStatus(g.who.endpoint, status.error_code(),
                                                         status.error_message(),
                                                         status.error_details())));
        } else {
          QueueChunk(g.responses->Closing(g.choices[0].finish, g.usage));
        }
        Queue(Item{Item::kLastChunk, {}});
        return;
      }
      if (!status.ok()) {
        QueueChunk(SseEvent(ErrorBody(ErrorFromStatus(g.who.endpoint, status.error_code(),
                                                      status.error_message(), status.error_details()))));
      } else if (g.include_usage) {
        QueueChunk(SseEvent(UsageChunk(g.who, g.usage)));
      }
      QueueChunk("data: [DONE]\n\n");
      Queue(Item{Item::kLastChunk, {}});
      return;
    }
    if (!status.ok()) {
      // Not streamed: the status line is still ours to choose, so a limit
      // that said when to retry answers 429 with Retry-After.
      ApiError e = ErrorFromStatus(g.who.endpoint, status.error_code(), status.error_message(),
                                   status.error_details());
      e.retry_after_seconds = retry_after_seconds;
      return SendError(e);
    }
    if (g.responses) return SendJson(http::status::ok, g.responses->Whole(g.choices[0].text, g.choices[0].finish, g.usage));
    for (size_t i = 0; i < g.choices.size(); ++i) {
      if (!g.echo.empty()) g.choices[i].text = g.echo[i / g.n] + g.choices[i].text;
      if (!g.logprobs.empty()) g.choices[i].logprobs = g.logprobs[i].Whole();
    }
    if (g.tools.empty()) return SendJson(http::status::ok, FullResponse(g.who, g.choices, g.usage));
    // Tool calls: each choice's collected answer parsed into calls.
    std::vector<tool_calls::ParsedText> parsed(g.choices.size());
    for (size_t i = 0; i < g.choices.size(); ++i) {
      parsed[i] = g.tools[i]->Parsed();
      g.choices[i].text = parsed[i].content;
    }
    nlohmann::json whole = nlohmann::json::parse(FullResponse(g.who, g.choices, g.usage));
    for (size_t i = 0; i < g.choices.size(); ++i) AddToolCalls(parsed[i], g.choices[i].finish, whole["choices"][i]);
    SendJson(http::status::ok, whole.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }

 private:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  struct Generation {
    ResponseIdentity who;
    bool stream = false;
    bool include_usage = false;
    int n = 1;                          // samples per prompt: choice i is prompt i / n's
    std::vector<ChoiceResult> choices;  // non-streamed: each choice's whole text
    std::vector<std::string> echo;      // completions' echo: each prompt's text
    std::optional<ResponsesRender> responses;  // POST /v1/responses
    std::vector<LogprobsJson> logprobs;  // one per choice when the request asked for them
    v1::Usage usage;                    // summed over the choices
    std::shared_ptr<SessionSink<Session>> sink;
    std::shared_ptr<grpc::ClientContext> call;
    // One per choice when the answers are parsed for tool calls.
    std::vector<std::unique_ptr<ToolCallResponder>> tools;
  };

  // The write queue: a response is a header then chunks (SSE) or one whole
  // message; the next request is read once the last one is written.
  struct Item {
    enum Kind { kWhole, kHeader, kChunk, kLastChunk } kind;
    std::string data;
  };

  tcp::socket& Socket() { return beast::get_lowest_layer(stream_).socket(); }

  void ReadRequest() {
    parser_.emplace();
    parser_->body_limit(server_.options.max_body_bytes);
    beast::get_lowest_layer(stream_).expires_after(kReadTimeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = this->shared_from_this()](beast::error_code ec, size_t) {
                       self->OnRead(ec);
                     });
  }

  void OnRead(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      keep_alive_ = false;
      ApiError e;
      e.http_status = 413;
      e.message = absl::StrCat("the request body is larger than ",
                               server_.options.max_body_bytes, " bytes");
      return SendError(e);
    }
    if (ec) return Close();  // end of stream, timeout, garbage: nothing to answer
    request_ = parser_->release();
    keep_alive_ = request_.keep_alive();
    beast::get_lowest_layer(stream_).expires_never();
    Route();
  }

  void Route() {
    const std::string target(request_.target().data(), request_.target().size());
    const std::string path = target.substr(0, target.find('?'));
    const http::verb verb = request_.method();
    cors_origin_ = server_.cors.AllowOrigin(std::string(request_[http::field::origin]));
    // A browser's CORS preflight: answered before authentication (it
    // carries no credentials), and only for origins --cors-origins allows.
    if (verb == http::verb::options && request_.find(http::field::origin) != request_.end() &&
        server_.cors.enabled())
      return Preflight();
    if (path == "/health") {
      if (verb != http::verb::get && verb != http::verb::head) return MethodNotAllowed("GET");
      // 200 when serving; 503 while draining, and while the pipeline is not
      // (yet, or any more) up: then requests would only get 503s too.
      if (server_.service.draining())
        return SendJson(http::status::service_unavailable, R"({"status":"draining"})");
      if (!server_.service.pipeline_ready())
        return SendJson(http::status::service_unavailable, R"({"status":"pipeline not ready"})");
      return SendJson(http::status::ok, R"({"status":"ok"})");
    }
    if (path == "/v1/models") {
      if (verb != http::verb::get) return MethodNotAllowed("GET");
      if (!Authenticate()) return;
      nlohmann::json list = {{"object", "list"}, {"data", nlohmann::json::array({ModelJson()})}};
      return SendJson(http::status::ok, list.dump());
    }
    if (path.rfind("/v1/models/", 0) == 0) {
      if (verb != http::verb::get) return MethodNotAllowed("GET");
      if (!Authenticate()) return;
      const std::string id = path.substr(11);
      if (id != server_.service.model_name()) {
        ApiError e;
        e.http_status = 404;
        e.param = "model";
        e.code = "model_not_found";
        e.message = absl::StrCat("The model '", id, "' does not exist; this server serves '",
                                 server_.service.model_name(), "'");
        return SendError(e);
      }
      return SendJson(http::status::ok, ModelJson().dump());
    }
    if (path == "/v1/responses") return Generate(Endpoint::kResponses);
    if (path == "/v1/completions") return Generate(Endpoint::kCompletions);
    if (path == "/v1/chat/completions") return Generate(Endpoint::kChatCompletions);
    if (path == "/v1/completions/render") return Render(Endpoint::kCompletions);
    if (path == "/v1/chat/completions/render") return Render(Endpoint::kChatCompletions);
    if (path == "/v1/responses/render") return Render(Endpoint::kResponses);
    // What routers read of a worker besides the API (docs/routers.md):
    // SGLang's load probe (vllm-router's power_of_two polls it, without
    // credentials: it is a count, like /health) and its info endpoints.
    if (path == "/get_load") {
      if (verb != http::verb::get) return MethodNotAllowed("GET");
      const int load = server_.service.active().size();
      return SendJson(http::status::ok, nlohmann::json{{"load", load}, {"num_reqs", load}}.dump());
    }
    if (path == "/get_server_info" || path == "/get_model_info") {
      if (verb != http::verb::get) return MethodNotAllowed("GET");
      if (!Authenticate()) return;
      const ServedModel& m = server_.service.served_model();
      const std::string& name = server_.service.model_name();
      nlohmann::json info = {{"model_id", name},
                             {"model_path", name},
                             {"served_model_name", name},
                             {"tokenizer_path", name},
                             {"is_generation", true},
                             {"max_model_len", UsableContext(m, RulesNow())},
                             {"engine", "specline"}};
      // vllm-router's kv_aware hashes prompts in blocks of this size.
      if (const auto stats = server_.service.scheduler_load().Latest()) {
        if (const std::optional<KvBlockPool> pool = KvBlockPoolOf(*stats)) {
          info["block_size"] = pool->block_size;
          info["num_gpu_blocks"] = pool->num_blocks;
        }
      }
      return SendJson(http::status::ok, info.dump());
    }
    // Where kv_aware routers subscribe to this pipeline's KV events; 404
    // while the scheduler publishes none (vLLM's answer with events off).
    if (path == "/kv_event_sources") {
      if (verb != http::verb::get) return MethodNotAllowed("GET");
      if (!Authenticate()) return;
      const auto stats = server_.service.scheduler_load().Latest();
      if (!stats || !stats->has_kv_events()) {
        ApiError e;
        e.http_status = 404;
        e.type = "not_found_error";
        e.message = "this pipeline publishes no KV events (the scheduler's --kv-events-config)";
        return SendError(e);
      }
      return SendJson(http::status::ok,
                      KvEventSourcesJson(stats->kv_events(), server_.options.scheduler_address).dump());
    }
    // vLLM's series, where routers and endpoint pickers scrape them (the
    // port they route to), open like /get_load (vllm_metrics.h).
    if (path == "/metrics") {
      if (verb != http::verb::get) return MethodNotAllowed("GET");
      return SendBody(http::status::ok, "text/plain; version=0.0.4; charset=utf-8",
                      VllmMetricsText(server_.service.model_name(),
                                      server_.service.scheduler_load().Latest()));
    }
    if (path == "/apply-template") return ApplyTemplate();
    ApiError e;
    e.http_status = 404;
    e.type = "not_found_error";
    e.message = absl::StrCat("no route for ", std::string(request_.method_string().data(), request_.method_string().size()), " ", path);
    SendError(e);
  }

  nlohmann::json ModelJson() const {
    return {{"id", server_.service.model_name()},
            {"object", "model"},
            {"created", started_},
            {"owned_by", "specline"}};
  }

  // 204 with the Access-Control-* headers for an allowed origin; 403 (and
  // no such header, so the browser refuses the call) for another.
  void Preflight() {
    http::response<http::empty_body> res{cors_origin_ ? http::status::no_content : http::status::forbidden,
                                         request_.version()};
    if (cors_origin_) {
      res.set(http::field::access_control_allow_origin, *cors_origin_);
      if (*cors_origin_ != "*") res.set(http::field::vary, "Origin");
      res.set(http::field::access_control_allow_methods, CorsPolicy::kAllowMethods);
      // Echo what the browser asks to send (the SDKs add their own x-stainless-*
      // headers), else the usual two.
      const auto asked = request_[http::field::access_control_request_headers];
      res.set(http::field::access_control_allow_headers,
              asked.empty() ? std::string(CorsPolicy::kDefaultAllowHeaders)
                            : std::string(asked.data(), asked.size()));
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

  void MethodNotAllowed(const char* allowed) {
    ApiError e;
    e.http_status = 405;
    e.message = absl::StrCat("method ", std::string(request_.method_string().data(), request_.method_string().size()),
                             " is not allowed here; use ", allowed);
    SendError(e);
  }

  // Bearer auth as the gRPC API does it; false after answering 401.
  bool Authenticate() {
    principal_.clear();
    const Principals* principals = server_.service.principals();
    if (!principals) return true;
    auto it = request_.find(http::field::authorization);
    std::optional<std::string> who;
    if (it != request_.end()) who = principals->Authenticate(std::string_view(it->value().data(), it->value().size()));
    if (!who) {
      ApiError e;
      e.http_status = 401;
      e.type = "authentication_error";
      e.code = "invalid_api_key";
      e.message = it == request_.end() ? "missing 'Authorization: Bearer <token>' header"
                                       : "invalid bearer token";
      server_.service.metrics(Api::kOpenAi).CountFailure("UNAUTHENTICATED");
      SendError(e);
      return false;
    }
    principal_ = *std::move(who);
    return true;
  }

  // A POST of a JSON request body, authenticated and parsed as `endpoint`'s;
  // false after answering the error.
  bool ReadJsonPost(Endpoint endpoint, ParsedRequest* parsed) {
    if (request_.method() != http::verb::post) {
      MethodNotAllowed("POST");
      return false;
    }
    if (!Authenticate()) return false;
    const auto type_field = request_[http::field::content_type];
    const std::string type(type_field.data(), type_field.size());
    if (type.rfind("application/json", 0) != 0) {
      ApiError e;
      e.http_status = 415;
      e.message = "Content-Type must be application/json, got '" + type + "'";
      SendError(e);
      return false;
    }
    if (auto e = endpoint == Endpoint::kResponses ? ParseResponsesRequest(request_.body(), parsed)
                                                  : ParseRequest(endpoint, request_.body(), parsed)) {
      server_.service.metrics(Api::kOpenAi).CountFailure("INVALID_ARGUMENT");
      SendError(*e);
      return false;
    }
    return true;
  }

  // The request's tools against the served model (tool_request.h); false
  // after answering the error.
  bool ApplyTools(ParsedRequest* parsed, tool_calls::Syntax* parse_with) {
    if (auto e = ApplyToolChoice(parsed->tools, server_.service.served_model().tool_calls,
                                 &parsed->request, parse_with)) {
      server_.service.metrics(Api::kOpenAi).CountFailure("INVALID_ARGUMENT");
      SendError(*e);
      return false;
    }
    return true;
  }

  // llama-server's POST /apply-template: a chat request's body in, the
  // prompt the model's template makes of it out, {"prompt": "..."}; nothing
  // is generated.
  void ApplyTemplate() {
    ParsedRequest parsed;
    if (!ReadJsonPost(Endpoint::kChatCompletions, &parsed)) return;
    tool_calls::Syntax parse_with;
    if (!ApplyTools(&parsed, &parse_with)) return;
    absl::StatusOr<std::string> prompt =
        RenderChat(parsed.request.chat(), server_.service.served_model());
    if (!prompt.ok()) {
      server_.service.metrics(Api::kOpenAi).CountFailure("INVALID_ARGUMENT");
      return SendError(ErrorFromStatus(Endpoint::kChatCompletions,
                                       static_cast<int>(prompt.status().code()),
                                       std::string(prompt.status().message())));
    }
    SendJson(http::status::ok, nlohmann::json{{"prompt", *prompt}}.dump());
  }

  // The request's model against the served one; false after answering 404.
  bool CheckModel(const ParsedRequest& parsed) {
    const std::string& served = server_.service.model_name();
    if (parsed.model.empty() || parsed.model == served) return true;
    ApiError e;
    e.http_status = 404;
    e.param = "model";
    e.code = "model_not_found";
    e.message = absl::StrCat("the model '", parsed.model, "' does not exist; this server serves '",
                             served, "'");
    server_.service.metrics(Api::kOpenAi).CountFailure("NOT_FOUND");
    SendError(e);
    return false;
  }

  RequestRules RulesNow() const {
    RequestRules rules;
    rules.kv_capacity_tokens = server_.service.kv_capacity_tokens();
    rules.openai = true;
    return rules;
  }

  // The prompts of a parsed request, one GenerateRequest each: a list of
  // completions prompts, or the request's own prompt.
  static std::vector<v1::GenerateRequest> Prompts(const ParsedRequest& parsed) {
    std::vector<v1::GenerateRequest> prompts;
    if (parsed.prompts.empty()) {
      prompts.push_back(parsed.request);
    } else {
      for (const v1::GenerateRequest& p : parsed.prompts) {
        v1::GenerateRequest one = parsed.request;
        if (p.has_token_ids()) *one.mutable_token_ids() = p.token_ids();
        else one.set_text(p.text());
        prompts.push_back(std::move(one));
      }
    }
    return prompts;
  }

  // vLLM's POST /v1/chat/completions/render and /v1/completions/render: the
  // body of a generation request in, the prompt's token ids out as the
  // generation would get them (the same parsing, chat template, tokenizer
  // and validation: PrepareRequest), in vLLM's GenerateRequest shape; an
  // object for chat, a list with one per prompt for completions. Nothing
  // is generated or admitted. vllm-router's cache_aware and kv_aware
  // policies route on these ids (docs/routers.md). /v1/responses/render,
  // which the router calls for the Responses API, answers like chat's.
  void Render(Endpoint endpoint) {
    ParsedRequest parsed;
    if (!ReadJsonPost(endpoint, &parsed)) return;
    if (!CheckModel(parsed)) return;
    tool_calls::Syntax parse_with;
    if (!ApplyTools(&parsed, &parse_with)) return;
    nlohmann::json rendered = nlohmann::json::array();
    static constexpr const char* kIdPrefix[] = {"cmpl-", "chatcmpl-", "resp_"};
    const std::string prefix = kIdPrefix[static_cast<int>(endpoint)];
    for (const v1::GenerateRequest& prompt : Prompts(parsed)) {
      PreparedRequest prepared;
      if (grpc::Status s = server_.service.PrepareOnly(prompt, &prepared); !s.ok())
        return SendError(ErrorFromStatus(endpoint, s.error_code(), s.error_message(), s.error_details()));
      rendered.push_back(RenderedPromptJson(prefix + RandomHex(12), parsed.model, parsed, prompt, prepared));
    }
    if (endpoint != Endpoint::kCompletions) rendered = nlohmann::json(std::move(rendered[0]));
    SendJson(http::status::ok,
             rendered.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }

  void Generate(Endpoint endpoint) {
    ParsedRequest parsed;
    if (!ReadJsonPost(endpoint, &parsed)) return;
    if (!CheckModel(parsed)) return;
    const std::string& served = server_.service.model_name();
    tool_calls::Syntax parse_with;
    if (!ApplyTools(&parsed, &parse_with)) return;
    if (parsed.n > kMaxChoices) {
      server_.service.metrics(Api::kOpenAi).CountFailure("INVALID_ARGUMENT");
      ApiError e;
      e.param = "n";
      e.message = absl::StrCat("n: must be in [1, ", kMaxChoices, "], got ", parsed.n);
      return SendError(e);
    }
    static constexpr const char* kIdPrefix[] = {"cmpl-", "chatcmpl-", "resp_"};
    const ServedModel& model = server_.service.served_model();
    Generation g;
    g.who = {endpoint, kIdPrefix[static_cast<int>(endpoint)] + RandomHex(12), UnixSeconds(), served,
             SystemFingerprint(served, model.vocab_size, model.context_length)};
    parsed.request.set_request_id(g.who.id);
    g.stream = parsed.stream;
    g.include_usage = parsed.include_usage;
    g.n = std::max(1, parsed.n);
    if (endpoint == Endpoint::kResponses) g.responses.emplace(g.who, parsed);
    // The choices: each prompt of a list, n times (choice_fanout.h).
    std::vector<v1::GenerateRequest> prompts = Prompts(parsed);
    std::vector<v1::GenerateRequest> choices;
    for (size_t p = 0; p < prompts.size(); ++p) {
      if (parsed.echo) g.echo.push_back(PromptText(prompts[p]));
      for (v1::GenerateRequest& c : ExpandChoices(prompts[p])) {
        if (p > 0) c.set_request_id(absl::StrCat(g.who.id, ".p", p, c.request_id().substr(g.who.id.size())));
        choices.push_back(std::move(c));
      }
    }
    g.choices.resize(choices.size());
    if (parsed.request.logprobs().enabled()) {
      for (size_t i = 0; i < choices.size(); ++i)
        g.logprobs.emplace_back(endpoint, server_.service.served_model().tokenizer);
    }
    if (parse_with != tool_calls::Syntax::kNone) {
      const ServedModel& m = server_.service.served_model();
      for (size_t i = 0; i < choices.size(); ++i) {
        g.tools.push_back(std::make_unique<ToolCallResponder>(parse_with, m.tool_calls, m.tokenizer,
                                                              parsed.tools.parallel_tool_calls));
      }
    }
    g.sink = std::make_shared<SessionSink<Session>>(this->shared_from_this());
    if (!parsed.user.empty()) spdlog::info("req={} user={}", g.who.id, parsed.user);
    gen_ = std::move(g);
    ++serial_;
    grpc::Status started;
    int64_t retry_after = 0;
    if (parsed.max_tokens_zero) {
      // Nothing to generate: each choice is its prompt's echo (or empty),
      // validated and counted as a generation's would be.
      started = CountPrompts(choices);
    } else {
      // The generation may answer on gRPC's threads at once; its messages
      // are posted to this strand, so they run after this handler returns.
      // Everything that can refuse the request (validation, the context,
      // admission) has answered by the time StartChoices returns: its
      // error is a plain HTTP error, before any stream byte.
      started = server_.service.StartChoices(Api::kOpenAi, principal_, choices, gen_->sink,
                                             &gen_->call, &retry_after);
    }
    if (!started.ok()) {
      gen_.reset();
      ApiError e = ErrorFromStatus(endpoint, started.error_code(), started.error_message(),
                                   started.error_details());
      e.retry_after_seconds = retry_after;
      return SendError(e);
    }
    ++server_.open_responses;
    counted_ = true;
    if (gen_->stream) {
      http::response<http::empty_body> header{http::status::ok, request_.version()};
      header.set(http::field::content_type, "text/event-stream");
      header.set(http::field::cache_control, "no-cache");
      SetCorsHeaders(header);
      header.keep_alive(keep_alive_);
      header.chunked(true);
      std::ostringstream out;
      out << header.base();
      Queue(Item{Item::kHeader, out.str()});
      Generation& g = *gen_;
      if (g.responses) {
        QueueChunk(g.responses->Opening());
      } else {
        // OpenAI opens each chat choice with a role-only chunk; echo comes
        // before a completion's text.
        for (size_t i = 0; i < g.choices.size(); ++i) {
          if (endpoint == Endpoint::kChatCompletions) QueueChunk(SseEvent(RoleChunk(g.who, static_cast<int>(i))));
          if (!g.echo.empty()) QueueChunk(SseEvent(TextChunk(g.who, static_cast<int>(i), g.echo[i / g.n])));
        }
      }
    }
    if (parsed.max_tokens_zero) {
      for (size_t i = 0; i < gen_->choices.size(); ++i) {
        v1::GenerateResponse done;
        done.set_index(static_cast<uint32_t>(i));
        done.set_finish_reason(v1::FINISH_REASON_LENGTH);
        done.mutable_usage()->set_prompt_tokens(prompt_counts_[i]);
        OnGenerationMessage(done);
      }
      return OnGenerationEnd(grpc::Status::OK, 0);
    }
    WatchForDisconnect();
  }

  // The text of a completions prompt, for echo: token ids are decoded.
  std::string PromptText(const v1::GenerateRequest& r) const {
    if (!r.has_token_ids()) return r.text();
    const Tokenizer* tokenizer = server_.service.served_model().tokenizer;
    if (!tokenizer) return "";
    return tokenizer->Decode(std::vector<int32_t>(r.token_ids().ids().begin(), r.token_ids().ids().end()));
  }

  // max_tokens: 0: each choice's prompt length, through the same validation.
  grpc::Status CountPrompts(const std::vector<v1::GenerateRequest>& choices) {
    prompt_counts_.clear();
    for (const v1::GenerateRequest& c : choices) {
      int n = 0;
      if (grpc::Status s = server_.service.PromptTokens(c, &n); !s.ok()) return s;
      prompt_counts_.push_back(n);
    }
    return grpc::Status::OK;
  }

  // A client sends nothing while its response is pending, so a socket that
  // turns readable and, peeked at, shows end of stream means it closed;
  // bytes waiting are a pipelined request, left for the parser. The event
  // loop may also wake the wait with nothing to read (readiness it saw
  // before the parser drained the socket): then it waits again.
  void WatchForDisconnect() {
    const uint64_t serial = serial_;
    Socket().async_wait(tcp::socket::wait_read,
                        net::bind_executor(executor(), [self = this->shared_from_this(), serial](
                                                           beast::error_code ec) {
                          if (!self->gen_ || self->serial_ != serial) return;  // a later request
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
    if (!gen_) return;
    spdlog::info("req={} client disconnected; cancelling", gen_->who.id);
    gen_->sink->MarkGone();
    gen_->call->TryCancel();
  }

  void SendJson(http::status status, std::string body, int64_t retry_after_seconds = 0) {
    SendBody(status, "application/json", std::move(body), retry_after_seconds);
  }

  void SendBody(http::status status, const char* content_type, std::string body,
                int64_t retry_after_seconds = 0) {
    http::response<http::string_body> res{status, request_.version()};
    res.set(http::field::content_type, content_type);
    SetCorsHeaders(res);
    if (retry_after_seconds > 0) res.set(http::field::retry_after, std::to_string(retry_after_seconds));
    res.keep_alive(keep_alive_);
    res.body() = std::move(body);
    res.prepare_payload();
    std::ostringstream out;
    out << res;
    Queue(Item{Item::kWhole, out.str()});
  }

  void SendError(const ApiError& e) {
    if (e.http_status >= 500) spdlog::warn("http {}: {}", e.http_status, e.message);
    SendJson(static_cast<http::status>(e.http_status), ErrorBody(e), e.retry_after_seconds);
  }

  void QueueChunk(std::string data) { Queue(Item{Item::kChunk, std::move(data)}); }

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
    auto done = [self = this->shared_from_this()](beast::error_code ec, size_t) {
      self->OnWritten(ec);
    };
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
    const bool response_over = kind == Item::kLastChunk || (kind == Item::kWhole && !gen_);
    if (response_over) {
      if (counted_) {
        counted_ = false;
        --server_.open_responses;
      }
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
    beast::get_lowest_layer(stream_).async_read_some(
        net::buffer(discard_),
        [self = this->shared_from_this()](beast::error_code ec, size_t) {
          if (ec) return self->Close();
          self->Discard();
        });
  }

  void Close() {
    if (counted_) {
      counted_ = false;
      --server_.open_responses;
    }
    beast::error_code ec;
    Socket().shutdown(tcp::socket::shutdown_both, ec);
    Socket().close(ec);
  }

  HttpServer::Impl& server_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  bool keep_alive_ = true;
  std::string principal_;
  std::optional<std::string> cors_origin_;  // this request's Access-Control-Allow-Origin
  std::optional<Generation> gen_;
  bool counted_ = false;  // counted in open_responses
  uint64_t serial_ = 0;   // generations started on this connection
  std::vector<int> prompt_counts_;  // max_tokens: 0's prompt lengths
  std::deque<Item> queue_;
  bool writing_ = false;
  std::array<char, 16384> discard_;
  const int64_t started_ = UnixSeconds();
};

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec != net::error::operation_aborted) Accept();
      return;
    }
    socket.set_option(tcp::no_delay(true));
    if (tls) {
      using TlsStream = beast::ssl_stream<beast::tcp_stream>;
      std::make_shared<Session<TlsStream>>(*this, TlsStream(beast::tcp_stream(std::move(socket)), *tls))
          ->Run();
    } else {
      std::make_shared<Session<beast::tcp_stream>>(*this, beast::tcp_stream(std::move(socket)))->Run();
    }
    Accept();
  });
}

HttpServer::HttpServer(GenerationService& service, Options options)
    : impl_(std::make_unique<Impl>(service, std::move(options))) {
  Impl& s = *impl_;
  absl::StatusOr<CorsPolicy> cors = CorsPolicy::Parse(s.options.cors_origins);
  if (!cors.ok()) throw std::invalid_argument(std::string(cors.status().message()));
  s.cors = *std::move(cors);
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
