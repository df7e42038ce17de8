// `specline client`: streams one generation from a running gateway to
// stdout and prints client-side TTFT, TPOT, ITL and tokens/s to stderr.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "cli/args.h"
#include "common/client_util.h"
#include "cli/commands.h"
#include "cli/request_flags.h"
#include "cli/stream_client.h"

namespace specline::cli {
namespace {

const char kClientUsage[] = R"(usage: specline client --addr HOST:PORT --prompt TEXT [options]
  --addr HOST:PORT       the gateway (default 127.0.0.1:50051)
  --prompt TEXT          prompt text
  --token FILE           bearer token file (for a gateway with --auth-token-file)
  --tls-ca FILE          use TLS, trusting this PEM root certificate
  --timeout-ms N         deadline for the whole stream (default: none)
  --print-token-ids      also print the generated token ids ("token ids: 1,2,3") and the
                         usage ("usage: prompt P, completion C, cached K") to stderr
)";

}  // namespace

int ClientCommand(int argc, char** argv) {
  std::vector<std::string> options = kRequestOptions;
  options.insert(options.end(), {"addr", "prompt", "token", "tls-ca", "timeout-ms"});
  std::vector<std::string> flags = kRequestFlags;
  flags.insert(flags.end(), {"help", "print-token-ids"});
  Args args(argc, argv, 2, options, flags);
  if (args.Has("help")) {
    std::cout << kClientUsage << kRequestUsage;
    return 0;
  }
  if (!args.Has("prompt") && !args.Has("prompt-ids")) {
    std::cerr << "specline client: --prompt or --prompt-ids is required\n" << kClientUsage;
    return 2;
  }
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (args.Has("tls-ca")) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadTrimmedFile(args.Str("tls-ca")) + "\n";
    creds = grpc::SslCredentials(ssl);
  }
  auto channel = grpc::CreateChannel(args.Str("addr", "127.0.0.1:50051"), creds);
  StreamOptions so;
  if (args.Has("token")) so.bearer_token = ReadTrimmedFile(args.Str("token"));
  so.timeout_seconds = args.Int("timeout-ms", 0) / 1e3;
  const v1::GenerateRequest req = RequestFromArgs(args, "prompt");
  // A plain completion continues the prompt: show it first.
  if (req.has_text()) std::fputs(req.text().c_str(), stdout);
  StreamResult r = StreamGenerate(channel, req, so, [](const std::string& text) {
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
  });
  std::fputs("\n", stdout);
  std::fflush(stdout);
  if (!r.status.ok()) {
    std::cerr << "generation failed: " << r.status.error_code() << " "
              << r.status.error_message() << "\n";
    return 1;
  }
  std::cerr << FormatStats(r) << "\n";
  if (args.Has("print-token-ids")) {
    std::cerr << "token ids: ";
    for (size_t i = 0; i < r.tokens.size(); ++i) std::cerr << (i ? "," : "") << r.tokens[i];
    std::cerr << "\nusage: prompt " << r.usage.prompt_tokens() << ", completion "
              << r.usage.completion_tokens() << ", cached " << r.usage.cached_tokens() << "\n";
  }
  return 0;
}

}  // namespace specline::cli
