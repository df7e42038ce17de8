#include "services/gateway_server.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <stdexcept>

#include <grpcpp/create_channel.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <spdlog/spdlog.h>

#include "model/formats/model_source.h"
#include "model/tokenizer/model_tokenizer.h"
#include "absl/strings/str_cat.h"
#include "common/cluster_secret.h"
#include "common/listen_error.h"
#include "common/port_file.h"

namespace specline {
namespace {

std::string ReadWholeFile(const std::string& path, const char* what) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(std::string(what) + ": cannot read " + path);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  std::fclose(f);
  return s;
}

// What clients see as the model: --served-model-name, else the model
// file's name without directories or extension (never a server path).
std::string ServedModelName(const GatewayConfig& config) {
  if (!config.served_model_name.empty()) return config.served_model_name;
  return std::filesystem::path(config.model_path).filename().replace_extension().string();
}

const char kServiceName[] = "specline.v1.Generation";

// The operator's --chat-template wins and must load (start-up fails
// otherwise). The model's own template that does not parse is logged and
// left out: the model still serves text and token ids, and a chat request
// gets a 400 naming the parse error.
void LoadChatTemplate(const GatewayConfig& config, const ModelSource& model,
                      const Tokenizer* tokenizer, ServedModel* served) {
  if (!config.chat_template_path.empty()) {
    absl::StatusOr<ChatTemplate> t = ChatTemplateFromFile(config.chat_template_path, tokenizer);
    if (!t.ok()) throw std::invalid_argument(std::string(t.status().message()));
    served->chat_template = *std::move(t);
    return;
  }
  absl::StatusOr<std::optional<ChatTemplate>> own = ChatTemplateFor(model, tokenizer);
  if (!own.ok()) {
    spdlog::warn("chat requests will be refused: {}", std::string(own.status().message()));
    served->no_chat_template_reason = absl::StrCat(
        own.status().message(), "; start the gateway with --chat-template FILE to give one");
    return;
  }
  served->chat_template = *std::move(own);
  if (!served->chat_template) {
    served->no_chat_template_reason =
        "the served model carries no chat template (a base model?); send a completion "
        "(text or token_ids), or start the gateway with --chat-template FILE";
  }
}

// Refuses a config that cannot start before anything is opened, so the
// operator gets the flag's name rather than a later, vaguer failure.
void CheckConfig(const GatewayConfig& config) {
  if (config.model_path.empty()) throw std::invalid_argument("--model is required");
  if (config.scheduler_addr.empty()) throw std::invalid_argument("--scheduler is required");
  if (config.tls_cert.empty() != config.tls_key.empty())
    throw std::invalid_argument("--tls-cert and --tls-key go together");
}

// The tokenizer, or none for a model without one: an explicit
// --tokenizer must load, but a bare checkpoint can still serve token ids.
std::unique_ptr<Tokenizer> OpenTokenizerOrNone(const GatewayConfig& config,
                                               const ModelSource& model) {
  try {
    return OpenTokenizerFor(model, config.tokenizer_path);
  } catch (const std::exception& e) {
    if (!config.tokenizer_path.empty()) throw;
    // A bare checkpoint (random test models) can still be served by ids.
    spdlog::warn("no tokenizer for {} ({}); serving token-id prompts only, without text",
                 config.model_path, e.what());
  }
  return nullptr;
}

// What requests are checked and rendered against: tokenizer, chat template,
// tool-call syntax and the token limits.
ServedModel DescribeServedModel(const GatewayConfig& config, const ModelSource& model,
                                const Tokenizer* tokenizer) {
  ServedModel served;
  served.tokenizer = tokenizer;
  LoadChatTemplate(config, model, tokenizer, &served);
  served.tool_calls = tool_calls::ResolveToolCallSupport(
      config.tool_call_parser, served.chat_template ? &*served.chat_template : nullptr,
      tokenizer);
  spdlog::info("tool calls: {} (the template {} tools)",
               tool_calls::SyntaxName(served.tool_calls.syntax),
               served.tool_calls.template_reads_tools ? "renders" : "does not render");
  served.vocab_size = model.config().vocab_size;
  served.context_length = model.config().max_seq_len;
  served.default_max_tokens = config.default_max_tokens;
  served.max_prompt_tokens = config.max_prompt_tokens;
  served.fim = FindFimTokens(tokenizer, model.gguf());
  served.model_file = std::filesystem::path(config.model_path).filename().string();
  return served;
}

// The service's limits and who may call it (bearer principals and their
// cache-sharing groups); a bad token file or group fails start-up.
GenerationService::Options ServiceOptions(const GatewayConfig& config) {
  GenerationService::Options options;
  options.model_name = ServedModelName(config);
  options.max_concurrent_streams = config.max_concurrent_streams;
  options.accept_any_model = config.accept_any_model;
  options.max_streams_per_principal = config.max_streams_per_principal;
  options.max_tokens_per_minute_per_principal = config.max_tokens_per_minute_per_principal;
  if (!config.auth_token_file.empty()) {
    absl::StatusOr<Principals> principals = Principals::Load(config.auth_token_file);
    if (!principals.ok()) throw std::invalid_argument(std::string(principals.status().message()));
    options.principals = *std::move(principals);
  }
  absl::StatusOr<CacheScopes> scopes = CacheScopes::Make(
      options.principals ? &*options.principals : nullptr, config.cache_share_groups);
  if (!scopes.ok()) throw std::invalid_argument(std::string(scopes.status().message()));
  options.cache_scopes = *std::move(scopes);
  return options;
}

// The internal plane's secret, "" when the deployment has none.
std::string ClusterSecretOf(const GatewayConfig& config) {
  if (config.cluster_secret_file.empty()) return std::string();
  absl::StatusOr<std::string> secret = ReadClusterSecret(config.cluster_secret_file);
  if (!secret.ok()) throw std::invalid_argument(std::string(secret.status().message()));
  return *std::move(secret);
}

// The requests' channel to the scheduler.
std::shared_ptr<grpc::Channel> SchedulerChannel(const GatewayConfig& config,
                                                const std::string& cluster_secret) {
  // Keepalive pings notice a scheduler that stopped answering (SIGSTOP, a
  // hung host) within about 3 s and fail its streams with UNAVAILABLE; a
  // dead one is noticed at once by its closed connection.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 2000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  return InternalChannel(config.scheduler_addr, cluster_secret, args);
}

// TLS when --tls-cert/--tls-key are given, plaintext otherwise.
std::shared_ptr<grpc::ServerCredentials> ServerCredentials(const GatewayConfig& config) {
  if (config.tls_cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({ReadWholeFile(config.tls_key, "--tls-key"),
                                    ReadWholeFile(config.tls_cert, "--tls-cert")});
  return grpc::SslServerCredentials(ssl);
}

}  // namespace

Gateway::Gateway(const GatewayConfig& config)
    : config_(config), metrics_(config.metrics_per_principal) {
  CheckConfig(config);
  // The gateway reads only the model's config and tokenizer (no weights).
  auto model = OpenModel(config.model_path);
  tokenizer_ = OpenTokenizerOrNone(config, *model);
  ServedModel served = DescribeServedModel(config, *model, tokenizer_.get());
  GenerationService::Options options = ServiceOptions(config);
  cluster_secret_ = ClusterSecretOf(config);
  service_ = std::make_unique<GenerationService>(
      std::move(served), SchedulerChannel(config, cluster_secret_), metrics_, options);
  StartGrpcServer();
  StartHttpApi();
  metrics_.Expose(config.host, config.metrics_port);
  WritePorts();
  LogServing(options);
  // Last, so that nothing after it can throw with the thread running.
  if (http_) StartReadinessProbe();
}

// The gRPC API with health and reflection; a port that cannot be bound
// fails start-up as a ListenError (common/listen_error.h).
void Gateway::StartGrpcServer() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  std::shared_ptr<grpc::ServerCredentials> creds = ServerCredentials(config_);
  grpc::ServerBuilder builder;
  // No SO_REUSEPORT: a second server on a taken port must fail to bind, not
  // share its connections (common/listen_error.h).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(config_.host + ":" + std::to_string(config_.port), creds, &port_);
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0)
    throw ListenError("gateway: cannot listen on " + config_.host + ":" +
                             std::to_string(config_.port));
  server_->GetHealthCheckService()->SetServingStatus(true);
  server_->GetHealthCheckService()->SetServingStatus(kServiceName, true);
}

