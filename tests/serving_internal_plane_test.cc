// Attacks on a running deployment (`specline serve`, each role its own
// process on loopback), as issue 14 tried them: the internal plane refuses
// callers without the cluster secret (scheduler Submit, stage Reset and
// GetInfo, micro-batch injection on the data plane), an oversized frame
// header or garbage bytes, before the handshake or after it, cost the stage
// no memory, one principal cannot
// abort another's request, server-made ids are unguessable, malformed
// requests get INVALID_ARGUMENT naming the problem, and public responses
// carry no file path. After every attack the service still serves.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include <grpcpp/generic/generic_stub.h>

#include "absl/strings/escaping.h"
#include "common/cluster_secret.h"
#include "model/formats/random_model.h"
#include "specline/internal/stage.grpc.pb.h"
#include "tests/serving_stack.h"
#include "transport/data_plane_auth.h"
#include "transport/tcp_socket.h"
#include "transport/transport.h"

namespace specline::testing {
namespace {

std::string SlowModel() { return SlowServingModel(4096, /*seed=*/21); }

v1::GenerateRequest Request(int max_tokens, const std::string& id = "") {
  v1::GenerateRequest req;
  for (int t : {1, 5, 9, 13}) req.mutable_token_ids()->add_ids(t);
  req.set_max_tokens(max_tokens);
  req.set_ignore_eos(true);
  req.set_request_id(id);
  return req;
}

bool ServesOneRequest(const ServingStack& s, const std::string& token = "") {
  auto stub = v1::Generation::NewStub(s.channel());
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 60s);
  if (!token.empty()) ctx.AddMetadata("authorization", "Bearer " + token);
  auto reader = stub->Generate(&ctx, Request(3));
  v1::GenerateResponse msg;
  int tokens = 0;
  while (reader->Read(&msg)) tokens += msg.token_ids_size();
  return reader->Finish().ok() && tokens == 3;
}

long RssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// A TCP connection to 127.0.0.1:port that writes `bytes` and then waits for
// the peer to close it (or 5 s); true when the peer closed it.
bool WriteAndExpectClose(int port, const std::string& bytes);

// Writes `bytes` on the connected `fd`, waits for the peer to close it (or
// 5 s) and closes it; true when the peer closed it.
bool WriteOnAndExpectClose(int fd, const std::string& bytes) {
  if (fd < 0) return false;
  (void)!send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[256];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) {
  }
  close(fd);
  return n == 0 || (n < 0 && errno == ECONNRESET);
}

bool WriteAndExpectClose(int port, const std::string& bytes) {
  return WriteOnAndExpectClose(ConnectLoopback(port), bytes);
}

// A data-plane connection to 127.0.0.1:port that completed the handshake
// with the deployment's secret, as a stage upstream holds one: whatever it
// sends next is read as frames. -1 if the handshake failed. `frame_limit`:
// the largest frame the receiver said it takes.
int AuthenticatedDataConnection(int port, const std::string& secret, size_t* frame_limit = nullptr) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) return -1;
  transport::TransportOptions o;
  o.secret = secret;
  auto limit = transport::ConnectHandshake(fd, transport::WireProtocol::kTcp, o,
                                           "tcp://127.0.0.1:" + std::to_string(port));
  if (!limit.ok()) {
    ADD_FAILURE() << limit.status();
    close(fd);
    return -1;
  }
  if (frame_limit) *frame_limit = *limit;
  return fd;
}

// Bytes the peer of our loopback connection `fd` has received but not yet
// read (its socket's rx_queue in /proc/net/tcp); -1 if not found.
long UnreadBytes(int fd) {
  sockaddr_in self{}, peer{};
  socklen_t len = sizeof self;
  getsockname(fd, reinterpret_cast<sockaddr*>(&self), &len);
  len = sizeof peer;
  getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len);
  // The peer's socket: local = our peer's port, remote = our port.
  char want_local[16], want_remote[16];
  std::snprintf(want_local, sizeof want_local, ":%04X", ntohs(peer.sin_port));
  std::snprintf(want_remote, sizeof want_remote, ":%04X", ntohs(self.sin_port));
  // A stage listening on [::] holds the connection as ::ffff:127.0.0.1,
  // in tcp6.
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues;
      f >> slot >> local >> remote >> state >> queues;
      if (local.ends_with(want_local) && remote.ends_with(want_remote)) {
        return std::stol(queues.substr(queues.find(':') + 1), nullptr, 16);
      }
    }
  }
  return -1;
}

