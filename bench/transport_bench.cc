// Per-hop latency and throughput of the activation transports on one host,
// at micro-batch sizes of 1, 8 and 64 slots x dim 768 fp32 (3 KB .. 196 KB).
//
//   transport_bench [--iters N] [--warmup N] [--dim D] [--json PATH]
//
// Latency: ping-pong between two processes (fork; the in-process transport
// uses two threads); one hop = round trip / 2. Throughput: N messages sent
// back to back, timed until the receiver acknowledges the last one.
// Implementations: the TCP transport (blocking reads), the in-process
// transport, UCX (ucp tag API) over shared memory and over TCP, both
// busy-polling and blocking on the worker's wakeup fd, and, when built with
// NCCL and a CUDA device is present, nccl:// (host messages, and device
// messages with SendDevice / ReceiveDevice). See docs/transport.md.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "nlohmann/json.hpp"
#include "transport/transport.h"

#ifdef SPECLINE_HAVE_UCX
#include <ucp/api/ucp.h>
#endif
#ifdef SPECLINE_HAVE_NCCL
#include "transport/nccl_transport.h"
#endif

namespace specline::bench {
namespace {

// One side of a bidirectional message link.
class Link {
 public:
  virtual ~Link() = default;
  virtual void Send(std::string_view message) = 0;
  // Valid until the next Recv.
  virtual std::string_view Recv() = 0;
};

[[noreturn]] void Die(const std::string& why) {
  std::fprintf(stderr, "transport_bench: %s\n", why.c_str());
  std::exit(1);
}

// Bootstrap channel (a socketpair) to swap addresses between the two sides.
void WriteBlob(int fd, const std::string& blob) {
  uint64_t n = blob.size();
  if (write(fd, &n, sizeof(n)) != sizeof(n) ||
      write(fd, blob.data(), n) != static_cast<ssize_t>(n)) {
    Die("bootstrap write failed");
  }
}
std::string ReadBlob(int fd) {
  uint64_t n = 0;
  if (read(fd, &n, sizeof(n)) != sizeof(n)) Die("bootstrap read failed");
  std::string blob(n, '\0');
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, blob.data() + got, n - got);
    if (r <= 0) Die("bootstrap read failed");
    got += r;
  }
  return blob;
}

// --- activation transport (tcp:// or inproc://) ---------------------------
class TransportLink : public Link {
 public:
  TransportLink(std::unique_ptr<transport::ActivationReceiver> in,
                std::unique_ptr<transport::ActivationSender> out)
      : in_(std::move(in)), out_(std::move(out)) {}
  void Send(std::string_view m) override {
    if (absl::Status st = out_->Send(m); !st.ok()) Die(st.ToString());
  }
  std::string_view Recv() override {
    auto m = in_->Receive(std::chrono::milliseconds(60000));
    if (!m.ok()) Die(m.status().ToString());
    last_ = std::move(*m);
    return last_;
  }

 private:
  std::unique_ptr<transport::ActivationReceiver> in_;
  std::unique_ptr<transport::ActivationSender> out_;
  std::string last_;
};

std::unique_ptr<Link> MakeTcpLink(int bootstrap) {
  auto in = transport::Listen("tcp://127.0.0.1:0");
  if (!in.ok()) Die(in.status().ToString());
  WriteBlob(bootstrap, (*in)->address());
  auto out = transport::Connect(ReadBlob(bootstrap));
  if (!out.ok()) Die(out.status().ToString());
  return std::make_unique<TransportLink>(std::move(*in), std::move(*out));
}