// The OpenAI HTTP API, only when --http-port is given.
void Gateway::StartHttpApi() {
  if (config_.http_port < 0) return;
  openai::HttpServer::Options http;
  http.host = config_.host;
  http.port = config_.http_port;
  http.tls_cert = config_.tls_cert;
  http.tls_key = config_.tls_key;
  http.cors_origins = config_.cors_origins;
  http.scheduler_address = config_.scheduler_addr;
  http_ = std::make_unique<openai::HttpServer>(*service_, http);
}

// The port file tells launchers and tests which ports were picked.
void Gateway::WritePorts() {
  if (config_.port_file.empty()) return;
  nlohmann::json ports = {{"grpc", port_}, {"metrics", metrics_.port()}, {"pid", getpid()}};
  if (http_) ports["http"] = http_->port();
  WritePortFile(config_.port_file, ports);
}

// One line saying what is served where, and how it is protected.
void Gateway::LogServing(const GenerationService::Options& options) const {
  spdlog::info("gateway: serving {} on {}:{} (metrics :{}{}), scheduler {}, tokenizer {}{}{}",
               options.model_name, config_.host, port_, metrics_.port(),
               http_ ? absl::StrCat(", OpenAI HTTP :", http_->port()) : std::string(),
               config_.scheduler_addr,
               tokenizer_ ? "yes" : "none",
               options.principals ? absl::StrCat(", bearer auth (", options.principals->size(),
                                                 " principals, ", options.cache_scopes.groups(),
                                                 " cache share groups)")
                                  : std::string(),
               config_.tls_cert.empty() ? "" : ", TLS");
}