// A tcp:// frame header announcing `length` bytes.
std::string FrameHeader(uint32_t length, uint32_t magic = transport::kFrameMagic) {
  unsigned char header[transport::kFrameHeaderBytes];
  transport::EncodeFrameHeader(length, header, magic);
  return std::string(reinterpret_cast<const char*>(header), sizeof header);
}

int PortOf(const std::string& tcp_address) {
  return std::stoi(tcp_address.substr(tcp_address.rfind(':') + 1));
}

// Sends raw bytes as one request message of `method` (a generic call, so
// nothing on the client validates them); the call's final status.
grpc::Status RawCall(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     const std::string& bytes) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 30s);
  void* tag;
  bool ok;
  auto call = stub.PrepareCall(&ctx, method, &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  grpc::Slice slice(bytes);
  grpc::ByteBuffer out(&slice, 1);
  call->Write(out, reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  call->WritesDone(reinterpret_cast<void*>(3));
  cq.Next(&tag, &ok);
  grpc::ByteBuffer in;
  for (;;) {
    call->Read(&in, reinterpret_cast<void*>(4));
    if (!cq.Next(&tag, &ok) || !ok) break;
  }
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  cq.Next(&tag, &ok);
  return status;
}

class InternalPlane : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { stack_ = StartStack(SlowModel(), 2).release(); }
  static void TearDownTestSuite() {
    delete stack_;
    stack_ = nullptr;
  }
  static ServingStack* stack_;
};
ServingStack* InternalPlane::stack_ = nullptr;

TEST_F(InternalPlane, SchedulerRefusesCallsWithoutTheSecret) {
  const std::string wrong(48, 'x');
  for (const std::string& secret : {std::string(), wrong}) {
    auto stub = internal::Scheduler::NewStub(InternalChannel(stack_->scheduler(), secret));
    {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + 10s);
      internal::SubmitRequest req;
      for (int t : {1, 2, 3}) req.add_prompt(t);
      req.set_max_tokens(4);
      auto reader = stub->Submit(&ctx, req);
      internal::SubmitEvent e;
      EXPECT_FALSE(reader->Read(&e)) << "no token may come back";
      EXPECT_EQ(reader->Finish().error_code(), grpc::UNAUTHENTICATED);
    }
    grpc::ClientContext ctx;
    internal::SchedulerStats stats;
    EXPECT_EQ(stub->GetStats(&ctx, internal::StatsRequest(), &stats).error_code(), grpc::UNAUTHENTICATED);
  }
  EXPECT_TRUE(ServesOneRequest(*stack_));
}

TEST_F(InternalPlane, StagesRefuseResetAndInfoWithoutTheSecret) {
  const nlohmann::json p = stack_->Reload();
  for (int s = 0; s < 2; ++s) {
    auto stub = internal::StageWorker::NewStub(
        InternalChannel("127.0.0.1:" + std::to_string(p["stages"][s]["grpc"].get<int>()), ""));
    grpc::ClientContext reset_ctx;
    internal::ResetResponse reset_resp;
    EXPECT_EQ(stub->Reset(&reset_ctx, internal::ResetRequest(), &reset_resp).error_code(),
              grpc::UNAUTHENTICATED);
    grpc::ClientContext info_ctx;
    internal::StageInfo info;
    EXPECT_EQ(stub->GetInfo(&info_ctx, internal::StageInfoRequest(), &info).error_code(),
              grpc::UNAUTHENTICATED);
  }
  // With the secret, the scheduler's own view: still up, nothing lost.
  EXPECT_TRUE(SchedulerStats(*stack_).stage_up(0));
  EXPECT_TRUE(ServesOneRequest(*stack_));
}