#ifdef SPECLINE_HAVE_UCX
// --- UCX ucp tag API ------------------------------------------------------
class UcxLink : public Link {
 public:
  // tls: UCX_TLS value ("shm" / "tcp"); busy: poll without sleeping.
  UcxLink(const std::string& tls, bool busy, int bootstrap, size_t max_message)
      : busy_(busy), buf_(max_message) {
    ucp_config_t* config = nullptr;
    Check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
    Check(ucp_config_modify(config, "TLS", tls.c_str()), "ucp_config_modify TLS");
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG | (busy ? 0 : UCP_FEATURE_WAKEUP);
    Check(ucp_init(&params, config, &context_), "ucp_init (TLS=" + tls + ")");
    ucp_config_release(config);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    Check(ucp_worker_create(context_, &wp, &worker_), "ucp_worker_create");
    ucp_address_t* address = nullptr;
    size_t length = 0;
    Check(ucp_worker_get_address(worker_, &address, &length), "ucp_worker_get_address");
    WriteBlob(bootstrap, std::string(reinterpret_cast<char*>(address), length));
    ucp_worker_release_address(worker_, address);
    std::string peer = ReadBlob(bootstrap);
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS;
    ep.address = reinterpret_cast<const ucp_address_t*>(peer.data());
    Check(ucp_ep_create(worker_, &ep, &ep_), "ucp_ep_create");
  }
  ~UcxLink() override {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = UCP_EP_CLOSE_FLAG_FORCE;
    // Errors here only mean the peer hung up first: nothing to report.
    ucs_status_ptr_t request = ucp_ep_close_nbx(ep_, &p);
    if (request != nullptr && !UCS_PTR_IS_ERR(request)) {
      while (ucp_request_check_status(request) == UCS_INPROGRESS) ucp_worker_progress(worker_);
      ucp_request_free(request);
    }
    ucp_worker_destroy(worker_);
    ucp_cleanup(context_);
  }

  void Send(std::string_view m) override {
    ucp_request_param_t p{};
    Wait(ucp_tag_send_nbx(ep_, m.data(), m.size(), kTag, &p));
  }
  std::string_view Recv() override {
    ucp_tag_recv_info_t info{};
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_RECV_INFO;
    p.recv_info.tag_info = &info;
    ucs_status_ptr_t request =
        ucp_tag_recv_nbx(worker_, buf_.data(), buf_.size(), kTag, ~ucp_tag_t{0}, &p);
    // recv_info is only written on immediate completion; a pending request
    // reports the length through ucp_tag_recv_request_test.
    if (request != nullptr && !UCS_PTR_IS_ERR(request)) {
      while (ucp_tag_recv_request_test(request, &info) == UCS_INPROGRESS) Progress();
    }
    Wait(request);
    return std::string_view(buf_.data(), info.length);
  }

 private:
  static constexpr ucp_tag_t kTag = 0x5eed;
  static void Check(ucs_status_t st, const std::string& what) {
    if (st != UCS_OK) Die(what + ": " + ucs_status_string(st));
  }
  void Wait(ucs_status_ptr_t request) {
    if (request == nullptr) return;
    if (UCS_PTR_IS_ERR(request)) Die(std::string("ucx: ") + ucs_status_string(UCS_PTR_STATUS(request)));
    while (ucp_request_check_status(request) == UCS_INPROGRESS) Progress();
    ucs_status_t st = ucp_request_check_status(request);
    ucp_request_free(request);
    if (st != UCS_OK) Die(std::string("ucx request: ") + ucs_status_string(st));
  }
  // Busy mode spins; wait mode sleeps on the worker's event fd when there
  // is nothing to do (what a stage waiting for work would do).
  void Progress() {
    if (ucp_worker_progress(worker_) == 0 && !busy_) {
      ucs_status_t st = ucp_worker_wait(worker_);
      if (st != UCS_OK) Die(std::string("ucp_worker_wait: ") + ucs_status_string(st));
    }
  }
  bool busy_;
  std::vector<char> buf_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_ep_h ep_ = nullptr;
};
#endif

#ifdef SPECLINE_HAVE_NCCL
// --- nccl:// ----------------------------------------------------------------
// Both sides run as threads of this process (CUDA does not survive fork).
// With two GPUs each side owns one and the links are the 2-rank
// communicators of production stages; with one GPU both sides share it in
// same-device mode (docs/transport.md), a different data path: rows are
// named accordingly. `device`: messages travel as SendDevice payloads from
// device memory (the echo side sends back the buffer it received) and are
// taken with ReceiveDevice, no host copies; otherwise Send / Receive.
class NcclLink : public Link {
 public:
  NcclLink(std::unique_ptr<transport::NcclReceiver> in, std::unique_ptr<transport::NcclSender> out,
           bool device, size_t max_message)
      : in_(std::move(in)), out_(std::move(out)), device_(device) {
    if (device_) {
      cudaSetDevice(out_->device());
      buf_ = cuda::DeviceBuffer(max_message);
      host_view_.resize(max_message);
    }
  }
  void Send(std::string_view m) override {
    absl::Status st;
    if (!device_) {
      st = out_->Send(m);
    } else {
      // The echo side returns the payload it received; the driver sends from
      // its own buffer (contents are not checked by the bench).
      const void* src = last_.payload.get() != nullptr && last_.payload_bytes >= m.size()
                            ? last_.payload.get()
                            : buf_.get();
      st = out_->SendDevice({}, src, m.size(), nullptr);
    }
    if (!st.ok()) Die(st.ToString());
  }
  std::string_view Recv() override {
    if (!device_) {
      auto m = in_->Receive(std::chrono::milliseconds(60000));
      if (!m.ok()) Die(m.status().ToString());
      last_host_ = std::move(*m);
      return last_host_;
    }
    auto m = in_->ReceiveDevice(std::chrono::milliseconds(60000));
    if (!m.ok()) Die(m.status().ToString());
    last_ = std::move(*m);
    // Only the size is looked at: a view of that many (unrelated) bytes.
    return std::string_view(host_view_.data(), std::min(last_.payload_bytes, host_view_.size()));
  }

