// Activation transports: the behaviour the pipeline relies on (order,
// fan-in, large frames, timeouts, shutdown, restarts, dead peers, garbage),
// for both the TCP and the in-process implementation.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <thread>

#include "gtest/gtest.h"
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

// Connects a raw socket to a TCP receiver and writes `bytes`.
void SendRaw(int port, const std::string& bytes, bool wait_for_close) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  if (wait_for_close) {
    // The receiver hangs up on garbage: recv sees EOF (or a reset).
    char c;
    EXPECT_LE(recv(fd, &c, 1, 0), 0);
  }
  close(fd);
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

}  // namespace
}  // namespace specline::transport