TEST_F(InternalPlane, DataPlaneRefusesInjectedMicroBatches) {
  const nlohmann::json p = stack_->Reload();
  // A batch that would release every sequence id up to 64 on the stage.
  internal::MicroBatch batch;
  batch.set_batch_id(1);
  for (uint64_t id = 1; id <= 64; ++id) batch.add_kv_ops()->set_release(id);
  for (int s = 0; s < 2; ++s) {
    const std::string data = p["stages"][s]["data"].get<std::string>();
    for (const std::string& secret : {std::string(), std::string(48, 'y')}) {
      transport::TransportOptions o;
      o.secret = secret;
      auto sender = transport::Connect(data, o);
      ASSERT_TRUE(sender.ok());
      absl::Status st = (*sender)->Send(batch.SerializeAsString());
      EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << data << ": " << st;
    }
  }
  EXPECT_TRUE(ServesOneRequest(*stack_));
}

TEST_F(InternalPlane, OversizedFrameHeadersAndGarbageCostTheStageNoMemory) {
  const nlohmann::json p = stack_->Reload();
  const pid_t stage = p["stages"][1]["pid"].get<pid_t>();
  const int port = PortOf(p["stages"][1]["data"].get<std::string>());
  const long before = RssKb(stage);
  ASSERT_GT(before, 0);
  // A header claiming 1 GiB (any magic: the stage expects the handshake
  // first), on two connections, then 64 KiB of random bytes.
  std::string header(8, '\0');
  header[4] = 0x00, header[5] = 0x00, header[6] = 0x00, header[7] = 0x40;  // 1 << 30 little-endian
  std::string header_be = header;
  header_be[4] = 0x40, header_be[7] = 0x00;
  EXPECT_TRUE(WriteAndExpectClose(port, header));
  EXPECT_TRUE(WriteAndExpectClose(port, header_be));
  std::mt19937 rng(3);
  std::string garbage(64 << 10, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());
  EXPECT_TRUE(WriteAndExpectClose(port, garbage));
  const long after = RssKb(stage);
  EXPECT_LT(after - before, 16 * 1024) << "the stage's RSS grew from " << before << " to " << after
                                       << " kB";
  EXPECT_TRUE(ServesOneRequest(*stack_));
}