// Polls the scheduler so the HTTP API's /health and request sizing follow
// the pipeline (GenerationService::PollPipeline), and keeps its answer for
// the routers' metrics (services/scheduler_load.h).
void Gateway::StartReadinessProbe() {
  // Its own channel with its own connection (a local subchannel pool): a
  // probe that fails while the scheduler starts must not put the
  // requests' channel into reconnect backoff, which would fail the first
  // requests fast with "connection refused" after all is up.
  grpc::ChannelArguments probe_args;
  probe_args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Reconnect within a probe period once the scheduler listens.
  probe_args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  probe_args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  probe_args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto probe = internal::Scheduler::NewStub(
      InternalChannel(config_.scheduler_addr, cluster_secret_, probe_args));
  readiness_ = std::thread([this, probe = std::shared_ptr<internal::Scheduler::Stub>(std::move(probe))] {
    std::unique_lock<std::mutex> lock(readiness_mu_);
    while (!stopping_) {
      lock.unlock();
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
      internal::SchedulerStats stats;
      bool ready = probe->GetStats(&ctx, internal::StatsRequest(), &stats).ok();
      if (ready) service_->scheduler_load().Update(stats);
      else service_->scheduler_load().Clear();
      // No per-stage list means the scheduler does not report stages.
      for (bool up : stats.stage_up()) ready = ready && up;
      // Every stage answering is not yet a pipeline: the scheduler learns
      // the KV capacity when it brings the stages up, a moment later.
      // Until then an omitted max_tokens would be sized to the model's
      // context and refused (seen once in five runs of the suite).
      if (stats.stage_up_size() > 0 && stats.kv_capacity_tokens() <= 0) ready = false;
      // The capacity first: once ready, requests are sized against it
      // (an omitted max_tokens fills what fits), so none may see "ready"
      // with the capacity still unknown.
      if (stats.kv_capacity_tokens() > 0) service_->set_kv_capacity_tokens(stats.kv_capacity_tokens());
      service_->set_pipeline_ready(ready);
      lock.lock();
      readiness_cv_.wait_for(lock, std::chrono::milliseconds(250), [&] { return stopping_; });
    }
  });
}

Gateway::~Gateway() { StopReadiness(); }

void Gateway::StopReadiness() {
  {
    std::lock_guard<std::mutex> lock(readiness_mu_);
    stopping_ = true;
  }
  readiness_cv_.notify_all();
  if (readiness_.joinable()) readiness_.join();
}

void Gateway::Drain() {
  // Health first, so load balancers stop sending before we start refusing.
  server_->GetHealthCheckService()->SetServingStatus(false);
  server_->GetHealthCheckService()->SetServingStatus(kServiceName, false);
  service_->StartDrain();
  const int open = service_->active().size();
  spdlog::info("gateway: draining, {} open streams, up to {} ms", open, config_.drain_timeout_ms);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.drain_timeout_ms);
  if (!service_->active().WaitEmpty(deadline)) {
    spdlog::warn("gateway: drain timeout; cancelling {} streams", service_->active().size());
  }
  // Anything still open is cancelled now (its scheduler call with it): the
  // HTTP API's calls are not children of a gRPC server call, so cancel them
  // here and let their ends reach the clients before the HTTP server stops.
  service_->active().CancelAll();
  service_->active().WaitEmpty(std::chrono::steady_clock::now() + std::chrono::seconds(2));
  if (http_) http_->Stop();
  StopReadiness();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
  spdlog::info("gateway: stopped");
}

void Gateway::Wait() { server_->Wait(); }

}  // namespace specline
