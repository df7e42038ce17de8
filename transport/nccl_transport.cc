#include "transport/nccl_transport.h"

#include <nccl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "transport/connection_server.h"
#include "transport/data_plane_auth.h"
#include "transport/message_queue.h"
#include "transport/tcp_socket.h"

namespace specline::transport {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::microseconds;

// --- wire format ------------------------------------------------------------
// Control frames are tcp_socket.h frames with their own magic word, so a
// tcp:// peer on either side is refused at its first frame. The first
// payload byte says what the frame is.
constexpr uint32_t kNcclMagic = kNcclFrameMagic;
constexpr uint32_t kProtocolVersion = 1;

enum Kind : char {
  kHello = 'H',   // sender -> receiver, first frame (layout below)
  kAck = 'A',     // receiver -> sender, reply to kHello: empty = accepted, else why not
  kInline = 'I',  // a host message; its bytes follow in the frame
  kBulk = 'B',    // a host message of u64 n bytes, which follow on NCCL
  kDevice = 'D',  // a device message: u64 n, then its header; n bytes follow on NCCL
};

enum Mode : uint8_t { kTwoRank = 0, kSameDevice = 1 };

// kHello: 'H' | version u32 | mode u8 | pid u64 | token u64 |
//         ncclUniqueId (128 B) | identity (rest: "hostname/PCI bus id")
struct Hello {
  uint32_t version = 0;
  uint8_t mode = kTwoRank;
  uint64_t pid = 0;
  uint64_t token = 0;  // same-device mode: the sender's SelfChannel
  ncclUniqueId id{};
  std::string identity;
};
constexpr size_t kHelloFixedBytes = 1 + 4 + 1 + 8 + 8 + sizeof(ncclUniqueId);
// The largest hello or ack either side reads (the identity and a refusal's
// reason are short texts).
constexpr size_t kMaxHelloBytes = 4096;
// Kind byte + u64 count in front of a bulk or device frame's header.
constexpr size_t kCountedPrefixBytes = 9;

void PutLE(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
uint64_t GetLE(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<unsigned char>(p[i])} << (8 * i);
  return v;
}

std::string EncodeHello(const Hello& h) {
  std::string out(1, kHello);
  PutLE(h.version, 4, &out);
  PutLE(h.mode, 1, &out);
  PutLE(h.pid, 8, &out);
  PutLE(h.token, 8, &out);
  out.append(reinterpret_cast<const char*>(&h.id), sizeof(h.id));
  out += h.identity;
  return out;
}

bool DecodeHello(const std::string& body, Hello* h) {
  if (body.size() < kHelloFixedBytes || body[0] != kHello) return false;
  const char* p = body.data() + 1;
  h->version = static_cast<uint32_t>(GetLE(p, 4));
  h->mode = static_cast<uint8_t>(GetLE(p + 4, 1));
  h->pid = GetLE(p + 5, 8);
  h->token = GetLE(p + 13, 8);
  std::memcpy(&h->id, p + 21, sizeof(h->id));
  h->identity = body.substr(kHelloFixedBytes);
  return h->mode == kTwoRank || h->mode == kSameDevice;
}

// kBulk / kDevice: the NCCL byte count after the kind byte.
std::string CountField(uint64_t n) {
  std::string out;
  PutLE(n, 8, &out);
  return out;
}

std::string NcclAddress(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return absl::StrCat("nccl://", v6 ? "[" : "", host, v6 ? "]" : "", ":", port);
}

// --- CUDA / NCCL plumbing -----------------------------------------------------
std::string CudaText(cudaError_t e) {
  return absl::StrCat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

#define SPECLINE_RETURN_IF_CUDA(call)                                                    \
  do {                                                                                   \
    const cudaError_t specline_e_ = (call);                                              \
    if (specline_e_ != cudaSuccess) {                                                    \
      return absl::InternalError(absl::StrCat(#call, ": ", CudaText(specline_e_)));      \
    }                                                                                    \
  } while (0)

std::string NcclText(ncclResult_t r, ncclComm_t comm) {
  std::string s = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') absl::StrAppend(&s, " (", last, ")");
  return s;
}

// Makes `device` current for the calling thread and restores the previous
// one: senders run on their caller's thread, which may drive other devices.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : target_(device) {
    if (cudaGetDevice(&saved_) != cudaSuccess) saved_ = -1;
    if (saved_ != target_) cudaSetDevice(target_);
  }
  ~DeviceGuard() {
    if (saved_ >= 0 && saved_ != target_) cudaSetDevice(saved_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int saved_ = -1;
  int target_;
};

// Grows a staging buffer, turning the allocation failure (an exception in
// device_buffer.h) into a status.
template <typename Buffer>
absl::Status Grow(Buffer& buffer, size_t bytes, const char* what) {
  try {
    buffer.Resize(bytes);
  } catch (const cuda::CudaError& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", bytes, " bytes of ", what, ": ", e.what()));
  }
  return absl::OkStatus();
}

// What a wait keeps an eye on besides its own condition. Every wait in this
// file is bounded: a dead peer, an NCCL error, a shutdown or the deadline
// ends it.
struct Watch {
  ncclComm_t comm = nullptr;                   // asynchronous NCCL errors
  int fd = -1;                                 // the peer hanging up
  const std::atomic<bool>* cancel = nullptr;   // receiver shutdown
  Clock::time_point deadline = Clock::time_point::max();
};

// How long a wait goes on polling after the peer hung up: a sender may close
// right after its last transfer completed on its side, while the same
// transfer is still finishing on ours.
constexpr auto kHangupGrace = std::chrono::milliseconds(200);

// Sets `*hung_up` when the reason is the peer closing the connection.
absl::Status CheckWatch(const Watch& w, bool* hung_up = nullptr) {
  if (w.cancel != nullptr && w.cancel->load()) return absl::CancelledError("receiver shut down");
  if (w.comm != nullptr) {
    ncclResult_t state = ncclSuccess;
    ncclResult_t r = ncclCommGetAsyncError(w.comm, &state);
    if (r != ncclSuccess) {
      return absl::UnavailableError(absl::StrCat("ncclCommGetAsyncError: ", NcclText(r, w.comm)));
    }
    if (state != ncclSuccess && state != ncclInProgress) {
      return absl::UnavailableError(absl::StrCat("NCCL error: ", NcclText(state, w.comm)));
    }
  }
  if (w.fd >= 0 && PeerHungUp(w.fd)) {
    if (hung_up != nullptr) *hung_up = true;
    return absl::UnavailableError("the peer closed the control connection");
  }
  if (Clock::now() > w.deadline) return absl::DeadlineExceededError("timed out");
  return absl::OkStatus();
}

// Polls `ready` (StatusOr<bool>: true = done) until it says done, checking
// the watch every 200 us: spins (yielding) for the first 50 us, which covers
// small transfers, then sleeps in steps growing to 100 us. After a hang-up
// it keeps polling for kHangupGrace before giving up.
template <typename Ready>
absl::Status PollUntil(Ready ready, const Watch& w, const char* what) {
  const Clock::time_point start = Clock::now();
  Clock::time_point checked = start;
  Clock::time_point give_up = Clock::time_point::max();
  absl::Status failure;
  int sleep_us = 0;
  while (true) {
    absl::StatusOr<bool> done = ready();
    if (!done.ok()) return done.status();
    if (*done) return absl::OkStatus();
    const Clock::time_point now = Clock::now();
    if (now >= give_up) return failure;
    if (failure.ok() && now - checked >= microseconds(200)) {
      checked = now;
      bool hung_up = false;
      if (absl::Status st = CheckWatch(w, &hung_up); !st.ok()) {
        failure = absl::Status(st.code(), absl::StrCat("waiting for ", what, ": ", st.message()));
        if (!hung_up) return failure;
        give_up = now + kHangupGrace;
      }
    }
    if (now - start < microseconds(50)) {
      std::this_thread::yield();
    } else {
      sleep_us = std::clamp(sleep_us * 2, 5, 100);
      std::this_thread::sleep_for(microseconds(sleep_us));
    }
  }
}

// The communicator's state: true once ready, false while in progress.
absl::StatusOr<bool> CommReady(ncclComm_t comm, const char* what) {
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(comm, &state);
  if (r != ncclSuccess) return absl::UnavailableError(absl::StrCat(what, ": ", NcclText(r, comm)));
  if (state == ncclInProgress) return false;
  if (state != ncclSuccess) {
    return absl::UnavailableError(absl::StrCat(what, ": ", NcclText(state, comm)));
  }
  return true;
}

// Checks an NCCL call on a nonblocking communicator (w.comm): ncclInProgress
// means it goes on in the background, so wait until the communicator says
// it is done.
absl::Status NcclOk(ncclResult_t r, const char* what, const Watch& w) {
  if (r == ncclSuccess) return absl::OkStatus();
  if (r != ncclInProgress) {
    return absl::UnavailableError(absl::StrCat(what, ": ", NcclText(r, w.comm)));
  }
  return PollUntil([&] { return CommReady(w.comm, what); }, w, what);
}

// Waits for everything queued on `stream` so far, through `event`.
absl::Status WaitStream(cudaStream_t stream, cudaEvent_t event, const Watch& w,
                        const char* what) {
  SPECLINE_RETURN_IF_CUDA(cudaEventRecord(event, stream));
  return PollUntil(
      [&]() -> absl::StatusOr<bool> {
        const cudaError_t e = cudaEventQuery(event);
        if (e == cudaSuccess) return true;
        if (e == cudaErrorNotReady) return false;
        return absl::InternalError(absl::StrCat("cudaEventQuery: ", CudaText(e)));
      },
      w, what);
}

// A communicator created nonblocking (so that no call can hang on a dead
// peer). Released with ncclCommAbort, never ncclCommDestroy: destroy may
// wait for operations a dead peer will never match, abort does not.
class Comm {
 public:
  Comm() = default;
  ~Comm() { Abort(); }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  // Starts joining `nranks` communicator `id` as `rank` and waits until it
  // is up (both ranks joined) or the watch fires.
  absl::Status Init(int nranks, const ncclUniqueId& id, int rank, Watch w) {
    Abort();
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t r = ncclCommInitRankConfig(&comm_, nranks, id, rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      Abort();
      return absl::UnavailableError(
          absl::StrCat("ncclCommInitRankConfig: ", NcclText(r, comm_)));
    }
    w.comm = nullptr;  // CommReady reports its errors
    absl::Status st = PollUntil([&] { return CommReady(comm_, "ncclCommInitRankConfig"); }, w,
                                "the NCCL communicator");
    if (!st.ok()) Abort();  // also ends a join still in progress
    return st;
  }
  void Abort() {
    if (comm_ != nullptr) ncclCommAbort(comm_);  // blocking, even for nonblocking comms
    comm_ = nullptr;
  }
  ncclComm_t get() const { return comm_; }

 private:
  ncclComm_t comm_ = nullptr;
};

// --- same-device mode -----------------------------------------------------------
// The meeting point of a link's two ends when they share a process and a
// GPU. The sender offers its (staged or caller's) device buffer; the
// receiver's thread issues ncclSend and ncclRecv to itself in one group on
// its 1-rank communicator, then reports back. One offer at a time: sends
// are synchronous.
class SelfChannel {
 public:
  struct Offer {
    const void* src = nullptr;
    size_t n = 0;
    cudaEvent_t ready = nullptr;  // src is valid once this completed
  };

  // Sender: offers the bytes announced by the frame just written.
  absl::Status Put(const Offer& offer) {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return absl::UnavailableError(why_);
    offer_ = offer;
    state_ = State::kOffered;
    cv_.notify_all();
    return absl::OkStatus();
  }

  // Sender: waits until the receiver is done with the offer. An offer not
  // yet taken is withdrawn when the watch fires; a taken one is waited for
  // (the receiver's own wait is bounded), so the caller's buffer is never
  // read after this returns.
  absl::Status AwaitDone(const Watch& w) {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      if (state_ == State::kDone) {
        state_ = State::kIdle;
        return absl::OkStatus();
      }
      if (state_ == State::kFailed) {
        state_ = State::kIdle;
        return failure_;
      }
      if (state_ == State::kOffered) {
        if (absl::Status st = closed_ ? absl::UnavailableError(why_) : CheckWatch(w); !st.ok()) {
          state_ = State::kIdle;
          return st;
        }
      }
      cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
  }

  // Receiver: takes the offer the frame announced, waiting for it.
  absl::StatusOr<Offer> Take(const Watch& w) {
    std::unique_lock<std::mutex> lock(mu_);
    while (state_ != State::kOffered) {
      if (closed_) return absl::UnavailableError(why_);
      if (absl::Status st = CheckWatch(w); !st.ok()) return st;
      cv_.wait_for(lock, std::chrono::milliseconds(1));
    }
    state_ = State::kTaken;
    return offer_;
  }

  // Receiver: the taken offer has been copied (ok) or not.
  void Finish(const absl::Status& st) {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kTaken) return;
    state_ = st.ok() ? State::kDone : State::kFailed;
    failure_ = st;
    cv_.notify_all();
  }

  // Either end going away: fails whatever is pending.
  void Close(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    why_ = why;
    if (state_ == State::kTaken || state_ == State::kOffered) {
      state_ = State::kFailed;
      failure_ = absl::UnavailableError(why);
    }
    cv_.notify_all();
  }

 private:
  enum class State { kIdle, kOffered, kTaken, kDone, kFailed };
  std::mutex mu_;
  std::condition_variable cv_;
  State state_ = State::kIdle;
  Offer offer_;
  absl::Status failure_;
  bool closed_ = false;
  std::string why_;
};

// Process-wide token -> channel map: the hello names the sender's channel,
// the receiver's thread claims it (once).
struct SelfRegistry {
  std::mutex mu;
  std::map<uint64_t, std::weak_ptr<SelfChannel>> channels;
  uint64_t next = 1;
};
SelfRegistry& Registry() {
  static SelfRegistry* r = new SelfRegistry;  // never destroyed: used from static dtors
  return *r;
}
uint64_t RegisterChannel(const std::shared_ptr<SelfChannel>& channel) {
  SelfRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  std::erase_if(r.channels, [](const auto& kv) { return kv.second.expired(); });
  const uint64_t token = r.next++;
  r.channels[token] = channel;
  return token;
}
std::shared_ptr<SelfChannel> ClaimChannel(uint64_t token) {
  SelfRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.channels.find(token);
  if (it == r.channels.end()) return nullptr;
  std::shared_ptr<SelfChannel> channel = it->second.lock();
  r.channels.erase(it);
  return channel;
}

// "hostname/PCI bus id": two ends with the same identity share a GPU.
std::string GpuIdentity(int device) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  char bus[64] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), device) != cudaSuccess) {
    cudaGetLastError();
    std::snprintf(bus, sizeof(bus), "device-%d", device);
  }
  return absl::StrCat(host, "/", bus);
}

