#include "common/cluster_secret.h"

#include <sys/random.h>

#include <fstream>
#include <sstream>

#include <grpcpp/create_channel.h>
#include <grpcpp/support/client_interceptor.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace specline {
namespace {

// Adds the secret to the initial metadata of every call on the channel.
class SecretInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit SecretInterceptor(std::string secret) : secret_(std::move(secret)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->insert({kClusterSecretMetadata, secret_});
    }
    methods->Proceed();
  }

 private:
  const std::string secret_;
};

class SecretInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit SecretInterceptorFactory(std::string secret) : secret_(std::move(secret)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new SecretInterceptor(secret_);
  }

 private:
  const std::string secret_;
};

}  // namespace

absl::StatusOr<std::string> ReadClusterSecret(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--cluster-secret-file: cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  s.erase(s.find_last_not_of(" \t\r\n") + 1);
  if (s.size() < kMinClusterSecretBytes) {
    return absl::InvalidArgumentError(absl::StrCat("--cluster-secret-file: ", path, " holds ",
                                                   s.size(), " bytes; a secret needs at least ",
                                                   kMinClusterSecretBytes));
  }
  return s;
}

std::string RandomHex(size_t bytes) {
  std::string raw(bytes, '\0');
  size_t got = 0;
  while (got < bytes) {
    const ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(raw);
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ (i < b.size() ? b[i] : 0));
  }
  return diff == 0;
}

grpc::Status CheckClusterSecret(const grpc::ServerContext& ctx, const std::string& secret) {
  if (secret.empty()) return grpc::Status::OK;
  const auto& md = ctx.client_metadata();
  auto it = md.find(kClusterSecretMetadata);
  if (it == md.end() ||
      !ConstantTimeEquals(std::string_view(it->second.data(), it->second.size()), secret)) {
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        "internal API: missing or wrong cluster secret (--cluster-secret-file)");
  }
  return grpc::Status::OK;
}

std::shared_ptr<grpc::Channel> InternalChannel(const std::string& target,
                                               const std::string& secret,
                                               const grpc::ChannelArguments& args) {
  if (secret.empty()) {
    return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
  }
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> factories;
  factories.push_back(std::make_unique<SecretInterceptorFactory>(secret));
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      target, grpc::InsecureChannelCredentials(), args, std::move(factories));
}

}  // namespace specline
