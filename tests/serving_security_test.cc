// The gateway's optional bearer-token auth and TLS, end to end through
// `specline serve`: a request without the token is UNAUTHENTICATED, one with
// it streams; over TLS a client trusting the server's certificate streams
// and a plaintext client cannot connect.
#include <cstdlib>
#include <fstream>

#include "model/formats/random_model.h"
#include "tests/serving_stack.h"

namespace specline::testing {
namespace {

std::string TinyModel() {
  return WriteServingModel(LlamaShape(32, 64, 2, 4, 2, 128, 128), "tiny", /*seed=*/5);
}

v1::GenerateRequest TokenRequest() {
  v1::GenerateRequest req;
  for (int id : {1, 5, 9, 13}) req.mutable_token_ids()->add_ids(id);
  req.set_max_tokens(6);
  return req;
}

// Streams with an optional bearer token on the call.
Streamed StreamWithToken(const std::shared_ptr<grpc::Channel>& channel, const std::string& token) {
  auto stub = v1::Generation::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  Streamed out;
  auto reader = stub->Generate(&ctx, TokenRequest());
  v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    out.tokens.insert(out.tokens.end(), msg.token_ids().begin(), msg.token_ids().end());
    if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) out.finish = msg.finish_reason();
  }
  out.status = reader->Finish();
  return out;
}

TEST(ServingSecurity, BearerTokenIsRequired) {
  const std::string token_file = TempDir() + "/token";
  std::ofstream(token_file) << "s3cret-token\n";
  auto stack = StartStack(TinyModel(), 2, {"--auth-token-file", token_file});

  Streamed none = StreamWithToken(stack->channel(), "");
  EXPECT_EQ(none.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(none.tokens.empty());
  Streamed wrong = StreamWithToken(stack->channel(), "guess");
  EXPECT_EQ(wrong.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);

  Streamed ok = StreamWithToken(stack->channel(), "s3cret-token");
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.tokens.size(), 6u);
  EXPECT_EQ(ok.finish, v1::FINISH_REASON_LENGTH);
}

TEST(ServingSecurity, TlsServesTrustingClientsOnly) {
  const std::string dir = TempDir();
  if (!MakeTestCertificate(dir)) GTEST_SKIP() << "openssl is not available to make a test certificate";
  auto stack = StartStack(TinyModel(), 1,
                          {"--tls-cert", dir + "/cert.pem", "--tls-key", dir + "/key.pem"});

  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadFile(dir + "/cert.pem");
  auto tls = grpc::CreateChannel(stack->gateway(), grpc::SslCredentials(ssl));
  Streamed ok = StreamWithToken(tls, "");
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.tokens.size(), 6u);

  Streamed plain = StreamWithToken(stack->channel(), "");
  EXPECT_EQ(plain.status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

}  // namespace
}  // namespace specline::testing