// Which device an end uses: the option, else the current one; UNAVAILABLE
// without a usable device.
absl::StatusOr<int> PickDevice(const NcclOptions& options, const std::string& address) {
  std::string why;
  if (!cuda::DeviceAvailable(&why)) {
    return absl::UnavailableError(
        absl::StrCat("cannot use ", address, ": no usable CUDA device (", why, ")"));
  }
  int count = 0;
  cudaGetDeviceCount(&count);
  int device = options.device;
  if (device < 0 && cudaGetDevice(&device) != cudaSuccess) device = 0;
  if (device >= count) {
    return absl::InvalidArgumentError(absl::StrCat("cannot use ", address, ": CUDA device ",
                                                   device, " does not exist (", count,
                                                   " present)"));
  }
  return device;
}

// The CUDA objects of one link end, created per (re)bootstrap.
struct LinkResources {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t done = nullptr;   // completion of the queued work
  cudaEvent_t ready = nullptr;  // same-device mode: the offered bytes are in place

  absl::Status Create(int dev) {
    device = dev;
    SPECLINE_RETURN_IF_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    SPECLINE_RETURN_IF_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    SPECLINE_RETURN_IF_CUDA(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    return absl::OkStatus();
  }
  // After the communicator was aborted: nothing of ours can still be stuck
  // on the stream, so waiting for it is bounded.
  void Destroy() {
    if (stream != nullptr) {
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
    if (done != nullptr) cudaEventDestroy(done);
    if (ready != nullptr) cudaEventDestroy(ready);
    cudaGetLastError();  // a failed link must not leave a sticky error behind
    stream = nullptr;
    done = ready = nullptr;
  }
};

// --- receiver -------------------------------------------------------------------
struct Item {
  bool device = false;
  std::string bytes;  // a host message, or a device message's header
  cuda::DeviceBuffer payload;
  size_t payload_bytes = 0;
};

class NcclReceiverImpl : public NcclReceiver {
 public:
  NcclReceiverImpl(int listen_fd, std::string address, const NcclOptions& options,
                   const TransportOptions& transport, int device)
      : address_(std::move(address)), options_(options), transport_(transport), device_(device),
        identity_(GpuIdentity(device)), drops_(address_),
        server_(
            listen_fd, [this](int fd) { return Handshake(fd); }, [this](int fd) { Serve(fd); },
            {transport.max_handshakes, transport.max_connections},
            [this](const std::string& why) { drops_.Warn(why); }) {}

  ~NcclReceiverImpl() override {
    Shutdown();
    if (copy_stream_ != nullptr) {
      DeviceGuard guard(device_);
      cudaStreamDestroy(copy_stream_);
    }
  }

  absl::StatusOr<std::string> Receive(std::chrono::milliseconds timeout) override {
    absl::StatusOr<Item> item = queue_.Pop(timeout);
    if (!item.ok()) return item.status();
    if (!item->device) return std::move(item->bytes);
    // A device message for a host consumer: header + payload.
    std::string out = std::move(item->bytes);
    const size_t header = out.size();
    out.resize(header + item->payload_bytes);
    if (item->payload_bytes > 0) {
      DeviceGuard guard(device_);
      std::lock_guard<std::mutex> lock(copy_mu_);
      if (copy_stream_ == nullptr) {
        SPECLINE_RETURN_IF_CUDA(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
      }
      SPECLINE_RETURN_IF_CUDA(cudaMemcpyAsync(out.data() + header, item->payload.get(),
                                              item->payload_bytes, cudaMemcpyDeviceToHost,
                                              copy_stream_));
      SPECLINE_RETURN_IF_CUDA(cudaStreamSynchronize(copy_stream_));
    }
    return out;
  }

  absl::StatusOr<DeviceMessage> ReceiveDevice(std::chrono::milliseconds timeout) override {
    absl::StatusOr<Item> item = queue_.Pop(timeout);
    if (!item.ok()) return item.status();
    DeviceMessage m;
    m.header = std::move(item->bytes);
    m.payload = std::move(item->payload);
    m.payload_bytes = item->payload_bytes;
    return m;
  }

  void Shutdown() override {
    stopping_.store(true);  // ends every wait of the connection threads
    queue_.Close();
    server_.Stop();
  }

  const std::string& address() const override { return address_; }
  size_t pending() const override { return queue_.size(); }
  int device() const override { return device_; }

 private:
  // One accepted link: its communicator (or same-device channel), stream
  // and staging. Torn down (communicator aborted) when the connection ends.
  struct Link {
    LinkResources res;
    Comm comm;
    std::shared_ptr<SelfChannel> self;
    cuda::DeviceBuffer staging;
    cuda::PinnedBuffer pinned;
    ~Link() {
      comm.Abort();
      res.Destroy();
      if (self) self->Close("the nccl:// receiver closed the link");
    }
  };

  Watch MakeWatch(const Link& link, int fd) const {
    Watch w;
    w.comm = link.comm.get();
    w.fd = fd;
    w.cancel = &stopping_;
    w.deadline = Clock::now() + std::chrono::milliseconds(options_.nccl_timeout_ms);
    return w;
  }

  // Checks the hello (before the ack: a refusal reaches the sender before
  // it starts joining a communicator that would never come up).
  absl::Status Accept(const Hello& hello, Link* link) {
    if (hello.version != kProtocolVersion) {
      return absl::FailedPreconditionError(absl::StrCat(
          "protocol version ", hello.version, " (this receiver speaks ", kProtocolVersion, ")"));
    }
    const bool same_process = hello.pid == static_cast<uint64_t>(getpid());
    if (hello.mode == kTwoRank && hello.identity == identity_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "both ends of the link are on GPU ", identity_,
          ": NCCL cannot place two ranks of one communicator on one GPU (\"Duplicate GPU "
          "detected\"); give each stage process its own GPU, or use same-device mode "
          "(both ends in one process)"));
    }
    if (hello.mode == kSameDevice) {
      if (!same_process || hello.identity != identity_) {
        return absl::FailedPreconditionError(absl::StrCat(
            "same-device mode needs both ends in one process on one GPU (sender on ",
            hello.identity, ", receiver on ", identity_, ")"));
      }
      link->self = ClaimChannel(hello.token);
      if (!link->self) return absl::FailedPreconditionError("unknown same-device channel");
    }
    return absl::OkStatus();
  }

  // After the ack: our rank joins the sender's communicator (2-rank mode),
  // or we make the 1-rank one of same-device mode from the sender's id.
  absl::Status Open(const Hello& hello, int fd, Link* link) {
    if (absl::Status st = link->res.Create(device_); !st.ok()) return st;
    Watch w = MakeWatch(*link, fd);
    return hello.mode == kTwoRank ? link->comm.Init(2, hello.id, 1, w)
                                  : link->comm.Init(1, hello.id, 0, w);
  }

  // Receives the `n` bytes a frame announced into device memory `dst` and,
  // when `host` is set, copies them on to it; returns once all of it is done.
  absl::Status Transfer(Link& link, int fd, void* dst, size_t n, void* host) {
    const Watch w = MakeWatch(link, fd);
    const ncclComm_t comm = link.comm.get();
    const cudaStream_t stream = link.res.stream;
    absl::Status st;
    if (!link.self) {
      st = NcclOk(ncclRecv(dst, n, ncclUint8, /*peer=*/0, comm, stream), "ncclRecv", w);
    } else {
      absl::StatusOr<SelfChannel::Offer> offer = link.self->Take(w);
      if (!offer.ok()) return offer.status();
      if (offer->n != n) {
        st = absl::InternalError(absl::StrCat("offer of ", offer->n, " bytes for a frame of ", n));
      } else if (cudaError_t e = cudaStreamWaitEvent(stream, offer->ready, 0); e != cudaSuccess) {
        st = absl::InternalError(absl::StrCat("cudaStreamWaitEvent: ", CudaText(e)));
      } else {
        // Send to self and receive from self: both in one group, or neither
        // could progress.
        ncclGroupStart();
        ncclResult_t sr = ncclSend(offer->src, n, ncclUint8, /*peer=*/0, comm, stream);
        ncclResult_t rr = ncclRecv(dst, n, ncclUint8, /*peer=*/0, comm, stream);
        ncclResult_t gr = ncclGroupEnd();
        const ncclResult_t first = sr != ncclSuccess ? sr : rr != ncclSuccess ? rr : gr;
        st = NcclOk(first, "ncclSend/ncclRecv to self", w);
      }
    }
    if (st.ok() && host != nullptr) {
      const cudaError_t e = cudaMemcpyAsync(host, dst, n, cudaMemcpyDeviceToHost, stream);
      if (e != cudaSuccess) {
        st = absl::InternalError(absl::StrCat("cudaMemcpyAsync: ", CudaText(e)));
      }
    }
    if (st.ok()) st = WaitStream(stream, link.res.done, w, "the NCCL receive");
    if (link.self) link.self->Finish(st);
    return st;
  }

  // The data-plane handshake (greeting, and with a secret the
  // challenge-response) on the control connection, before the hello: no
  // NCCL or CUDA resource exists for a peer that has not passed it.
  bool Handshake(int fd) {
    absl::Status st = AcceptHandshake(fd, WireProtocol::kNccl, transport_);
    if (st.ok()) return true;
    drops_.Warn(absl::StrCat("from ", PeerName(fd), ": ", st.message()));
    return false;
  }

  // The connection thread (after the handshake): hello, then frames until
  // the sender goes away, a transfer fails or the receiver shuts down.
  void Serve(int fd) {
    DeviceGuard guard(device_);
    Link link;
    std::string body;
    absl::Status st = ReadFrame(fd, &body, kNcclMagic, kMaxHelloBytes);
    if (st.code() == absl::StatusCode::kInvalidArgument) {
      drops_.Warn(absl::StrCat("from ", PeerName(fd), ": ", st.message()));
      return;
    }
    if (!st.ok()) return;
    Hello hello;
    if (!DecodeHello(body, &hello)) {
      drops_.Warn(absl::StrCat("from ", PeerName(fd), ": the first frame is not an nccl:// hello"));
      return;
    }
    st = Accept(hello, &link);
    const std::string refusal = st.ok() ? "" : std::string(st.message());
    if (!WriteFrameParts(fd, kNcclMagic, {std::string_view("A", 1), refusal}).ok() || !st.ok()) {
      if (!st.ok()) spdlog::warn("transport {}: refused a link: {}", address_, refusal);
      return;
    }
    if (st = Open(hello, fd, &link); !st.ok()) {
      // Closing the connection tells the sender, whose join then fails.
      if (st.code() != absl::StatusCode::kCancelled) {
        spdlog::warn("transport {}: link setup failed: {}", address_, std::string(st.message()));
      }
      return;
    }
    // A control frame holds at most a message (inline) or a device
    // message's header, plus its kind and count.
    const size_t limit = transport_.max_frame_bytes;
    const size_t frame_limit = std::min(kMaxFrameBytes, limit + kCountedPrefixBytes);
    while (!stopping_.load()) {
      st = ReadFrame(fd, &body, kNcclMagic, frame_limit);
      if (st.code() == absl::StatusCode::kInvalidArgument) {
        drops_.Warn(absl::StrCat("from ", PeerName(fd), ": ", st.message()));
        return;
      }
      if (!st.ok() || body.empty()) return;  // closed: the sender re-bootstraps if it needs to
      Item item;
      if (body[0] == kInline) {
        if (body.size() - 1 > limit) {
          drops_.Warn(absl::StrCat("from ", PeerName(fd), ": message of ", body.size() - 1,
                                   " bytes exceeds the limit of ", limit));
          return;
        }
        item.bytes.assign(body, 1);
      } else if ((body[0] == kBulk && body.size() == kCountedPrefixBytes) ||
                 (body[0] == kDevice && body.size() >= kCountedPrefixBytes)) {
        const uint64_t n = GetLE(body.data() + 1, 8);
        // Checked before any staging is grown: NCCL needs the whole buffer
        // before the bytes move, so this bound is what an authenticated
        // sender can make us allocate.
        const uint64_t header = body.size() - kCountedPrefixBytes;
        if (n > limit || header + n > limit) {
          drops_.Warn(absl::StrCat("from ", PeerName(fd), ": ", header + n,
                                   " bytes announced (limit ", limit, ")"));
          return;
        }
        if (body[0] == kBulk) {
          st = Grow(link.staging, n, "device staging");
          if (st.ok()) st = Grow(link.pinned, n, "pinned staging");
          if (st.ok() && n > 0) st = Transfer(link, fd, link.staging.get(), n, link.pinned.get());
          if (st.ok() && n > 0) item.bytes.assign(link.pinned.as<char>(), n);
        } else {
          item.device = true;
          item.bytes.assign(body, kCountedPrefixBytes);
          item.payload_bytes = n;
          st = Grow(item.payload, n, "device message payload");
          if (st.ok() && n > 0) st = Transfer(link, fd, item.payload.get(), n, nullptr);
        }
        if (!st.ok()) {
          if (st.code() != absl::StatusCode::kCancelled) {
            spdlog::warn("transport {}: link failed, dropping it: {}", address_,
                         std::string(st.message()));
          }
          return;
        }
      } else {
        drops_.Warn(absl::StrCat("from ", PeerName(fd), ": unknown frame kind ",
                                 static_cast<int>(body[0])));
        return;
      }
      if (!queue_.Push(std::move(item))) return;
    }
  }

  std::string address_;
  NcclOptions options_;
  TransportOptions transport_;
  int device_;
  std::string identity_;
  DropLog drops_;
  std::atomic<bool> stopping_{false};
  BasicMessageQueue<Item> queue_;
  std::mutex copy_mu_;
  cudaStream_t copy_stream_ = nullptr;  // Receive()'s device -> host copies
  ConnectionServer server_;             // last: its threads use the members above
};

// --- sender ---------------------------------------------------------------------
class NcclSenderImpl : public NcclSender {
 public:
  NcclSenderImpl(std::string host, int port, const NcclOptions& options,
                 const TransportOptions& transport, int device)
      : host_(std::move(host)), port_(port), options_(options), transport_(transport),
        device_(device), address_(NcclAddress(host_, port_)), identity_(GpuIdentity(device)) {}

