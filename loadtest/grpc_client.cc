#include "loadtest/grpc_client.h"

#include <grpcpp/client_context.h>

#include "common/client_util.h"
#include "proto/policy_names.h"
#include "specline/v1/generation.grpc.pb.h"

namespace specline::loadtest {

SendFn GrpcSender(std::shared_ptr<grpc::Channel> channel, ClientOptions options) {
  auto stub = std::shared_ptr<v1::Generation::Stub>(v1::Generation::NewStub(channel));
  return [stub, channel, options](int index, const WorkItem& item, Clock::time_point run_start) {
    const v1::GenerateRequest req =
        BuildRequest(item, options.request, options.id_prefix + "-" + std::to_string(index));
    RequestRecord r;
    grpc::ClientContext ctx;
    if (!options.bearer_token.empty()) ctx.AddMetadata("authorization", "Bearer " + options.bearer_token);
    if (options.timeout > 0)
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::microseconds(static_cast<int64_t>(options.timeout * 1e6)));
    const Clock::time_point t0 = Clock::now();
    r.start = Seconds(run_start, t0);
    Clock::time_point last{};
    auto reader = stub->Generate(&ctx, req);
    v1::GenerateResponse msg;
    while (reader->Read(&msg)) {
      const int k = msg.token_ids_size();
      if (k > 0) RecordMessage(r, t0, run_start, Clock::now(), k, &last);
      if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        r.finish_reason = FinishReasonName(msg.finish_reason());
        r.prompt_tokens = msg.usage().prompt_tokens();
        r.policy = PolicyShortName(msg.policy());
        const v1::SpecDecodeStats& s = msg.spec_decode();
        r.num_drafts = s.num_drafts();
        r.num_draft_tokens = s.num_draft_tokens();
        r.num_accepted_tokens = s.num_accepted_tokens();
        r.num_flushes = s.num_flushes();
        r.num_discarded_tokens = s.num_discarded_tokens();
        r.pipeline_cycles = s.pipeline_cycles();
        r.accepted_per_pos.assign(s.num_accepted_tokens_per_pos().begin(),
                                  s.num_accepted_tokens_per_pos().end());
      }
    }
    const grpc::Status status = reader->Finish();
    FinishRecord(r, t0, run_start, Clock::now());
    r.ok = status.ok();
    r.status_code = StatusCodeName(status.error_code());
    r.error = status.error_message();
    return r;
  };
}

}  // namespace specline::loadtest