// The same past the handshake, where the stage reads frames: a peer with the
// secret (a compromised or buggy upstream stage) announces a frame as large
// as the stage takes (its limit, from the handshake: 37 MiB here) and
// sends 64 KiB of it: the stage grows with the bytes that arrived, not with
// the header's claim. A frame one byte above the limit, and one with another
// magic word, close the connection at once.
TEST_F(InternalPlane, OversizedFramesAfterTheHandshakeCostTheStageNoMemory) {
  const nlohmann::json p = stack_->Reload();
  const pid_t stage = p["stages"][1]["pid"].get<pid_t>();
  const int port = PortOf(p["stages"][1]["data"].get<std::string>());
  const std::string secret = stack_->cluster_secret();
  const long before = RssKb(stage);
  ASSERT_GT(before, 0);

  size_t limit = 0;
  const int held = AuthenticatedDataConnection(port, secret, &limit);
  ASSERT_GE(held, 0);
  // Touching what the header claims would then grow the RSS past the
  // 16 MiB bound below.
  ASSERT_GE(limit, size_t{32} << 20) << "a limit this small would not test the claim";
  ASSERT_LE(limit, transport::kMaxFrameBytes);
  std::mt19937 rng(5);
  std::string partial = FrameHeader(static_cast<uint32_t>(limit));
  partial.resize(partial.size() + (64 << 10));
  for (size_t i = transport::kFrameHeaderBytes; i < partial.size(); ++i) {
    partial[i] = static_cast<char>(rng());
  }
  ASSERT_EQ(send(held, partial.data(), partial.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(partial.size()));
  // Measure only once the stage has read it all: nothing left in our send
  // queue nor unread in its receive queue.
  bool read_all = false;
  for (int i = 0; i < 500 && !read_all; ++i) {
    int unsent = 0;
    ioctl(held, TIOCOUTQ, &unsent);
    read_all = unsent == 0 && UnreadBytes(held) == 0;
    if (!read_all) std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(read_all) << "the stage stopped reading the frame (unread: " << UnreadBytes(held)
                        << ")";
  const long during = RssKb(stage);
  EXPECT_LT(during - before, 16 * 1024)
      << limit << " bytes announced, 64 KiB sent: the stage's RSS grew from " << before << " to "
      << during << " kB";

  EXPECT_TRUE(WriteOnAndExpectClose(AuthenticatedDataConnection(port, secret),
                                    FrameHeader(static_cast<uint32_t>(limit + 1))))
      << "a frame above the limit must close the connection";
  EXPECT_TRUE(WriteOnAndExpectClose(AuthenticatedDataConnection(port, secret),
                                    FrameHeader(16, 0x12345678) + std::string(16, 'x')))
      << "a frame with another magic word must close the connection";
  close(held);  // the frame cut short: the stage drops it and the memory
  EXPECT_LT(RssKb(stage) - before, 16 * 1024);
  EXPECT_TRUE(ServesOneRequest(*stack_));
}

TEST_F(InternalPlane, MalformedRequestsGetInvalidArgumentNamingTheProblem) {
  std::ifstream in(SourcePath("tests/data/bad_requests/generate.txt"));
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string name, hex, expect;
    fields >> name >> hex;
    std::getline(fields >> std::ws, expect);
    grpc::Status st = RawCall(stack_->channel(), "/specline.v1.Generation/Generate",
                              absl::HexStringToBytes(hex));
    EXPECT_EQ(st.error_code(), grpc::INVALID_ARGUMENT) << name;
    EXPECT_NE(st.error_message().find(expect), std::string::npos)
        << name << ": \"" << st.error_message() << "\"";
    ++cases;
  }
  EXPECT_GE(cases, 10);
  // Random bodies: every one gets a precise code and a message.
  std::mt19937 rng(16);
  for (int i = 0; i < 200; ++i) {
    std::string bytes(1 + rng() % 48, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    grpc::Status st = RawCall(stack_->channel(), "/specline.v1.Generation/Generate", bytes);
    EXPECT_NE(st.error_code(), grpc::INTERNAL) << absl::BytesToHexString(bytes);
    EXPECT_NE(st.error_code(), grpc::UNKNOWN) << absl::BytesToHexString(bytes);
    if (!st.ok()) {
      EXPECT_FALSE(st.error_message().empty()) << absl::BytesToHexString(bytes);
    }
  }
  grpc::Status abort = RawCall(stack_->channel(), "/specline.v1.Generation/Abort", "\x0a\x01\xff");
  EXPECT_EQ(abort.error_code(), grpc::INVALID_ARGUMENT);
  EXPECT_NE(abort.error_message().find("request_id: not valid UTF-8"), std::string::npos);
  // No per-request noise: protobuf never got to log the bad UTF-8.
  const std::string log = ReadFile(stack_->launcher.log_path());
  EXPECT_EQ(log.find("invalid UTF-8 data"), std::string::npos);
  EXPECT_TRUE(ServesOneRequest(*stack_));
}

TEST_F(InternalPlane, ModelInfoNamesTheModelWithoutAPath) {
  auto stub = v1::Generation::NewStub(stack_->channel());
  grpc::ClientContext ctx;
  v1::ModelInfo info;
  ASSERT_TRUE(stub->GetModelInfo(&ctx, v1::ModelInfoRequest(), &info).ok());
  EXPECT_EQ(info.model(), "slow-model");
  EXPECT_EQ(info.model().find('/'), std::string::npos);
}

TEST(Principals, OneCannotAbortAnothersRequest) {
  const std::string tokens = TempDir() + "/tokens";
  std::ofstream(tokens) << "alice tok-alice\nbob tok-bob\n";
  auto stack = StartStack(SlowModel(), 1, {"--auth-token-file", tokens});
  auto stub = v1::Generation::NewStub(stack->channel());
  auto abort = [&](const std::string& token, const std::string& id) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + token);
    v1::AbortRequest req;
    req.set_request_id(id);
    v1::AbortResponse resp;
    EXPECT_TRUE(stub->Abort(&ctx, req, &resp).ok());
    return resp.found();
  };

  // Alice's request, with a server-made id; long enough to outlive the
  // aborts below by far (the last one ends it).
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer tok-alice");
  ctx.set_deadline(std::chrono::system_clock::now() + 120s);
  auto reader = stub->Generate(&ctx, Request(4000));
  v1::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  const std::string id = msg.request_id();
  EXPECT_TRUE(std::regex_match(id, std::regex("req-[0-9a-f]{32}"))) << id;

  EXPECT_FALSE(abort("tok-bob", id)) << "bob must not reach alice's request";
  EXPECT_FALSE(abort("tok-bob", "req-00000000000000000000000000000001"));
  EXPECT_TRUE(abort("tok-alice", id));
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  int tokens_seen = msg.token_ids_size();
  while (reader->Read(&msg)) {
    tokens_seen += msg.token_ids_size();
    if (msg.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) finish = msg.finish_reason();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(finish, v1::FINISH_REASON_ABORT);
  EXPECT_LT(tokens_seen, 4000);
  EXPECT_TRUE(ServesOneRequest(*stack, "tok-bob"));
}

TEST(Principals, PerPrincipalStreamLimit) {
  const std::string tokens = TempDir() + "/tokens2";
  std::ofstream(tokens) << "alice tok-alice\nbob tok-bob\n";
  auto stack = StartStack(SlowModel(), 1,
                          {"--auth-token-file", tokens, "--max-streams-per-principal", "1"});
  auto stub = v1::Generation::NewStub(stack->channel());
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer tok-alice");
  auto reader = stub->Generate(&ctx, Request(4000, "a-1"));
  v1::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));  // open, and holding alice's one stream

  grpc::ClientContext second;
  second.AddMetadata("authorization", "Bearer tok-alice");
  auto refused = stub->Generate(&second, Request(3, "a-2"));
  while (refused->Read(&msg)) {
  }
  grpc::Status st = refused->Finish();
  EXPECT_EQ(st.error_code(), grpc::RESOURCE_EXHAUSTED);
  EXPECT_NE(st.error_message().find("alice"), std::string::npos) << st.error_message();
  EXPECT_TRUE(ServesOneRequest(*stack, "tok-bob")) << "bob has his own allowance";
  ctx.TryCancel();
  while (reader->Read(&msg)) {
  }
  reader->Finish();
}