  ~NcclSenderImpl() override {
    DeviceGuard guard(device_);
    Teardown();
    if (producer_ != nullptr) cudaEventDestroy(producer_);
  }

  absl::Status Send(std::string_view message) override {
    if (message.size() > transport_.max_frame_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("message of ", message.size(),
                                                     " bytes exceeds the frame limit of ",
                                                     transport_.max_frame_bytes));
    }
    DeviceGuard guard(device_);
    if (message.size() < options_.inline_limit) {
      return Deliver({std::string_view("I", 1), message}, message.size(), 0, nullptr);
    }
    const size_t n = message.size();
    const std::string count = CountField(n);
    return Deliver({std::string_view("B", 1), count}, n, n, [&]() -> absl::StatusOr<const void*> {
      if (absl::Status st = Grow(pinned_, n, "pinned staging"); !st.ok()) return st;
      if (absl::Status st = Grow(staging_, n, "device staging"); !st.ok()) return st;
      std::memcpy(pinned_.get(), message.data(), n);
      SPECLINE_RETURN_IF_CUDA(
          cudaMemcpyAsync(staging_.get(), pinned_.get(), n, cudaMemcpyHostToDevice, res_.stream));
      return staging_.get();
    });
  }

  absl::Status SendDevice(std::string_view header, const void* device_bytes, size_t n,
                          cudaStream_t producer) override {
    const size_t limit = std::min(kMaxFrameBytes - kCountedPrefixBytes, transport_.max_frame_bytes);
    if (n > limit || header.size() > limit - n) {
      return absl::InvalidArgumentError(absl::StrCat("device message of ", header.size(), " + ",
                                                     n, " bytes exceeds the limit of ", limit));
    }
    if (n > 0 && device_bytes == nullptr) {
      return absl::InvalidArgumentError("SendDevice: null device pointer");
    }
    DeviceGuard guard(device_);
    if (n > 0) {
      // The bytes are ready once the work queued on `producer` so far is
      // done: an event, no host synchronization.
      if (producer_ == nullptr) {
        SPECLINE_RETURN_IF_CUDA(cudaEventCreateWithFlags(&producer_, cudaEventDisableTiming));
      }
      if (cudaError_t e = cudaEventRecord(producer_, producer); e != cudaSuccess) {
        cudaGetLastError();
        return absl::InvalidArgumentError(
            absl::StrCat("SendDevice: cannot record an event on the producer stream (a stream of "
                         "device ", device_, "?): ", CudaText(e)));
      }
    }
    const std::string count = CountField(n);
    return Deliver({std::string_view("D", 1), count, header}, header.size() + n, n,
                   [&]() -> absl::StatusOr<const void*> {
                     SPECLINE_RETURN_IF_CUDA(cudaStreamWaitEvent(res_.stream, producer_, 0));
                     return device_bytes;
                   });
  }

