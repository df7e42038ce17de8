#include "stage_worker/stage_process.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/listen_error.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/server_builder.h"
#include "kernels/cpu/thread_pool.h"
#include "stage_worker/slice_factory.h"
#include "spdlog/spdlog.h"

namespace specline {

size_t LargestBatchBytes(const ModelConfig& config, int64_t kv_capacity_tokens) {
  // Every slot of a batch takes a KV position, so a batch holds at most
  // kv_capacity_tokens slots. Each brings its hidden row and, at most, a tap
  // row per layer of the model, plus its ids (a generous 64 bytes); 1 MiB
  // more covers the message's own fields.
  const size_t slots = static_cast<size_t>(std::max<int64_t>(kv_capacity_tokens, 1));
  const size_t per_slot = 64 + size_t{4} * config.dim * (1 + static_cast<size_t>(config.n_layers));
  const size_t bytes = (size_t{1} << 20) + slots * per_slot;
  return std::min(bytes, transport::kMaxFrameBytes);
}

absl::StatusOr<std::unique_ptr<StageProcess>> StageProcess::Start(const StageFlags& flags) {
  std::unique_ptr<StageProcess> p(new StageProcess);
  p->flags_ = flags;
  p->model_ = OpenModel(flags.model);
  const ModelConfig& config = p->model_->config();
  if (flags.layers.back().second > config.n_layers) {
    return absl::InvalidArgumentError(absl::StrCat("--layers: the model has ", config.n_layers,
                                                   " layers, asked for up to ",
                                                   flags.layers.back().second));
  }
  if ((flags.stage == 0) != (flags.layers.front().first == 0)) {
    return absl::InvalidArgumentError(
        "--stage 0 must hold layer 0 (it embeds the tokens), and only stage 0");
  }

  absl::StatusOr<DeviceConfig> device = ParseDeviceSpec(flags.device, flags.dtype);
  if (!device.ok()) return device.status();
  device->cuda_graphs = flags.cuda_graphs;
  // One pool for every CPU slice of the process: their calls are serialized
  // anyway, and stages of one process share its cores. GPU slices each get
  // their own stream, so co-located stages overlap on the device.
  auto pool = std::make_shared<kernels::ThreadPool>(device->cuda ? 1 : flags.threads);
  SliceOptions options;
  options.kv_block_size = flags.kv_block_size;
  options.kv_capacity_tokens = flags.kv_capacity_tokens;
  // Add-ons are checked against the model now: a wrong head stops the
  // stage at start-up, not a request later.
  absl::StatusOr<LoadedAddOns> addons = LoadAddOns(flags.adapters, flags.weight_sets, config);
  if (!addons.ok()) return addons.status();
  options.adapters = addons->adapters;
  p->weight_set_models_ = std::move(addons->weight_sets);
  HostedModels hosted = std::move(addons->info);
  const int n = static_cast<int>(flags.layers.size());
  for (int i = 0; i < n; ++i) {
    const auto [begin, end] = flags.layers[i];
    auto slice = MakeSlice(*p->model_, begin, end, options, *device, flags.stage + i, pool);
    if (!slice.ok()) return slice.status();
    p->slices_.push_back(*std::move(slice));
    // Each weight set runs the same layers with its own KV cache; adapters
    // apply to the base weights only.
    std::vector<StageRunner::WeightSet> weight_sets;
    for (size_t k = 0; k < p->weight_set_models_.size(); ++k) {
      SliceOptions set_options = options;
      set_options.adapters.clear();
      set_options.hidden_input = hosted.weight_sets[k].hidden_input();
      auto set_slice = MakeSlice(*p->weight_set_models_[k], begin, end, set_options, *device,
                                 flags.stage + i, pool);
      if (!set_slice.ok()) return set_slice.status();
      p->weight_set_slices_.push_back(*std::move(set_slice));
      weight_sets.push_back({p->weight_set_slices_.back().get(), set_options.hidden_input});
    }
    p->runners_.push_back(std::make_unique<StageRunner>(
        *p->slices_.back(), flags.stage + i, end == config.n_layers, std::move(weight_sets)));
    spdlog::info("stage {}: layers {}:{} of {} on {}, KV {} positions, {} weight set(s), {} "
                 "adapter(s)",
                 flags.stage + i, begin, end, config.n_layers, p->slices_.back()->device(),
                 flags.kv_capacity_tokens, 1 + p->weight_set_models_.size(),
                 options.adapters.size());
  }

  // Inboxes: the first on the data address, the rest in-process. Named by
  // pid so two processes' tests in one address space cannot collide.
  // The data plane outside the process: authenticated with the cluster
  // secret, and frames bounded by the largest micro-batch this stage can be
  // sent (LargestBatchBytes), so no peer makes it allocate more.
  transport::TransportOptions data_plane;
  data_plane.secret = flags.cluster_secret;
  data_plane.max_frame_bytes = LargestBatchBytes(config, flags.kv_capacity_tokens);
  for (auto& r : p->runners_) r->set_data_plane(data_plane);
  std::vector<std::unique_ptr<transport::ActivationReceiver>> inboxes;
  for (int i = 0; i < n; ++i) {
    std::string address = i == 0 ? flags.data_listen
                                 : absl::StrCat("inproc://stage-", getpid(), "-", flags.stage + i,
                                                "-", reinterpret_cast<uintptr_t>(p.get()));
    auto inbox = transport::Listen(address, data_plane);  // inproc:// ignores the options
    if (!inbox.ok()) return inbox.status();
    inboxes.push_back(std::move(*inbox));
  }
  // Behind a Service or NAT the listen address (0.0.0.0:P) is not what peers
  // dial; --data-advertise says what is.
  p->data_address_ = flags.data_advertise.empty() ? inboxes.front()->address() : flags.data_advertise;

  if (flags.metrics_port >= 0) {
    p->metrics_ = std::make_unique<StageMetrics>();
    for (auto& r : p->runners_) p->metrics_->Attach(*r);
    try {
      p->metrics_port_ = p->metrics_->Serve(flags.host, flags.metrics_port);
    } catch (const std::exception& e) {
      return CannotListenError(absl::StrCat("cannot serve /metrics on ", flags.host, ":",
                                                 flags.metrics_port, ": ", e.what()));
    }
  }

  std::vector<StageRunner*> runners;
  for (auto& r : p->runners_) runners.push_back(r.get());
  p->service_ = std::make_unique<StageServiceImpl>(runners, p->data_address_, flags.next,
                                                   std::move(hosted));
  p->service_->set_cluster_secret(flags.cluster_secret);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  // No SO_REUSEPORT: a second server on a taken port must fail to bind, not
  // share its connections (common/listen_error.h).
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  const std::string grpc_address = absl::StrCat(
      flags.host.find(':') != std::string::npos ? "[" + flags.host + "]" : flags.host, ":",
      flags.grpc_port);
  builder.AddListeningPort(grpc_address, grpc::InsecureServerCredentials(), &p->grpc_port_);
  builder.RegisterService(p->service_.get());
  p->server_ = builder.BuildAndStart();
  if (!p->server_ || p->grpc_port_ == 0) {
    return CannotListenError("cannot serve gRPC on " + grpc_address);
  }

  // Start last to first, so no stage sends into a chain that is not up.
  std::vector<std::string> targets;
  for (int i = 1; i < n; ++i) targets.push_back(inboxes[i]->address());
  targets.push_back(flags.next);
  for (int i = n - 1; i >= 0; --i) {
    auto out = transport::Connect(targets[i], data_plane);
    if (!out.ok()) return out.status();
    p->runners_[i]->Start(std::move(inboxes[i]), std::move(*out));
  }
  spdlog::info("stage {}: data {}, next {}, grpc port {}, metrics port {}", flags.stage,
               p->data_address_, flags.next, p->grpc_port_, p->metrics_port_);
  return p;
}

StageProcess::~StageProcess() { Stop(); }

nlohmann::json StageProcess::PortInfo() const {
  return {{"grpc", grpc_port_}, {"data", data_address_}, {"metrics", metrics_port_},
          {"pid", static_cast<int>(getpid())}};
}

void StageProcess::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  for (auto& r : runners_) r->Stop();
}


}  // namespace specline
