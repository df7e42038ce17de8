// Activation transports: the behaviour the pipeline relies on (order,
// fan-in, large frames, timeouts, shutdown, restarts, dead peers, garbage),
// for both the TCP and the in-process implementation; and the data plane's
// defences (data_plane_auth.h): the cluster-secret handshake, bounded
// frames, no memory for bytes that never arrive, bounded handshakes. No test
// here asserts on time.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"
#include "transport/data_plane_auth.h"
#include "transport/tcp_socket.h"
#include "transport/transport.h"

namespace specline::transport {
namespace {

using std::chrono::milliseconds;

std::string UniqueInproc() {
  static std::atomic<int> n{0};
  return "inproc://transport-test-" + std::to_string(n++);
}

class TransportTest : public ::testing::TestWithParam<std::string> {
 protected:
  // "tcp" or "inproc": a fresh listen address of that kind.
  std::string ListenAddress() const {
    return GetParam() == "tcp" ? "tcp://127.0.0.1:0" : UniqueInproc();
  }
  std::unique_ptr<ActivationReceiver> MustListen() {
    auto r = Listen(ListenAddress());
    EXPECT_TRUE(r.ok()) << r.status();
    return std::move(*r);
  }
  static std::unique_ptr<ActivationSender> MustConnect(const std::string& address) {
    auto s = Connect(address);
    EXPECT_TRUE(s.ok()) << s.status();
    return std::move(*s);
  }
};

TEST_P(TransportTest, DeliversInOrder) {
  auto rx = MustListen();
  auto tx = MustConnect(rx->address());
  for (int i = 0; i < 500; ++i) ASSERT_TRUE(tx->Send("message " + std::to_string(i)).ok());
  for (int i = 0; i < 500; ++i) {
    auto m = rx->Receive(milliseconds(10000));
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(*m, "message " + std::to_string(i));
  }
  EXPECT_EQ(rx->pending(), 0u);
}

TEST_P(TransportTest, EmptyMessage) {
  auto rx = MustListen();
  auto tx = MustConnect(rx->address());
  ASSERT_TRUE(tx->Send("").ok());
  ASSERT_TRUE(tx->Send("x").ok());
  auto a = rx->Receive(milliseconds(10000));
  auto b = rx->Receive(milliseconds(10000));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, "");
  EXPECT_EQ(*b, "x");
}

TEST_P(TransportTest, ManySendersOneReceiver) {
  auto rx = MustListen();
  constexpr int kSenders = 8, kEach = 200;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int s = 0; s < kSenders; ++s) {
    threads.emplace_back([&, s] {
      auto tx = Connect(rx->address());
      for (int i = 0; i < kEach; ++i) {
        if (!(*tx)->Send(std::to_string(s) + ":" + std::to_string(i)).ok()) ++failures;
      }
    });
  }
  // Per sender, messages keep their order; across senders they interleave.
  std::map<int, int> next;
  for (int k = 0; k < kSenders * kEach; ++k) {
    auto m = rx->Receive(milliseconds(10000));
    ASSERT_TRUE(m.ok()) << m.status();
    const size_t colon = m->find(':');
    const int s = std::stoi(m->substr(0, colon)), i = std::stoi(m->substr(colon + 1));
    EXPECT_EQ(i, next[s]) << "sender " << s;
    next[s] = i + 1;
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (int s = 0; s < kSenders; ++s) EXPECT_EQ(next[s], kEach);
}

TEST_P(TransportTest, LargeMessagesArriveIntact) {
  auto rx = MustListen();
  auto tx = MustConnect(rx->address());
  std::string big(24 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 2654435761u >> 24);
  std::thread sender([&] { ASSERT_TRUE(tx->Send(big).ok()); ASSERT_TRUE(tx->Send("tail").ok()); });
  auto m = rx->Receive(milliseconds(30000));
  sender.join();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(*m == big);
  EXPECT_EQ(*rx->Receive(milliseconds(10000)), "tail");
}

TEST_P(TransportTest, ReceiveTimesOut) {
  auto rx = MustListen();
  auto m = rx->Receive(milliseconds(20));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_P(TransportTest, ShutdownWakesReceivers) {
  auto rx = MustListen();
  std::vector<std::thread> waiters;
  std::atomic<int> cancelled{0};
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&] {
      if (rx->Receive(milliseconds(600000)).status().code() == absl::StatusCode::kCancelled) {
        ++cancelled;
      }
    });
  }
  rx->Shutdown();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(cancelled.load(), 3);
  EXPECT_EQ(rx->Receive(milliseconds(0)).status().code(), absl::StatusCode::kCancelled);
}

