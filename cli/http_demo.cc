#include "cli/http_demo.h"

#include <cstdio>
#include <stdexcept>

#include "loadtest/openai_client.h"
#include "loadtest/stats.h"

namespace specline::cli {

int StreamDemoOverHttp(int port, const v1::GenerateRequest& request, const std::string& label) {
  if (!request.has_text())
    throw std::invalid_argument("--demo-prompt through the router takes a text prompt (not --chat or --prompt-ids)");
  loadtest::OpenAiTarget target;
  target.port = port;
  target.on_text = [](const std::string& text) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  };
  loadtest::ClientOptions options;
  const v1::SamplingParams& s = request.sampling();
  options.request.temperature = s.temperature();
  if (s.top_p() > 0 && s.top_p() < 1) options.request.top_p = s.top_p();
  if (s.top_k() > 0) options.request.top_k = s.top_k();
  if (s.has_seed()) options.request.seed = s.seed();
  options.request.policy = request.policy();
  loadtest::WorkItem item;
  item.text = request.text();
  item.max_tokens = static_cast<int>(request.max_tokens());
  item.ignore_eos = request.ignore_eos();

  std::fputs(request.text().c_str(), stdout);
  const loadtest::RequestRecord r =
      loadtest::OpenAiSender(target, options)(0, item, loadtest::Clock::now());
  std::fputs("\n", stdout);
  std::fflush(stdout);
  if (!r.ok) {
    std::fprintf(stderr, "demo generation failed: %s %s\n", r.status_code.c_str(), r.error.c_str());
    return 1;
  }
  std::fprintf(stderr,
               "[%s] %d tokens (finish: %s); TTFT %.1f ms, TPOT %.2f ms, ITL p50 %.2f ms p99 %.2f ms, "
               "%.1f tok/s decode, e2e %.1f ms\n",
               label.c_str(), r.output_tokens, r.finish_reason.c_str(), r.ttft * 1e3, r.tpot * 1e3,
               loadtest::Percentile(r.itl, 0.5) * 1e3, loadtest::Percentile(r.itl, 0.99) * 1e3,
               r.tpot > 0 ? 1.0 / r.tpot : 0.0, r.e2e * 1e3);
  return 0;
}

}  // namespace specline::cli