 private:
  std::unique_ptr<transport::NcclReceiver> in_;
  std::unique_ptr<transport::NcclSender> out_;
  bool device_;
  cuda::DeviceBuffer buf_;
  std::vector<char> host_view_;
  transport::DeviceMessage last_;
  std::string last_host_;
};

#endif

// --- the measurement --------------------------------------------------------
struct Plan {
  std::vector<size_t> sizes;
  int warmup = 200;
  int iters = 2000;
  int StreamCount(size_t size) const {
    return static_cast<int>(std::clamp<size_t>((size_t{64} << 20) / size, 200, 5000));
  }
};

// The echo side: mirrors every ping, then swallows each stream and acks it.
void Echo(Link& link, const Plan& plan) {
  for (size_t size : plan.sizes) {
    for (int i = 0; i < plan.warmup + plan.iters; ++i) {
      std::string_view m = link.Recv();
      link.Send(m);
    }
    for (int i = 0; i < plan.StreamCount(size); ++i) link.Recv();
    link.Send("k");
  }
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

nlohmann::json Drive(Link& link, const Plan& plan, const std::string& name) {
  nlohmann::json rows = nlohmann::json::array();
  for (size_t size : plan.sizes) {
    std::string msg(size, '\x5a');
    std::vector<double> hop;
    for (int i = 0; i < plan.warmup + plan.iters; ++i) {
      const double t0 = Now();
      link.Send(msg);
      std::string_view back = link.Recv();
      const double t = Now() - t0;
      if (back.size() != size) Die(name + ": echo came back with the wrong size");
      if (i >= plan.warmup) hop.push_back(t / 2);
    }
    const int n = plan.StreamCount(size);
    const double t0 = Now();
    for (int i = 0; i < n; ++i) link.Send(msg);
    link.Recv();
    const double dt = Now() - t0;
    nlohmann::json row = {{"transport", name},
                          {"bytes", size},
                          {"hop_p50_us", Percentile(hop, 0.50) * 1e6},
                          {"hop_p99_us", Percentile(hop, 0.99) * 1e6},
                          {"stream_messages", n},
                          {"stream_msgs_per_s", n / dt},
                          {"stream_gb_per_s", n * double(size) / dt / 1e9}};
    std::printf("%-16s %8zu B  hop p50 %8.1f us  p99 %8.1f us  stream %9.0f msg/s %6.2f GB/s\n",
                name.c_str(), size, row["hop_p50_us"].get<double>(),
                row["hop_p99_us"].get<double>(), row["stream_msgs_per_s"].get<double>(),
                row["stream_gb_per_s"].get<double>());
    std::fflush(stdout);
    rows.push_back(row);
  }
  return rows;
}

// Runs `make` in a forked child (echo side) and in this process (driver).
nlohmann::json RunPair(const std::string& name, const Plan& plan,
                       const std::function<std::unique_ptr<Link>(int bootstrap)>& make) {
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) Die("socketpair");
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the driver
    close(fds[0]);
    {
      std::unique_ptr<Link> link = make(fds[1]);
      Echo(*link, plan);
    }
    _exit(0);
  }
  close(fds[1]);
  nlohmann::json rows;
  {
    std::unique_ptr<Link> link = make(fds[0]);
    rows = Drive(*link, plan, name);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  close(fds[0]);
  return rows;
}

