// nccl:// activation transport (transport/nccl_transport.h), in three tiers:
//  - no GPU: address parsing; UNIMPLEMENTED without NCCL, UNAVAILABLE
//    without a device.
//  - one GPU: the data path in same-device mode (1-rank communicator, send
//    and receive to self in one group), the bootstrap wire format against a
//    hand-written peer (ncclUniqueId exchange, refusals, a peer that never
//    joins or hangs up), the refusal of a 2-rank link on one GPU, protocol
//    mismatches with tcp://.
//  - two GPUs: the same data-path cases over the 2-rank communicator, sender
//    on device 0 and receiver on device 1 (skipped with fewer GPUs: NCCL
//    refuses two ranks of one communicator on one GPU).
#include <cuda_runtime_api.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/cuda_test_util.h"
#include "transport/data_plane_auth.h"
#include "transport/tcp_socket.h"
#include "transport/transport.h"
#ifdef SPECLINE_HAVE_NCCL
#include "transport/nccl_transport.h"
#endif

namespace specline::transport {
namespace {

using std::chrono::milliseconds;

// --- no GPU needed ------------------------------------------------------------------

TEST(NcclAddress, Parses) {
  auto a = ParseAddress("nccl://127.0.0.1:5000");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->scheme, "nccl");
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 5000);
  auto v6 = ParseAddress("nccl://[::1]:7");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 7);
  for (const char* bad : {"nccl://", "nccl://host", "nccl://:80", "nccl://h:99999", "ncl://h:1"}) {
    EXPECT_EQ(ParseAddress(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(Connect("nccl://127.0.0.1:0").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(NcclTransport, WithoutNcclIsUnimplemented) {
#ifdef SPECLINE_HAVE_NCCL
  GTEST_SKIP() << "built with NCCL";
#else
  for (auto st : {Listen("nccl://127.0.0.1:0").status(), Connect("nccl://127.0.0.1:1").status()}) {
    EXPECT_EQ(st.code(), absl::StatusCode::kUnimplemented) << st;
    EXPECT_NE(st.message().find("built without NCCL"), std::string::npos) << st;
  }
#endif
}

#ifdef SPECLINE_HAVE_NCCL

TEST(NcclTransport, WithoutDeviceIsUnavailable) {
  if (cuda::DeviceAvailable()) GTEST_SKIP() << "a CUDA device is present";
  for (auto st : {Listen("nccl://127.0.0.1:0").status(), Connect("nccl://127.0.0.1:1").status()}) {
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
    EXPECT_NE(st.message().find("no usable CUDA device"), std::string::npos) << st;
  }
}

// --- helpers ---------------------------------------------------------------------------

int PortOf(const std::string& address) {
  return std::stoi(address.substr(address.rfind(':') + 1));
}

// Deterministic bytes for message `i` of `size` (content depends on i, so
// a message out of order or mixed up compares unequal).
std::string Pattern(int i, size_t size) {
  std::string s(size, '\0');
  uint32_t x = 2166136261u ^ static_cast<uint32_t>(i * 16777619);
  for (size_t k = 0; k < size; ++k) {
    x = x * 1664525u + 1013904223u;
    s[k] = static_cast<char>(x >> 24);
  }
  return s;
}

std::vector<char> CopyToHost(const void* device_ptr, size_t n) {
  std::vector<char> host(n);
  if (n > 0) {
    EXPECT_EQ(cudaMemcpy(host.data(), device_ptr, n, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  return host;
}

int DeviceOf(const void* ptr) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) return -100;
  return attr.device;
}

// --- the data path: same-device (one GPU) and 2-rank (two GPUs) ---------------------

class NcclLinkTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    SPECLINE_SKIP_WITHOUT_GPU();
    int count = 0;
    cudaGetDeviceCount(&count);
    if (two_gpu() && count < 2) {
      GTEST_SKIP() << "needs two GPUs (found " << count
                   << "): the 2-rank link puts the sender on device 0 and the receiver on "
                      "device 1, and NCCL refuses two ranks of one communicator on one GPU";
    }
  }
  bool two_gpu() const { return GetParam() == "two_gpu"; }
  int rx_device() const { return two_gpu() ? 1 : 0; }

  std::unique_ptr<NcclReceiver> MustListen(int port = 0) {
    NcclOptions o;
    o.device = rx_device();
    auto r = ListenNccl("127.0.0.1", port, o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? std::move(*r) : nullptr;
  }
  std::unique_ptr<NcclSender> MustConnect(const std::string& address) {
    NcclOptions o;
    o.device = 0;
    o.same_device = !two_gpu();
    o.nccl_timeout_ms = 20000;
    auto s = ConnectNccl("127.0.0.1", PortOf(address), o);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
};

// 1 B .. 8 MiB, both sides of the inline limit (4 KiB).
const std::vector<size_t> kSizes = {1,       7,         4095,     4096,    4097, 65536, 1 << 20,
                                    8 << 20, 300,       (3 << 20) + 5, 0,  100000, 8 << 20, 2};

TEST_P(NcclLinkTest, RoundTripOfMixedSizesInOrder) {
  auto rx = MustListen();
  ASSERT_TRUE(rx);
  auto tx = MustConnect(rx->address());
  ASSERT_TRUE(tx);
  constexpr int kCount = 56;
  std::atomic<int> failures{0};
  std::thread sender([&] {
    for (int i = 0; i < kCount; ++i) {
      absl::Status st = tx->Send(Pattern(i, kSizes[i % kSizes.size()]));
      if (!st.ok()) {
        ADD_FAILURE() << "message " << i << ": " << st;
        ++failures;
        return;
      }
    }
  });
  for (int i = 0; i < kCount && failures.load() == 0; ++i) {
    auto m = rx->Receive(milliseconds(30000));
    ASSERT_TRUE(m.ok()) << "message " << i << ": " << m.status();
    const size_t size = kSizes[i % kSizes.size()];
    ASSERT_EQ(m->size(), size) << "message " << i;
    EXPECT_TRUE(*m == Pattern(i, size)) << "message " << i << " (" << size << " B) differs";
  }
  sender.join();
  EXPECT_EQ(rx->pending(), 0u);
  EXPECT_EQ(tx->bootstraps(), 1);
}

TEST_P(NcclLinkTest, TwoSendersIntoOneInbox) {
  auto rx = MustListen();
  ASSERT_TRUE(rx);
  constexpr int kSenders = 2, kEach = 30;
  const std::vector<size_t> sizes = {16, 5000, 1 << 20, 64, 8 << 20, 200000};
  auto expected = [&](int s, int i) {
    std::string tag = std::to_string(s) + ":" + std::to_string(i) + ";";
    std::string body = Pattern(s * 1000 + i, sizes[i % sizes.size()]);
    return tag + body.substr(tag.size());
  };
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int s = 0; s < kSenders; ++s) {
    threads.emplace_back([&, s] {
      auto tx = MustConnect(rx->address());
      if (!tx) return ++failures, void();
      for (int i = 0; i < kEach; ++i) {
        if (absl::Status st = tx->Send(expected(s, i)); !st.ok()) {
          ADD_FAILURE() << "sender " << s << " message " << i << ": " << st;
          ++failures;
          return;
        }
      }
    });
  }
  std::map<int, int> next;
  for (int k = 0; k < kSenders * kEach && failures.load() == 0; ++k) {
    auto m = rx->Receive(milliseconds(30000));
    ASSERT_TRUE(m.ok()) << m.status();
    const size_t colon = m->find(':'), semi = m->find(';');
    ASSERT_NE(semi, std::string::npos);
    const int s = std::stoi(m->substr(0, colon)), i = std::stoi(m->substr(colon + 1, semi));
    EXPECT_EQ(i, next[s]) << "sender " << s << " out of order";
    EXPECT_TRUE(*m == expected(s, i)) << "sender " << s << " message " << i << " differs";
    next[s] = i + 1;
  }
  for (auto& t : threads) t.join();
  for (int s = 0; s < kSenders; ++s) EXPECT_EQ(next[s], kEach) << "sender " << s;
}

TEST_P(NcclLinkTest, DeviceMessagesInterleaveWithHostMessages) {
  auto rx = MustListen();
  ASSERT_TRUE(rx);
  auto tx = MustConnect(rx->address());
  ASSERT_TRUE(tx);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t producer = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  const size_t n = (3 << 20) + 3;
  const std::string payload = Pattern(7, n);
  void* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, n), cudaSuccess);
  std::memcpy(pinned, payload.data(), n);
  cuda::DeviceBuffer d(n), one(1);
  // The upload is still in flight on `producer` when SendDevice is called:
  // the transfer must wait for it through the event, not read early.
  ASSERT_EQ(cudaMemcpyAsync(d.get(), pinned, n, cudaMemcpyHostToDevice, producer), cudaSuccess);
  ASSERT_TRUE(tx->SendDevice("hdr-1", d.get(), n, producer).ok());
  // Send returned: the bytes have left, so the buffer may be overwritten.
  ASSERT_EQ(cudaMemsetAsync(d.get(), 0, n, producer), cudaSuccess);
  ASSERT_TRUE(tx->Send("small host message").ok());
  ASSERT_EQ(cudaMemsetAsync(one.get(), 0x5a, 1, producer), cudaSuccess);
  ASSERT_TRUE(tx->SendDevice("hdr-2", one.get(), 1, producer).ok());
  const std::string big = Pattern(9, 2 << 20);
  ASSERT_TRUE(tx->Send(big).ok());
  ASSERT_TRUE(tx->SendDevice("empty payload", nullptr, 0, producer).ok());
  ASSERT_EQ(cudaMemcpyAsync(d.get(), pinned, n, cudaMemcpyHostToDevice, producer), cudaSuccess);
  ASSERT_TRUE(tx->SendDevice("for a host consumer:", d.get(), n, producer).ok());

  auto m1 = rx->ReceiveDevice(milliseconds(30000));
  ASSERT_TRUE(m1.ok()) << m1.status();
  EXPECT_EQ(m1->header, "hdr-1");
  ASSERT_EQ(m1->payload_bytes, n);
  EXPECT_EQ(DeviceOf(m1->payload.get()), rx_device());
  std::vector<char> got = CopyToHost(m1->payload.get(), n);
  EXPECT_TRUE(std::string(got.begin(), got.end()) == payload) << "device payload differs";

  auto m2 = rx->Receive(milliseconds(30000));
  ASSERT_TRUE(m2.ok()) << m2.status();
  EXPECT_EQ(*m2, "small host message");

  auto m3 = rx->ReceiveDevice(milliseconds(30000));
  ASSERT_TRUE(m3.ok()) << m3.status();
  EXPECT_EQ(m3->header, "hdr-2");
  ASSERT_EQ(m3->payload_bytes, 1u);
  EXPECT_EQ(CopyToHost(m3->payload.get(), 1)[0], '\x5a');

  // A host message through ReceiveDevice: all of it in the header.
  auto m4 = rx->ReceiveDevice(milliseconds(30000));
  ASSERT_TRUE(m4.ok()) << m4.status();
  EXPECT_TRUE(m4->header == big);
  EXPECT_EQ(m4->payload_bytes, 0u);

  auto m5 = rx->ReceiveDevice(milliseconds(30000));
  ASSERT_TRUE(m5.ok()) << m5.status();
  EXPECT_EQ(m5->header, "empty payload");
  EXPECT_EQ(m5->payload_bytes, 0u);

  // A device message through Receive: header + payload.
  auto m6 = rx->Receive(milliseconds(30000));
  ASSERT_TRUE(m6.ok()) << m6.status();
  EXPECT_TRUE(*m6 == "for a host consumer:" + payload);

  EXPECT_EQ(rx->pending(), 0u);
  cudaFreeHost(pinned);
  cudaStreamDestroy(producer);
}

TEST_P(NcclLinkTest, SendDeviceRejectsABadCall) {
  auto rx = MustListen();
  ASSERT_TRUE(rx);
  auto tx = MustConnect(rx->address());
  ASSERT_TRUE(tx);
  EXPECT_EQ(tx->SendDevice("h", nullptr, 16, nullptr).code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(tx->Send("still fine").ok());
  EXPECT_EQ(*rx->Receive(milliseconds(30000)), "still fine");
}

TEST_P(NcclLinkTest, SenderSurvivesReceiverRestart) {
  auto rx = MustListen();
  ASSERT_TRUE(rx);
  const std::string address = rx->address();
  auto tx = MustConnect(address);
  ASSERT_TRUE(tx);
  const std::string big = Pattern(1, 1 << 20);
  ASSERT_TRUE(tx->Send("before").ok());
  ASSERT_TRUE(tx->Send(big).ok());
  EXPECT_EQ(*rx->Receive(milliseconds(30000)), "before");
  EXPECT_TRUE(*rx->Receive(milliseconds(30000)) == big);
  rx->Shutdown();
  rx.reset();

  // Nobody listens: UNAVAILABLE naming the address, promptly.
  absl::Status dead = tx->Send(big);
  EXPECT_EQ(dead.code(), absl::StatusCode::kUnavailable) << dead;
  EXPECT_NE(dead.message().find(address), std::string::npos) << dead;

  // A new receiver on the same port: the link is bootstrapped again.
  auto again = MustListen(PortOf(address));
  ASSERT_TRUE(again);
  const std::string big2 = Pattern(2, 2 << 20);
  ASSERT_TRUE(tx->Send(big2).ok());
  ASSERT_TRUE(tx->Send("after").ok());
  auto m = again->Receive(milliseconds(30000));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(*m == big2);
  EXPECT_EQ(*again->Receive(milliseconds(30000)), "after");
  EXPECT_EQ(tx->bootstraps(), 2);
}

TEST_P(NcclLinkTest, ReceiverGoingAwayMidStreamFailsSendWithoutHanging) {
  auto rx = MustListen();
  ASSERT_TRUE(rx);
  const std::string address = rx->address();
  auto tx = MustConnect(address);
  ASSERT_TRUE(tx);
  const std::string big = Pattern(3, 4 << 20);
  std::atomic<int> sent{0};
  absl::Status last;
  std::thread sender([&] {
    for (int i = 0; i < 2000; ++i) {
      last = tx->Send(big);
      if (!last.ok()) return;
      ++sent;
    }
  });
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(rx->Receive(milliseconds(30000)).ok());
  rx->Shutdown();  // transfers in flight are aborted (ncclCommAbort)
  rx.reset();
  sender.join();  // a sender that hangs instead fails at ctest's timeout
  EXPECT_EQ(last.code(), absl::StatusCode::kUnavailable) << last << " after " << sent << " sends";
  // The same sender bootstraps a new link to a new receiver.
  auto again = MustListen(PortOf(address));
  ASSERT_TRUE(again);
  ASSERT_TRUE(tx->Send(big).ok());
  EXPECT_TRUE(*again->Receive(milliseconds(30000)) == big);
}

TEST_P(NcclLinkTest, ShutdownWakesReceivers) {
  auto rx = MustListen();
  ASSERT_TRUE(rx);
  auto tx = MustConnect(rx->address());
  ASSERT_TRUE(tx);
  ASSERT_TRUE(tx->Send(Pattern(4, 100000)).ok());  // a live link at shutdown
  ASSERT_TRUE(rx->Receive(milliseconds(30000)).ok());
  std::vector<std::thread> waiters;
  std::atomic<int> cancelled{0};
  for (int i = 0; i < 3; ++i) {
    waiters.emplace_back([&, i] {
      absl::StatusCode code = i == 0 ? rx->ReceiveDevice(milliseconds(600000)).status().code()
                                     : rx->Receive(milliseconds(600000)).status().code();
      if (code == absl::StatusCode::kCancelled) ++cancelled;
    });
  }
  rx->Shutdown();
  for (auto& t : waiters) t.join();
  EXPECT_EQ(cancelled.load(), 3);
  EXPECT_EQ(rx->Receive(milliseconds(0)).status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(tx->Send(Pattern(5, 100000)).code(), absl::StatusCode::kUnavailable);
}

INSTANTIATE_TEST_SUITE_P(Modes, NcclLinkTest, ::testing::Values("same_device", "two_gpu"),
                         [](const auto& info) { return info.param; });

// --- what one GPU can test of the 2-rank bootstrap ------------------------------------

// A 2-rank link with both ends on one GPU cannot work (NCCL: "Duplicate GPU
// detected"); the receiver refuses it before anyone joins a communicator.
TEST(NcclBootstrap, TwoRankLinkOnOneGpuIsRefused) {
  SPECLINE_SKIP_WITHOUT_GPU();
  NcclOptions o;
  o.device = 0;
  auto rx = ListenNccl("127.0.0.1", 0, o);
  ASSERT_TRUE(rx.ok()) << rx.status();
  auto tx = ConnectNccl("127.0.0.1", PortOf((*rx)->address()), o);
  ASSERT_TRUE(tx.ok()) << tx.status();
  absl::Status st = (*tx)->Send(Pattern(0, 100000));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("Duplicate GPU"), std::string::npos) << st;
  // The same receiver takes a same-device link from this process.
  o.same_device = true;
  auto self = ConnectNccl("127.0.0.1", PortOf((*rx)->address()), o);
  ASSERT_TRUE(self.ok());
  ASSERT_TRUE((*self)->Send(Pattern(1, 100000)).ok());
  auto m = (*rx)->Receive(milliseconds(30000));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(*m == Pattern(1, 100000));
}

// A hand-written receiver: greets like a receiver without a cluster secret
// (data_plane_auth.h), checks the sender's hello on the wire and answers as
// told. Runs on its own thread; `reply` gets the hello body.
class FakeReceiver {
 public:
  explicit FakeReceiver(std::function<void(int fd, const std::string& hello)> reply)
      : reply_(std::move(reply)) {
    int port = 0;
    auto fd = ListenSocket("127.0.0.1", 0, &port);
    EXPECT_TRUE(fd.ok()) << fd.status();
    listen_fd_ = *fd;
    port_ = port;
    thread_ = std::thread([this] {
      int fd = accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      absl::Status st = AcceptHandshake(fd, WireProtocol::kNccl, TransportOptions{});
      EXPECT_TRUE(st.ok()) << st;
      std::string hello;
      if (st.ok()) st = ReadFrame(fd, &hello, kNcclFrameMagic);
      EXPECT_TRUE(st.ok()) << st;
      if (st.ok()) reply_(fd, hello);
      close(fd);
    });
  }
  ~FakeReceiver() {
    shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    close(listen_fd_);
  }
  int port() const { return port_; }

 private:
  std::function<void(int, const std::string&)> reply_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

std::unique_ptr<NcclSender> SenderTo(int port, int timeout_ms, bool same_device = false) {
  NcclOptions o;
  o.device = 0;
  o.nccl_timeout_ms = timeout_ms;
  o.same_device = same_device;
  auto tx = ConnectNccl("127.0.0.1", port, o);
  EXPECT_TRUE(tx.ok()) << tx.status();
  return tx.ok() ? std::move(*tx) : nullptr;
}

TEST(NcclBootstrap, HelloCarriesTheUniqueIdAndARefusalReachesTheSender) {
  SPECLINE_SKIP_WITHOUT_GPU();
  std::string seen;
  {
    FakeReceiver peer([&](int fd, const std::string& hello) {
      seen = hello;
      const std::string refusal = "Atest refusal";
      ASSERT_TRUE(WriteFrameParts(fd, kNcclFrameMagic, {refusal}).ok());
    });
    auto tx = SenderTo(peer.port(), 5000);
    ASSERT_TRUE(tx);
    absl::Status st = tx->Send("small messages bootstrap the link too");
    EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
    EXPECT_NE(st.message().find("test refusal"), std::string::npos) << st;
    EXPECT_EQ(tx->bootstraps(), 0);
  }
  // 'H' | version u32 = 1 | mode u8 = 0 (2-rank) | pid u64 | token u64 |
  // ncclUniqueId (128 B) | "hostname/bus id"
  const size_t fixed = 1 + 4 + 1 + 8 + 8 + 128;
  ASSERT_GT(seen.size(), fixed);
  EXPECT_EQ(seen[0], 'H');
  EXPECT_EQ(seen[1], 1);
  EXPECT_EQ(seen[5], 0);
  uint64_t pid = 0;
  std::memcpy(&pid, seen.data() + 6, 8);
  EXPECT_EQ(pid, static_cast<uint64_t>(getpid()));
  const std::string id = seen.substr(22, 128);
  EXPECT_NE(id, std::string(128, '\0')) << "ncclUniqueId is all zero";
  EXPECT_NE(seen.find('/', fixed), std::string::npos) << "identity: " << seen.substr(fixed);
}

TEST(NcclBootstrap, APeerThatNeverJoinsTimesOut) {
  SPECLINE_SKIP_WITHOUT_GPU();
  std::atomic<bool> release{false};
  FakeReceiver peer([&](int fd, const std::string&) {
    // Accept the link, then never join the communicator (and keep the
    // connection open): the sender's join must give up at its timeout and
    // abort the half-made communicator.
    ASSERT_TRUE(WriteFrameParts(fd, kNcclFrameMagic, {std::string_view("A", 1)}).ok());
    while (!release.load()) std::this_thread::sleep_for(milliseconds(10));
  });
  auto tx = SenderTo(peer.port(), 1500);
  ASSERT_TRUE(tx);
  const auto start = std::chrono::steady_clock::now();
  absl::Status st = tx->Send(Pattern(0, 100000));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  release = true;
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("timed out"), std::string::npos) << st;
  EXPECT_GT(seconds, 1.0);  // it waited for its 1.5 s timeout (a causal bound)
}

TEST(NcclBootstrap, APeerThatHangsUpDuringTheJoinFailsPromptly) {
  SPECLINE_SKIP_WITHOUT_GPU();
  FakeReceiver peer([&](int fd, const std::string&) {
    ASSERT_TRUE(WriteFrameParts(fd, kNcclFrameMagic, {std::string_view("A", 1)}).ok());
    std::this_thread::sleep_for(milliseconds(300));
  });  // closes the connection
  auto tx = SenderTo(peer.port(), 20000);
  ASSERT_TRUE(tx);
  absl::Status st = tx->Send(Pattern(0, 100000));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  // Promptly: it failed on the hang-up, not at its 20 s timeout (no clock
  // is read: a bound on the time would fail on a loaded machine).
  EXPECT_EQ(st.message().find("timed out"), std::string::npos) << st;
}

TEST(NcclBootstrap, ProtocolMismatchWithTcpIsRefused) {
  SPECLINE_SKIP_WITHOUT_GPU();
  // nccl:// sender -> tcp:// receiver: the receiver drops the hello (wrong
  // magic), nothing reaches its inbox, the sender says why.
  auto tcp_rx = Listen("tcp://127.0.0.1:0");
  ASSERT_TRUE(tcp_rx.ok());
  auto tx = SenderTo(PortOf((*tcp_rx)->address()), 5000);
  ASSERT_TRUE(tx);
  absl::Status st = tx->Send("hello?");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.message().find("nccl:// receiver"), std::string::npos) << st;
  EXPECT_EQ((*tcp_rx)->Receive(milliseconds(100)).status().code(),
            absl::StatusCode::kDeadlineExceeded);

  // tcp:// sender -> nccl:// receiver: dropped at the first frame; the
  // receiver keeps serving real links.
  auto rx = Listen("nccl://127.0.0.1:0");
  ASSERT_TRUE(rx.ok()) << rx.status();
  const int port = PortOf((*rx)->address());
  auto tcp_tx = Connect("tcp://127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(tcp_tx.ok());
  (void)(*tcp_tx)->Send("not an nccl frame");
  // Right magic, wrong first frame (after the receiver's greeting).
  int fd = *ConnectSocket("127.0.0.1", port, 1000);
  ASSERT_TRUE(ConnectHandshake(fd, WireProtocol::kNccl, TransportOptions{}, "raw").ok());
  ASSERT_TRUE(WriteFrameParts(fd, kNcclFrameMagic, {std::string_view("Inot a hello")}).ok());
  char c;
  EXPECT_LE(recv(fd, &c, 1, 0), 0);  // the receiver hangs up
  close(fd);
  auto real = SenderTo(port, 20000, /*same_device=*/true);
  ASSERT_TRUE(real);
  ASSERT_TRUE(real->Send("still here").ok());
  auto m = (*rx)->Receive(milliseconds(30000));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, "still here");
  EXPECT_EQ((*rx)->pending(), 0u);
}

TEST(NcclBootstrap, ClusterSecretIsChecked) {
  SPECLINE_SKIP_WITHOUT_GPU();
  // The control connection runs the data-plane handshake before the hello
  // (docs/transport.md): without the receiver's secret no link is
  // bootstrapped and nothing reaches its inbox.
  TransportOptions secret;
  secret.secret = "nccl-cluster-secret";
  NcclOptions o;
  o.device = 0;
  auto rx = ListenNccl("127.0.0.1", 0, o, secret);
  ASSERT_TRUE(rx.ok()) << rx.status();
  const int port = PortOf((*rx)->address());
  o.same_device = true;
  o.nccl_timeout_ms = 20000;
  auto none = ConnectNccl("127.0.0.1", port, o);
  ASSERT_TRUE(none.ok()) << none.status();
  absl::Status st = (*none)->Send("injected");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
  EXPECT_EQ((*none)->bootstraps(), 0);
  TransportOptions wrong;
  wrong.secret = "another secret";
  auto bad = ConnectNccl("127.0.0.1", port, o, wrong);
  ASSERT_TRUE(bad.ok()) << bad.status();
  st = (*bad)->Send("injected");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnauthenticated) << st;
  auto good = ConnectNccl("127.0.0.1", port, o, secret);
  ASSERT_TRUE(good.ok()) << good.status();
  ASSERT_TRUE((*good)->Send("authenticated").ok());
  auto m = (*rx)->Receive(milliseconds(30000));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, "authenticated");
  EXPECT_EQ((*rx)->pending(), 0u);
}

#endif  // SPECLINE_HAVE_NCCL

}  // namespace
}  // namespace specline::transport