  const std::string& address() const override { return address_; }
  int device() const override { return device_; }
  int bootstraps() const override { return bootstraps_.load(); }

 private:
  // Writes one control frame and moves `n` bytes over NCCL from what
  // `stage` returns (called once the link is up; it queues any copy on the
  // link's stream). `message_bytes`: the message's size as the receiver's
  // limit counts it. A link found dead before the frame went out is
  // re-bootstrapped once and the frame resent, as tcp:// reconnects; a
  // failure after it is UNAVAILABLE (the link is aborted and re-bootstrapped
  // at the next Send).
  template <typename Stage>
  absl::Status Deliver(std::initializer_list<std::string_view> frame, size_t message_bytes,
                       size_t n, Stage stage) {
    std::string why;
    for (int attempt = 0; attempt < 2; ++attempt) {
      // The receiver never writes after its ack: anything readable means it
      // closed (a restart or a failure on its side).
      if (fd_ >= 0 && PeerClosed(fd_)) Teardown();
      if (fd_ < 0) {
        if (absl::Status st = Bootstrap(); !st.ok()) {
          Teardown();
          // A failed authentication stays UNAUTHENTICATED: retrying will
          // not help until the configuration changes.
          return absl::Status(absl::IsUnauthenticated(st) ? st.code()
                                                          : absl::StatusCode::kUnavailable,
                              absl::StrCat("cannot reach ", address_, ": ", st.message()));
        }
      }
      if (message_bytes > peer_limit_) {
        // Refused here rather than by the receiver, which would drop the
        // link and the message with it.
        return absl::InvalidArgumentError(absl::StrCat("message of ", message_bytes,
                                                       " bytes exceeds the limit of ", peer_limit_,
                                                       " that ", address_, " announced"));
      }
      const void* src = nullptr;
      if constexpr (!std::is_same_v<Stage, std::nullptr_t>) {
        if (n > 0) {
          absl::StatusOr<const void*> staged = stage();
          if (!staged.ok()) {
            Teardown();
            return absl::UnavailableError(
                absl::StrCat("sending to ", address_, " failed: ", staged.status().message()));
          }
          src = *staged;
        }
      }
      absl::Status st = WriteFrameParts(fd_, kNcclMagic, frame);
      if (!st.ok()) {
        why = std::string(st.message());
        Teardown();
        continue;
      }
      if (n == 0) return absl::OkStatus();
      st = Transfer(src, n);
      if (st.ok()) return st;
      Teardown();
      return absl::UnavailableError(
          absl::StrCat("sending to ", address_, " failed: ", st.message()));
    }
    return absl::UnavailableError(absl::StrCat("sending to ", address_, " failed: ", why));
  }