// An operator's slip: a stage started with another deployment's secret.
// The scheduler never brings the pipeline up with it, says why in its log,
// and refuses requests with UNAVAILABLE instead of serving half a pipeline.
TEST(ClusterSecretMismatch, PipelineStaysDownAndSaysWhy) {
  const std::string dir = TempDir() + "/mismatch";
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/a") << std::string(40, 'a') << "\n";
  std::ofstream(dir + "/b") << std::string(40, 'b') << "\n";
  const std::string model = SlowModel();
  ChildProcess stage({BinaryPath("specline-stage"), "--model", model, "--layers", "0:8",
                      "--next", "tcp://127.0.0.1:9", "--metrics-port", "-1", "--threads", "1",
                      "--cluster-secret-file", dir + "/a", "--port-file", dir + "/stage.json"},
                     dir + "/stage.log");
  const nlohmann::json sp = stage.WaitForPortFile(dir + "/stage.json", 60s);
  ChildProcess scheduler(
      {BinaryPath("specline-scheduler"), "--model", model, "--stage-grpc",
       "127.0.0.1:" + std::to_string(sp["grpc"].get<int>()), "--metrics-port", "-1",
       "--cluster-secret-file", dir + "/b", "--port-file", dir + "/scheduler.json"},
      dir + "/scheduler.log");
  const nlohmann::json cp = scheduler.WaitForPortFile(dir + "/scheduler.json", 60s);
  auto stub = internal::Scheduler::NewStub(InternalChannel(
      "127.0.0.1:" + std::to_string(cp["grpc"].get<int>()), std::string(40, 'b')));
  // The health loop has polled the stage (every 250 ms) once the log says so.
  ASSERT_TRUE([&] {
    for (int i = 0; i < 600; ++i) {
      if (ReadFile(dir + "/scheduler.log").find("UNAUTHENTICATED") != std::string::npos) return true;
      std::this_thread::sleep_for(100ms);
    }
    return false;
  }()) << ReadFile(dir + "/scheduler.log");
  grpc::ClientContext stats_ctx;
  internal::SchedulerStats stats;
  ASSERT_TRUE(stub->GetStats(&stats_ctx, internal::StatsRequest(), &stats).ok());
  ASSERT_EQ(stats.stage_up_size(), 1);
  EXPECT_FALSE(stats.stage_up(0));
  grpc::ClientContext ctx;
  internal::SubmitRequest req;
  for (int t : {1, 2, 3}) req.add_prompt(t);
  req.set_max_tokens(2);
  auto reader = stub->Submit(&ctx, req);
  internal::SubmitEvent e;
  EXPECT_FALSE(reader->Read(&e));
  EXPECT_EQ(reader->Finish().error_code(), grpc::UNAVAILABLE);
}