nlohmann::json RunInproc(const Plan& plan) {
  auto a = transport::Listen("inproc://bench-a");
  auto b = transport::Listen("inproc://bench-b");
  TransportLink driver(std::move(*a), std::move(*transport::Connect("inproc://bench-b")));
  TransportLink echo(std::move(*b), std::move(*transport::Connect("inproc://bench-a")));
  std::thread t([&] { Echo(echo, plan); });
  nlohmann::json rows = Drive(driver, plan, "inproc");
  t.join();
  return rows;
}

#ifdef SPECLINE_HAVE_NCCL
nlohmann::json RunNccl(const Plan& plan, bool device, size_t max_message) {
  int count = 0;
  cudaGetDeviceCount(&count);
  const bool two = count >= 2;
  const int dev_driver = 0, dev_echo = two ? 1 : 0;
  auto listen = [](int dev) {
    transport::NcclOptions o;
    o.device = dev;
    auto r = transport::ListenNccl("127.0.0.1", 0, o);
    if (!r.ok()) Die(r.status().ToString());
    return std::move(*r);
  };
  auto connect = [&](int dev, const std::string& address) {
    transport::NcclOptions o;
    o.device = dev;
    o.same_device = !two;
    auto s = transport::ConnectNccl("127.0.0.1", std::stoi(address.substr(address.rfind(':') + 1)),
                                    o);
    if (!s.ok()) Die(s.status().ToString());
    return std::move(*s);
  };
  auto a = listen(dev_driver);
  auto b = listen(dev_echo);
  const std::string to_a = a->address(), to_b = b->address();
  NcclLink driver(std::move(a), connect(dev_driver, to_b), device, max_message);
  NcclLink echo(std::move(b), connect(dev_echo, to_a), device, max_message);
  std::thread t([&] {
    cudaSetDevice(dev_echo);
    Echo(echo, plan);
  });
  cudaSetDevice(dev_driver);
  const std::string name = std::string(device ? "nccl-device" : "nccl") + (two ? "" : "-1gpu-self");
  nlohmann::json rows = Drive(driver, plan, name);
  t.join();
  return rows;
}
#endif

}  // namespace
}  // namespace specline::bench

int main(int argc, char** argv) {
  using namespace specline::bench;
  Plan plan;
  int dim = 768;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] {
      if (i + 1 >= argc) Die(a + " needs a value");
      return std::string(argv[++i]);
    };
    if (a == "--iters") plan.iters = std::stoi(next());
    else if (a == "--warmup") plan.warmup = std::stoi(next());
    else if (a == "--dim") dim = std::stoi(next());
    else if (a == "--json") json_path = next();
    else Die("unknown flag " + a + " (flags: --iters N --warmup N --dim D --json PATH)");
  }
  for (int slots : {1, 8, 64}) plan.sizes.push_back(size_t(slots) * dim * sizeof(float));
  const size_t max_size = plan.sizes.back() + 4096;

  nlohmann::json results = nlohmann::json::array();
  auto add = [&](const nlohmann::json& rows) {
    for (const auto& r : rows) results.push_back(r);
  };
  add(RunPair("tcp", plan, [](int fd) { return MakeTcpLink(fd); }));
#ifdef SPECLINE_HAVE_UCX
  for (const char* tls : {"shm", "tcp"}) {
    for (bool busy : {true, false}) {
      const std::string name = std::string("ucx-") + tls + (busy ? "-busy" : "-wait");
      add(RunPair(name, plan, [&](int fd) {
        return std::make_unique<UcxLink>(tls, busy, fd, max_size);
      }));
    }
  }
#else
  std::printf("UCX not built in (pkg-config ucx not found)\n");
#endif
  add(RunInproc(plan));
#ifdef SPECLINE_HAVE_NCCL
  // Last: CUDA is initialized here, after every fork above.
  if (std::string why; specline::cuda::DeviceAvailable(&why)) {
    for (bool device : {false, true}) add(RunNccl(plan, device, max_size));
  } else {
    std::printf("nccl:// skipped: no usable CUDA device (%s)\n", why.c_str());
  }
#else
  std::printf("nccl:// not built in (no NCCL at build time)\n");
#endif

  if (!json_path.empty()) {
    nlohmann::json doc = {{"bench", "transport"},
                          {"dim", dim},
                          {"iters", plan.iters},
                          {"hardware_threads", std::thread::hardware_concurrency()},
                          {"results", results}};
    std::ofstream(json_path) << doc.dump(2) << "\n";
  }
  return 0;
}
