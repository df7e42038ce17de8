#include "stage_worker/stage_service.h"

#include <algorithm>

#include "common/cluster_secret.h"
#include "spdlog/spdlog.h"

namespace specline {

StageServiceImpl::StageServiceImpl(std::vector<StageRunner*> runners, std::string data_address,
                                   std::string next_address, HostedModels hosted)
    : runners_(std::move(runners)),
      data_address_(std::move(data_address)),
      next_address_(std::move(next_address)),
      hosted_(std::move(hosted)) {}

grpc::Status StageServiceImpl::GetInfo(grpc::ServerContext* ctx, const internal::StageInfoRequest*,
                                       internal::StageInfo* info) {
  if (grpc::Status st = CheckClusterSecret(*ctx, cluster_secret_); !st.ok()) return st;
  StageRunner& first = *runners_.front();
  const ModelConfig& config = first.slice().config();
  info->set_stage(first.stage());
  info->set_layer_begin(first.slice().begin());
  info->set_layer_end(runners_.back()->slice().end());
  info->set_n_layers(config.n_layers);
  info->set_dim(config.dim);
  bool any = false;
  for (StageRunner* r : runners_) {
    StageStats s = r->Stats();
    if (!any) {
      info->set_kv_capacity_tokens(s.kv_capacity_tokens);
      info->set_kv_free_tokens(s.kv_free_tokens);
      info->set_sequences(s.sequences);
      info->set_kv_block_size(s.kv_block_size);
      any = true;
    }
    info->set_kv_capacity_tokens(std::min(info->kv_capacity_tokens(), s.kv_capacity_tokens));
    info->set_kv_free_tokens(std::min(info->kv_free_tokens(), s.kv_free_tokens));
    info->set_sequences(std::max(info->sequences(), s.sequences));
    info->set_kv_cached_tokens(std::max(info->kv_cached_tokens(), s.kv_cached_tokens));
  }
  info->set_batches(first.batches());
  info->set_data_address(data_address_);
  info->set_next_address(next_address_);
  for (const auto& w : hosted_.weight_sets) *info->add_weight_sets() = w;
  for (const auto& a : hosted_.adapters) *info->add_adapters() = a;
  return grpc::Status::OK;
}

grpc::Status StageServiceImpl::Reset(grpc::ServerContext* ctx, const internal::ResetRequest* request,
                                     internal::ResetResponse*) {
  if (grpc::Status st = CheckClusterSecret(*ctx, cluster_secret_); !st.ok()) {
    spdlog::warn("stage {}: refused a Reset without the cluster secret from {}",
                 runners_.front()->stage(), ctx->peer());
    return st;
  }
  for (StageRunner* r : runners_) r->Reset(request->report_address());
  spdlog::info("stage {}: reset, every sequence released", runners_.front()->stage());
  return grpc::Status::OK;
}

}  // namespace specline