// A port on loopback that nothing listens on (bound, then closed).
int UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

// Whether `path` comes to contain `text` within a minute (read every 100 ms).
bool LogComesToSay(const std::string& path, const std::string& text) {
  for (int i = 0; i < 600; ++i) {
    if (std::filesystem::exists(path) && ReadFile(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

// A normal start says nothing alarming: a stage the scheduler cannot reach
// yet is still loading, so it is said at debug level while the start-up
// timeout runs (issue 38: every start printed "does not answer" warnings).
// Past the timeout the same stage is a warning. Waits on what the log
// says, never on a duration.
TEST(StageStartup, AStageStillStartingIsWaitedForQuietlyThenWarnedAbout) {
  const std::string dir = TempDir() + "/startup";
  std::filesystem::create_directories(dir);
  const std::string model =
      WriteServingModel(LlamaShape(32, 64, 2, 4, 2, 128, 128), "startup-model", /*seed=*/3);
  const std::string stage = "127.0.0.1:" + std::to_string(UnusedPort());
  auto start = [&](const std::string& name, std::vector<std::string> extra) {
    std::vector<std::string> argv = {BinaryPath("specline-scheduler"), "--model", model,
                                     "--stage-grpc", stage, "--metrics-port", "-1",
                                     "--log-level", "debug", "--port-file",
                                     dir + "/" + name + ".json"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<ChildProcess>(argv, dir + "/" + name + ".log");
  };
  auto quiet = start("quiet", {});
  ASSERT_TRUE(LogComesToSay(dir + "/quiet.log", "does not answer yet (starting)"))
      << ReadFile(dir + "/quiet.log");
  EXPECT_EQ(ReadFile(dir + "/quiet.log").find(" warning "), std::string::npos)
      << ReadFile(dir + "/quiet.log");
  auto late = start("late", {"--stage-startup-timeout-s", "0"});
  ASSERT_TRUE(LogComesToSay(dir + "/late.log", "has not answered within 0 s of start"))
      << ReadFile(dir + "/late.log");
  EXPECT_NE(ReadFile(dir + "/late.log").find(" warning [scheduler] stage 0 (" + stage),
            std::string::npos)
      << ReadFile(dir + "/late.log");
}

}  // namespace
}  // namespace specline::testing