  Watch MakeWatch() const {
    Watch w;
    w.comm = comm_.get();
    w.fd = fd_;
    w.deadline = Clock::now() + std::chrono::milliseconds(options_.nccl_timeout_ms);
    return w;
  }

  absl::Status Transfer(const void* src, size_t n) {
    const Watch w = MakeWatch();
    if (!self_) {
      absl::Status st =
          NcclOk(ncclSend(src, n, ncclUint8, /*peer=*/1, comm_.get(), res_.stream), "ncclSend", w);
      if (!st.ok()) return st;
      return WaitStream(res_.stream, res_.done, w, "the NCCL send");
    }
    // Same-device mode: the receiver's thread moves the bytes; offer them
    // once the staging copy / producer work queued on our stream is done.
    SPECLINE_RETURN_IF_CUDA(cudaEventRecord(res_.ready, res_.stream));
    if (absl::Status st = self_->Put({src, n, res_.ready}); !st.ok()) return st;
    return self_->AwaitDone(w);
  }

  // Connects, sends the hello with a fresh ncclUniqueId, waits for the
  // receiver's ack and (2-rank mode) joins the communicator as rank 0 while
  // the receiver joins as rank 1. Every step is bounded (NcclOptions
  // timeouts, the receiver hanging up).
  absl::Status Bootstrap() {
    absl::StatusOr<int> fd = ConnectSocket(host_, port_, options_.connect_timeout_ms);
    if (!fd.ok()) return fd.status();
    fd_ = *fd;
    // The receiver's greeting (and, with a secret, the proofs) before the
    // hello: a mismatch fails here, before any NCCL or CUDA resource.
    absl::StatusOr<size_t> limit = ConnectHandshake(fd_, WireProtocol::kNccl, transport_, address_);
    if (!limit.ok()) return limit.status();
    peer_limit_ = *limit;
    if (absl::Status st = res_.Create(device_); !st.ok()) return st;
    Hello hello;
    hello.version = kProtocolVersion;
    hello.mode = options_.same_device ? kSameDevice : kTwoRank;
    hello.pid = static_cast<uint64_t>(getpid());
    hello.identity = identity_;
    if (ncclResult_t r = ncclGetUniqueId(&hello.id); r != ncclSuccess) {
      return absl::UnavailableError(absl::StrCat("ncclGetUniqueId: ", NcclText(r, nullptr)));
    }
    if (options_.same_device) {
      self_ = std::make_shared<SelfChannel>();
      hello.token = RegisterChannel(self_);
    }
    if (absl::Status st = WriteFrameParts(fd_, kNcclMagic, {EncodeHello(hello)}); !st.ok()) {
      return st;
    }
    Watch w;
    w.deadline = Clock::now() + std::chrono::milliseconds(options_.nccl_timeout_ms);
    absl::Status st = PollUntil(
        [&]() -> absl::StatusOr<bool> {
          pollfd p{fd_, POLLIN, 0};
          if (poll(&p, 1, 0) <= 0) return false;
          std::string body;
          absl::Status rs = ReadFrame(fd_, &body, kNcclMagic, kMaxHelloBytes);
          if (!rs.ok() || body.empty() || body[0] != kAck) {
            return absl::UnavailableError(absl::StrCat(
                "the receiver hung up during the bootstrap (is it an nccl:// receiver?)",
                rs.ok() ? "" : ": ", rs.ok() ? "" : rs.message()));
          }
          if (body.size() > 1) {
            return absl::UnavailableError(
                absl::StrCat("the receiver refused the link: ", body.substr(1)));
          }
          return true;
        },
        w, "the receiver's answer");
    if (!st.ok()) return st;
    if (!options_.same_device) {
      w.fd = fd_;  // the receiver closes the connection when its side fails
      if (st = comm_.Init(2, hello.id, /*rank=*/0, w); !st.ok()) return st;
    }
    ++bootstraps_;
    return absl::OkStatus();
  }