TEST_P(TransportTest, SendToDeadPeerIsUnavailable) {
  auto rx = MustListen();
  const std::string address = rx->address();
  rx->Shutdown();
  rx.reset();
  auto tx = MustConnect(address);
  absl::Status st = tx->Send("hello");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find(address), std::string::npos) << st;
}

TEST_P(TransportTest, SenderSurvivesReceiverRestart) {
  auto rx = MustListen();
  const std::string address = rx->address();
  auto tx = MustConnect(address);
  ASSERT_TRUE(tx->Send("before").ok());
  EXPECT_EQ(*rx->Receive(milliseconds(10000)), "before");
  rx->Shutdown();
  rx.reset();
  // The same address again (for TCP: the port the first one was given).
  auto again = Listen(address);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(tx->Send("after").ok());
  auto m = (*again)->Receive(milliseconds(10000));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, "after");
}

INSTANTIATE_TEST_SUITE_P(Kinds, TransportTest, ::testing::Values("tcp", "inproc"),
                         [](const auto& info) { return info.param; });

TEST(InprocTransport, NameIsExclusiveWhileListening) {
  const std::string address = UniqueInproc();
  auto first = Listen(address);
  ASSERT_TRUE(first.ok());
  auto second = Listen(address);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kAlreadyExists);
  (*first)->Shutdown();
  EXPECT_TRUE(Listen(address).ok());
}

// A raw client socket connected to 127.0.0.1:port.
int RawConnect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Reads (and discards) until the receiver hangs up: EOF or a reset. The
// receiver greets every connection first, so there may be bytes before it.
void ExpectHangUp(int fd) {
  char buf[512];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
  }
  EXPECT_LE(n, 0);
}

// Connects a raw socket to a TCP receiver and writes `bytes`.
void SendRaw(int port, const std::string& bytes, bool wait_for_close) {
  int fd = RawConnect(port);
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  if (wait_for_close) ExpectHangUp(fd);  // the receiver hangs up on garbage
  close(fd);
}

std::string Header(uint32_t length, uint32_t magic = kFrameMagic) {
  unsigned char header[kFrameHeaderBytes];
  EncodeFrameHeader(length, header, magic);
  return std::string(reinterpret_cast<char*>(header), sizeof(header));
}

int PortOf(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

TEST(TcpTransport, GarbageDoesNotHurtTheReceiver) {
  auto rx = Listen("tcp://127.0.0.1:0");
  ASSERT_TRUE(rx.ok());
  const int port = PortOf((*rx)->address());
  SendRaw(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", true);
  // Right magic, absurd length: refused before allocating.
  unsigned char header[kFrameHeaderBytes];
  EncodeFrameHeader(0xffffffffu, header);
  SendRaw(port, std::string(reinterpret_cast<char*>(header), sizeof(header)), true);
  // A frame cut short by the peer: nothing is delivered.
  EncodeFrameHeader(100, header);
  SendRaw(port, std::string(reinterpret_cast<char*>(header), sizeof(header)) + "0123456789",
          false);
  std::string random(4096, '\0');
  for (size_t i = 0; i < random.size(); ++i) random[i] = static_cast<char>(i * 7919 >> 3);
  SendRaw(port, random, true);

  auto tx = Connect((*rx)->address());
  ASSERT_TRUE((*tx)->Send("still here").ok());
  auto m = (*rx)->Receive(milliseconds(10000));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, "still here");
  EXPECT_EQ((*rx)->pending(), 0u);
}

TEST(TcpTransport, ListenOnATakenPortFails) {
  auto rx = Listen("tcp://127.0.0.1:0");
  ASSERT_TRUE(rx.ok());
  auto again = Listen((*rx)->address());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable) << again.status();
}

