#include "cli/stream_client.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include <grpcpp/client_context.h>

#include "common/client_util.h"
#include "proto/policy_names.h"

namespace specline::cli {
namespace {

using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace

StreamResult StreamGenerate(const std::shared_ptr<grpc::Channel>& channel,
                            const v1::GenerateRequest& request, const StreamOptions& options,
                            const std::function<void(const std::string&)>& on_text) {
  StreamResult r;
  auto stub = v1::Generation::NewStub(channel);
  grpc::ClientContext ctx;
  if (!options.bearer_token.empty())
    ctx.AddMetadata("authorization", "Bearer " + options.bearer_token);
  if (options.timeout_seconds > 0)
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::microseconds(static_cast<int64_t>(options.timeout_seconds * 1e6)));
  const Clock::time_point t0 = Clock::now();
  Clock::time_point last{};
  auto reader = stub->Generate(&ctx, request);
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    const Clock::time_point now = Clock::now();
    const int k = msg.token_ids_size();
    if (k > 0) {
      if (r.tokens.empty()) {
        r.ttft = std::chrono::duration<double>(now - t0).count();
      } else {
        const double gap = std::chrono::duration<double>(now - last).count() / k;
        r.itl.insert(r.itl.end(), k, gap);
      }
      last = now;
      r.tokens.insert(r.tokens.end(), msg.token_ids().begin(), msg.token_ids().end());
    }
    if (!msg.text().empty()) {
      r.text += msg.text();
      if (on_text) on_text(msg.text());
    }
    if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
      r.finish_reason = msg.finish_reason();
      r.usage = msg.usage();
      r.server_timings = msg.timings();
      r.policy = msg.policy();
      r.spec_decode = msg.spec_decode();
    }
  }
  r.status = reader->Finish();
  r.e2e = std::chrono::duration<double>(Clock::now() - t0).count();
  if (r.tokens.size() > 1) r.tpot = (r.e2e - r.ttft) / static_cast<double>(r.tokens.size() - 1);
  return r;
}

std::string FormatStats(const StreamResult& r) {
  char buf[512];
  const size_t n = r.tokens.size();
  std::snprintf(buf, sizeof buf,
                "%zu tokens (finish: %s); TTFT %.1f ms, TPOT %.2f ms, ITL p50 %.2f ms p99 %.2f ms, "
                "%.1f tok/s decode, e2e %.1f ms (server: queue %.2f ms, TTFT %.1f ms)",
                n, FinishReasonName(r.finish_reason), r.ttft * 1e3, r.tpot * 1e3,
                Percentile(r.itl, 0.5) * 1e3, Percentile(r.itl, 0.99) * 1e3,
                r.tpot > 0 ? 1.0 / r.tpot : 0.0, r.e2e * 1e3, r.server_timings.queue_seconds() * 1e3,
                r.server_timings.ttft_seconds() * 1e3);
  std::string out = buf;
  const v1::SpecDecodeStats& s = r.spec_decode;
  if (s.num_draft_tokens() > 0) {
    std::snprintf(buf, sizeof buf,
                  "; %s: %lld/%lld drafts accepted, %lld flushes, L'acc %.2f",
                  PolicyShortName(r.policy),
                  static_cast<long long>(s.num_accepted_tokens()),
                  static_cast<long long>(s.num_draft_tokens()),
                  static_cast<long long>(s.num_flushes()), s.equivalent_acceptance_length());
    out += buf;
    if (s.num_drafts() > 0) {
      std::snprintf(buf, sizeof buf, ", %.2f tokens per verification",
                    s.mean_accepted_length());
      out += buf;
    }
  }
  if (r.policy == v1::DECODING_POLICY_PIPO) out += " (not lossless)";
  return out;
}

}  // namespace specline::cli
