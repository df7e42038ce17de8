// The Scheduler gRPC service (specline/internal/scheduler.proto) over an
// Engine: the gateway submits tokenized requests here and relays the
// streamed tokens.
#pragma once

#include <optional>

#include <grpcpp/grpcpp.h>

#include "scheduler/engine.h"
#include "scheduler/request_convert.h"
#include "scheduler/response_formats.h"
#include "specline/internal/scheduler.grpc.pb.h"

namespace specline::scheduler {

grpc::Status ToGrpc(const absl::Status& s);

class SchedulerService final : public internal::Scheduler::Service {
 public:
  // Calls without `cluster_secret` are refused ("" = open; docs/security.md).
  // `formats` compiles structured output's grammars (null: requests with a
  // response format are refused).
  explicit SchedulerService(Engine& engine, std::string cluster_secret = "",
                            ResponseFormats* formats = nullptr)
      : engine_(engine), cluster_secret_(std::move(cluster_secret)), formats_(formats) {}

  // GetStats reports where the KV events are published (set before serving).
  void set_kv_events(internal::KvEventsSource source) { kv_events_ = std::move(source); }

  // Streams one event per produced token; the last carries finish_reason.
  // Checks for client cancellation every few milliseconds and aborts the
  // sequence (freeing its KV) as soon as it sees one.
  grpc::Status Submit(grpc::ServerContext* ctx, const internal::SubmitRequest* req,
                      grpc::ServerWriter<internal::SubmitEvent>* writer) override;
  grpc::Status GetStats(grpc::ServerContext* ctx, const internal::StatsRequest* req,
                        internal::SchedulerStats* out) override;
  grpc::Status GetModel(grpc::ServerContext* ctx, const internal::ModelRequest* req,
                        internal::ModelSummary* out) override;

 private:
  Engine& engine_;
  const std::string cluster_secret_;
  ResponseFormats* formats_;
  std::optional<internal::KvEventsSource> kv_events_;
};

}  // namespace specline::scheduler