TEST(TransportAddress, Parses) {
  auto a = ParseAddress("tcp://127.0.0.1:5000");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->scheme, "tcp");
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 5000);
  auto v6 = ParseAddress("tcp://[::1]:7");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 7);
  auto in = ParseAddress("inproc://stage-1");
  ASSERT_TRUE(in.ok());
  EXPECT_EQ(in->name, "stage-1");
  for (const char* bad : {"", "tcp://", "tcp://host", "tcp://host:", "tcp://:80", "tcp://h:99999",
                          "tcp://h:12x", "udp://h:1", "inproc://", "tcp://[::1:5"}) {
    EXPECT_EQ(ParseAddress(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(Connect("tcp://127.0.0.1:0").status().code(), absl::StatusCode::kInvalidArgument);
}

// --- the data plane's defences -------------------------------------------------

constexpr char kSecret[] = "cluster-secret-for-the-transport-tests";

TransportOptions WithSecret(std::string secret) {
  TransportOptions o;
  o.secret = std::move(secret);
  return o;
}

std::unique_ptr<ActivationReceiver> MustListenTcp(const TransportOptions& o) {
  auto r = Listen("tcp://127.0.0.1:0", o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? std::move(*r) : nullptr;
}

std::unique_ptr<ActivationSender> MustConnect(const std::string& address,
                                              const TransportOptions& o) {
  auto s = Connect(address, o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? std::move(*s) : nullptr;
}

// The receiver still takes a message from a well-configured sender, and
// nothing else reached its inbox.
void ExpectServes(ActivationReceiver& rx, const TransportOptions& o, const std::string& what) {
  auto tx = MustConnect(rx.address(), o);
  ASSERT_TRUE(tx);
  absl::Status st = tx->Send(what);
  ASSERT_TRUE(st.ok()) << st;
  auto m = rx.Receive(milliseconds(10000));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, what);
  EXPECT_EQ(rx.pending(), 0u);
}

bool Contains(const absl::Status& st, const std::string& part) {
  return std::string(st.message()).find(part) != std::string::npos;
}

TEST(DataPlaneAuth, ProofsArePinnedHmacSha256) {
  // Independent values: Python's hmac.new(secret, label + receiver_nonce +
  // sender_nonce, hashlib.sha256), nonces 0..31 and 32..63.
  std::string rn, sn;
  for (int i = 0; i < 32; ++i) rn.push_back(static_cast<char>(i));
  for (int i = 32; i < 64; ++i) sn.push_back(static_cast<char>(i));
  EXPECT_EQ(absl::BytesToHexString(SenderProof("cluster-secret", WireProtocol::kTcp, rn, sn)),
            "3de962bf6a710ad69ec54fada61ccda491fcbc16e92b3e392d55f399830ca1fa");
  EXPECT_EQ(absl::BytesToHexString(ReceiverProof("cluster-secret", WireProtocol::kTcp, rn, sn)),
            "8dfd5ed5bbf1237a2c594d3854c4f7a6bad38af16b83f215af52c257460f6253");
  EXPECT_EQ(absl::BytesToHexString(SenderProof("cluster-secret", WireProtocol::kNccl, rn, sn)),
            "444296b98b5374aa0d825fa628a71b8183f8a261fa64beb814a2064beb48c559");
  EXPECT_NE(SenderProof("cluster-secreT", WireProtocol::kTcp, rn, sn),
            SenderProof("cluster-secret", WireProtocol::kTcp, rn, sn));
  EXPECT_NE(SenderProof("cluster-secret", WireProtocol::kTcp, sn, rn),
            SenderProof("cluster-secret", WireProtocol::kTcp, rn, sn));
}

TEST(DataPlaneAuth, BadOptionsAreRefused) {
  TransportOptions o;
  o.max_frame_bytes = 0;
  EXPECT_EQ(Listen("tcp://127.0.0.1:0", o).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Connect("tcp://127.0.0.1:1", o).status().code(), absl::StatusCode::kInvalidArgument);
  o.max_frame_bytes = kMaxFrameBytes + 1;
  EXPECT_EQ(Listen("tcp://127.0.0.1:0", o).status().code(), absl::StatusCode::kInvalidArgument);
  o = TransportOptions{};
  o.handshake_timeout_ms = 0;
  EXPECT_EQ(Listen("tcp://127.0.0.1:0", o).status().code(), absl::StatusCode::kInvalidArgument);
  // inproc:// takes (and ignores) the options: one address space.
  auto in = Listen(UniqueInproc(), WithSecret(kSecret));
  ASSERT_TRUE(in.ok()) << in.status();
  auto tx = Connect((*in)->address(), WithSecret(kSecret));
  ASSERT_TRUE(tx.ok());
  ASSERT_TRUE((*tx)->Send("same process").ok());
  EXPECT_EQ(*(*in)->Receive(milliseconds(10000)), "same process");
}

TEST(DataPlaneAuth, MatchingSecretsDeliver) {
  auto rx = MustListenTcp(WithSecret(kSecret));
  auto tx = MustConnect(rx->address(), WithSecret(kSecret));
  std::string big(3 << 20, '\0');  // several read steps
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 2654435761u >> 24);
  std::thread sender([&] {
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(tx->Send("message " + std::to_string(i)).ok());
    ASSERT_TRUE(tx->Send(big).ok());
  });
  for (int i = 0; i < 100; ++i) {
    auto m = rx->Receive(milliseconds(10000));
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(*m, "message " + std::to_string(i));
  }
  auto m = rx->Receive(milliseconds(30000));
  sender.join();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(*m == big);
  // A restarted receiver (same port, same secret): the sender authenticates
  // again on its next Send.
  const std::string address = rx->address();
  rx.reset();
  auto again = Listen(address, WithSecret(kSecret));
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(tx->Send("after a restart").ok());
  EXPECT_EQ(*(*again)->Receive(milliseconds(10000)), "after a restart");
}

TEST(DataPlaneAuth, MismatchedSecretsFailClearly) {
  auto rx = MustListenTcp(WithSecret(kSecret));
  // An authenticated sender that is already connected keeps working
  // through all of this.
  auto good = MustConnect(rx->address(), WithSecret(kSecret));
  ASSERT_TRUE(good->Send("first").ok());
  EXPECT_EQ(*rx->Receive(milliseconds(10000)), "first");

  auto wrong = MustConnect(rx->address(), WithSecret("another secret"));
  absl::Status st = wrong->Send("injected");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
  EXPECT_TRUE(Contains(st, "refused this sender")) << st;
  EXPECT_TRUE(Contains(st, rx->address())) << st;
  // Failing again does not hang either (a fresh connection each time).
  EXPECT_EQ(wrong->Send("injected").code(), absl::StatusCode::kUnauthenticated);

  auto none = MustConnect(rx->address(), TransportOptions{});
  st = none->Send("injected");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
  EXPECT_TRUE(Contains(st, "requires the cluster secret")) << st;

  // The reverse: a sender with a secret will not talk to a receiver that
  // authenticates nobody.
  auto open_rx = MustListenTcp(TransportOptions{});
  auto strict = MustConnect(open_rx->address(), WithSecret(kSecret));
  st = strict->Send("to an open receiver");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
  EXPECT_TRUE(Contains(st, "has no cluster secret")) << st;
  EXPECT_EQ(open_rx->Receive(milliseconds(50)).status().code(),
            absl::StatusCode::kDeadlineExceeded);

  ASSERT_TRUE(good->Send("second").ok());
  auto m = rx->Receive(milliseconds(10000));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, "second");  // nothing injected came before it
  EXPECT_EQ(rx->pending(), 0u);
  ExpectServes(*rx, WithSecret(kSecret), "a new sender");
}

TEST(DataPlaneAuth, UnauthenticatedBytesAreRefused) {
  TransportOptions o = WithSecret(kSecret);
  o.handshake_timeout_ms = 1000;  // the silent peer below is dropped sooner
  auto rx = MustListenTcp(o);
  const int port = PortOf(rx->address());
  auto good = MustConnect(rx->address(), o);
  ASSERT_TRUE(good->Send("before").ok());
  EXPECT_EQ(*rx->Receive(milliseconds(10000)), "before");

  // Garbage instead of the answer to the challenge.
  SendRaw(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", true);
  std::string random(4096, '\0');
  for (size_t i = 0; i < random.size(); ++i) random[i] = static_cast<char>(i * 7919 >> 3);
  SendRaw(port, random, true);
  // A data frame (a MicroBatch injection) without authenticating, small and
  // claiming 1 GiB.
  SendRaw(port, Header(5) + "hello", true);
  SendRaw(port, Header(1u << 30), true);
  // The handshake's own frame claiming 1 GiB: above its tiny bound.
  SendRaw(port, Header(1u << 30, kAuthFrameMagic), true);
  // A well-formed answer with a made-up proof.
  SendRaw(port, Header(kNonceBytes + kProofBytes, kAuthFrameMagic) +
                    std::string(kNonceBytes + kProofBytes, 'x'),
          true);
  // A peer that says nothing: dropped at the handshake deadline.
  {
    int fd = RawConnect(port);
    ExpectHangUp(fd);
    close(fd);
  }
  ASSERT_TRUE(good->Send("after").ok());
  auto m = rx->Receive(milliseconds(10000));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, "after");
  EXPECT_EQ(rx->pending(), 0u);
  ExpectServes(*rx, o, "a new sender");
}

TEST(DataPlaneAuth, OversizedHeaderAfterAuthenticationIsRefused) {
  TransportOptions o = WithSecret(kSecret);
  o.max_frame_bytes = 1 << 20;
  auto rx = MustListenTcp(o);
  const int port = PortOf(rx->address());
  // A raw client that passes the handshake (it knows the secret), then
  // claims 1 GiB: above the receiver's limit, dropped before allocating.
  int fd = RawConnect(port);
  absl::StatusOr<size_t> limit = ConnectHandshake(fd, WireProtocol::kTcp, o, rx->address());
  ASSERT_TRUE(limit.ok()) << limit.status();
  EXPECT_EQ(*limit, size_t{1} << 20);  // announced in the greeting
  const std::string header = Header(1u << 30);
  ASSERT_EQ(send(fd, header.data(), header.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(header.size()));
  ExpectHangUp(fd);
  close(fd);
  ExpectServes(*rx, o, "still serving");
}

TEST(DataPlaneAuth, FrameLimitIsExact) {
  for (const std::string secret : {"", kSecret}) {
    SCOPED_TRACE(secret.empty() ? "no secret" : "secret");
    TransportOptions o = WithSecret(secret);
    o.max_frame_bytes = 1000;
    auto rx = MustListenTcp(o);
    // A sender with the default limit learns the receiver's from its
    // greeting: over it, INVALID_ARGUMENT without losing the connection.
    TransportOptions sender_options = WithSecret(secret);
    auto tx = MustConnect(rx->address(), sender_options);
    const std::string at_limit(1000, 'a');
    ASSERT_TRUE(tx->Send(at_limit).ok());
    EXPECT_EQ(*rx->Receive(milliseconds(10000)), at_limit);
    absl::Status st = tx->Send(std::string(1001, 'b'));
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_TRUE(Contains(st, "1000")) << st;
    ASSERT_TRUE(tx->Send("next").ok());
    EXPECT_EQ(*rx->Receive(milliseconds(10000)), "next");
    // A sender's own limit.
    sender_options.max_frame_bytes = 10;
    auto small = MustConnect(rx->address(), sender_options);
    EXPECT_EQ(small->Send(std::string(11, 'c')).code(), absl::StatusCode::kInvalidArgument);
    // A peer that ignores the announced limit: the receiver drops the
    // connection at the header; nothing is delivered.
    int fd = RawConnect(PortOf(rx->address()));
    ASSERT_TRUE(ConnectHandshake(fd, WireProtocol::kTcp, o, rx->address()).ok());
    ASSERT_TRUE(WriteFrame(fd, std::string(1001, 'd').data(), 1001).ok());
    ExpectHangUp(fd);
    close(fd);
    // At the limit over a raw connection: delivered.
    fd = RawConnect(PortOf(rx->address()));
    ASSERT_TRUE(ConnectHandshake(fd, WireProtocol::kTcp, o, rx->address()).ok());
    ASSERT_TRUE(WriteFrame(fd, at_limit.data(), at_limit.size()).ok());
    auto m = rx->Receive(milliseconds(10000));
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(*m, at_limit);
    close(fd);
    EXPECT_EQ(rx->pending(), 0u);
  }
}

// Resident memory of this process, from /proc/self/statm.
size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Bytes the kernel holds for the server side of the loopback connection
// from client port `client_port` to server port `server_port`, not yet read
// by the receiver (/proc/net/tcp rx_queue); -1 when there is no such
// connection.
long UnreadByReceiver(int server_port, int client_port) {
  std::ifstream tcp("/proc/net/tcp");
  std::string line;
  std::getline(tcp, line);  // header
  while (std::getline(tcp, line)) {
    std::istringstream in(line);
    std::string sl, local, remote, state, queues;
    in >> sl >> local >> remote >> state >> queues;
    const int lport = std::stoi(local.substr(local.find(':') + 1), nullptr, 16);
    const int rport = std::stoi(remote.substr(remote.find(':') + 1), nullptr, 16);
    if (lport == server_port && rport == client_port) {
      return std::stol(queues.substr(queues.find(':') + 1), nullptr, 16);
    }
  }
  return -1;
}

int LocalPort(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

TEST(DataPlaneAuth, OversizedHeaderCostsNoMemory) {
  // Headers claiming the full 1 GiB (within the default limit), from two
  // connections, followed by one byte and then nothing: a reader that sized
  // its buffer by the claim would hold 2 GiB here.
  for (const std::string secret : {"", kSecret}) {
    SCOPED_TRACE(secret.empty() ? "no secret" : "secret");
    const TransportOptions o = WithSecret(secret);
    auto rx = MustListenTcp(o);
    const int port = PortOf(rx->address());
    ExpectServes(*rx, o, "warm-up");
    const size_t before = ResidentBytes();
    std::vector<int> attackers;
    for (int i = 0; i < 2; ++i) {
      int fd = RawConnect(port);
      ASSERT_TRUE(ConnectHandshake(fd, WireProtocol::kTcp, o, rx->address()).ok());
      const std::string bytes = Header(static_cast<uint32_t>(kMaxFrameBytes)) + "x";
      ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
                static_cast<ssize_t>(bytes.size()));
      attackers.push_back(fd);
    }
    // Wait until the receiver has read the header and the byte after it
    // (the kernel holds nothing unread for it): it has sized its buffer by
    // then. No bound on the wait other than the test's.
    for (int fd : attackers) {
      long unread;
      while ((unread = UnreadByReceiver(port, LocalPort(fd))) > 0) {
        std::this_thread::sleep_for(milliseconds(2));
      }
      ASSERT_EQ(unread, 0) << "the receiver dropped a connection within its limit";
    }
    const size_t after = ResidentBytes();
    EXPECT_LT(after, before + (8u << 20))
        << "RSS grew by " << (after - before) / 1024 << " KiB for 18 bytes received";
    ExpectServes(*rx, o, "still serving");
    for (int fd : attackers) close(fd);
  }
}

TEST(DataPlaneAuth, HandshakeFloodIsBounded) {
  TransportOptions o = WithSecret(kSecret);
  o.max_handshakes = 4;
  o.handshake_timeout_ms = 600000;  // only the limit frees the slots here
  auto rx = MustListenTcp(o);
  const int port = PortOf(rx->address());
  auto good = MustConnect(rx->address(), o);
  ASSERT_TRUE(good->Send("before").ok());  // authenticated: holds no slot
  EXPECT_EQ(*rx->Receive(milliseconds(10000)), "before");
  // Silent peers fill the handshake slots (the receiver accepts in order).
  std::vector<int> silent;
  for (int i = 0; i < 4; ++i) silent.push_back(RawConnect(port));
  // One more is closed at accept: no greeting, no thread.
  int extra = RawConnect(port);
  char c;
  EXPECT_LE(recv(extra, &c, 1, 0), 0);
  close(extra);
  // A sender that connects now is told so, clearly, without hanging.
  auto late = MustConnect(rx->address(), o);
  absl::Status st = late->Send("during the flood");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_TRUE(Contains(st, "closed the connection before greeting")) << st;
  // The established sender is unaffected.
  ASSERT_TRUE(good->Send("during").ok());
  EXPECT_EQ(*rx->Receive(milliseconds(10000)), "during");
  // Once the flood ends, new senders get in again (as soon as the receiver
  // has noticed the silent peers leave).
  for (int fd : silent) close(fd);
  for (int attempt = 0; attempt < 10000; ++attempt) {
    if (late->Send("after the flood").ok()) break;
    std::this_thread::sleep_for(milliseconds(5));
  }
  auto m = rx->Receive(milliseconds(10000));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, "after the flood");
}

}  // namespace
}  // namespace specline::transport