  // Aborts the communicator and closes the connection (staging kept).
  void Teardown() {
    comm_.Abort();
    res_.Destroy();
    if (self_) self_->Close("the nccl:// sender closed the link");
    self_.reset();
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  std::string host_;
  int port_;
  NcclOptions options_;
  TransportOptions transport_;
  int device_;
  std::string address_;
  std::string identity_;
  int fd_ = -1;
  size_t peer_limit_ = kMaxFrameBytes;  // from the receiver's greeting
  LinkResources res_;
  Comm comm_;
  std::shared_ptr<SelfChannel> self_;  // same-device mode
  cuda::DeviceBuffer staging_;
  cuda::PinnedBuffer pinned_;
  cudaEvent_t producer_ = nullptr;  // SendDevice's producer-stream event
  std::atomic<int> bootstraps_{0};
};

}  // namespace

absl::StatusOr<std::unique_ptr<NcclReceiver>> ListenNccl(const std::string& host, int port,
                                                         const NcclOptions& options,
                                                         const TransportOptions& transport) {
  if (absl::Status st = CheckTransportOptions(transport); !st.ok()) return st;
  absl::StatusOr<int> device = PickDevice(options, NcclAddress(host, port));
  if (!device.ok()) return device.status();
  int bound = 0;
  absl::StatusOr<int> fd = ListenSocket(host, port, &bound);
  if (!fd.ok()) return fd.status();
  return std::make_unique<NcclReceiverImpl>(*fd, NcclAddress(host, bound), options, transport,
                                            *device);
}

absl::StatusOr<std::unique_ptr<NcclSender>> ConnectNccl(const std::string& host, int port,
                                                        const NcclOptions& options,
                                                        const TransportOptions& transport) {
  if (absl::Status st = CheckTransportOptions(transport); !st.ok()) return st;
  absl::StatusOr<int> device = PickDevice(options, NcclAddress(host, port));
  if (!device.ok()) return device.status();
  return std::make_unique<NcclSenderImpl>(host, port, options, transport, *device);
}

}  // namespace specline::transport
