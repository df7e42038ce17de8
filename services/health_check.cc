#include "services/health_check.h"

#include <grpcpp/client_context.h>
#include <grpcpp/completion_queue.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>

namespace specline {
namespace {

// HealthCheckRequest { string service = 1; }
std::string EncodeRequest(const std::string& service) {
  if (service.empty()) return {};
  std::string out(1, '\x0a');  // field 1, length-delimited
  size_t n = service.size();
  while (n >= 0x80) {
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
  return out + service;
}

// HealthCheckResponse { ServingStatus status = 1; } -- a varint field.
HealthState DecodeResponse(const std::string& bytes) {
  for (size_t i = 0; i + 1 < bytes.size(); ++i) {
    if (bytes[i] == '\x08') return static_cast<HealthState>(bytes[i + 1] & 0x7f);
  }
  return HealthState::kUnknown;  // status 0 is omitted on the wire
}

}  // namespace

grpc::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& service,
                         std::chrono::milliseconds timeout, HealthState* state) {
  *state = HealthState::kUnknown;
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  const std::string req = EncodeRequest(service);
  grpc::Slice slice(req);
  grpc::ByteBuffer request(&slice, 1);
  grpc::CompletionQueue cq;
  auto call = stub.PrepareUnaryCall(&ctx, "/grpc.health.v1.Health/Check", request, &cq);
  call->StartCall();
  grpc::ByteBuffer response;
  grpc::Status status;
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  if (!status.ok()) return status;
  std::vector<grpc::Slice> slices;
  response.Dump(&slices);
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  *state = DecodeResponse(bytes);
  return status;
}

}  // namespace specline
