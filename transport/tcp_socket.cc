#include "transport/tcp_socket.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/listen_error.h"

namespace specline::transport {
namespace {

std::string Errno(const char* what) { return absl::StrCat(what, ": ", std::strerror(errno)); }

void PutU32(uint32_t v, unsigned char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint32_t GetU32(const unsigned char* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

struct AddrInfo {
  addrinfo* head = nullptr;
  ~AddrInfo() {
    if (head) freeaddrinfo(head);
  }
};

absl::Status Resolve(const std::string& host, int port, bool passive, AddrInfo* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  const std::string service = std::to_string(port);
  int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &out->head);
  if (rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", host, ":", port, ": ", gai_strerror(rc)));
  }
  return absl::OkStatus();
}

}  // namespace

void EncodeFrameHeader(uint32_t length, unsigned char out[kFrameHeaderBytes], uint32_t magic) {
  PutU32(magic, out);
  PutU32(length, out + 4);
}

absl::StatusOr<uint32_t> DecodeFrameHeader(const unsigned char in[kFrameHeaderBytes],
                                           uint32_t magic, size_t max_bytes) {
  if (GetU32(in) != magic) {
    return absl::InvalidArgumentError("bad frame magic: the peer is not a specline transport");
  }
  uint32_t length = GetU32(in + 4);
  const size_t limit = std::min(max_bytes, kMaxFrameBytes);
  if (length > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame of ", length, " bytes exceeds the limit of ", limit));
  }
  return length;
}

void SetNoDelay(int fd) {
  // Frames are written whole; Nagle would only hold back the tail of one.
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

absl::StatusOr<int> ListenSocket(const std::string& host, int port, int* bound_port) {
  AddrInfo ai;
  if (absl::Status st = Resolve(host, port, true, &ai); !st.ok()) return st;
  std::string last = "no address";
  for (addrinfo* a = ai.head; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = Errno("socket");
      continue;
    }
    // A restarted stage must be able to take its port back at once, while
    // the old connections sit in TIME_WAIT.
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0) {
      last = Errno("bind");
      close(fd);
      continue;
    }
    if (listen(fd, 128) != 0) {
      last = Errno("listen");
      close(fd);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    *bound_port = ss.ss_family == AF_INET6
                      ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                      : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    return fd;
  }
  return CannotListenError(absl::StrCat("cannot listen on ", host, ":", port, ": ", last));
}

absl::StatusOr<int> ConnectSocket(const std::string& host, int port, int timeout_ms) {
  AddrInfo ai;
  if (absl::Status st = Resolve(host, port, false, &ai); !st.ok()) return st;
  std::string last = "no address";
  for (addrinfo* a = ai.head; a; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      last = Errno("socket");
      continue;
    }
    // Non-blocking connect bounded by a poll: an unreachable host must not
    // hold a pipeline step for the kernel's minutes-long SYN retry.
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      rc = poll(&p, 1, timeout_ms);
      if (rc == 0) {
        last = absl::StrCat("connect timed out after ", timeout_ms, " ms");
        close(fd);
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      errno = err;
      rc = err == 0 ? 0 : -1;
    }
    if (rc != 0) {
      last = Errno("connect");
      close(fd);
      continue;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    SetNoDelay(fd);
    return fd;
  }
  return absl::UnavailableError(absl::StrCat(last));
}

absl::Status WriteFrame(int fd, const char* data, size_t size) {
  return WriteFrameParts(fd, kFrameMagic, {std::string_view(data, size)});
}

absl::Status WriteFrameParts(int fd, uint32_t magic,
                             std::initializer_list<std::string_view> parts) {
  constexpr size_t kMaxParts = 7;
  if (parts.size() > kMaxParts) return absl::InvalidArgumentError("too many frame parts");
  size_t total = 0;
  for (std::string_view p : parts) total += p.size();
  if (total > kMaxFrameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("frame of ", total, " bytes exceeds the limit of ", kMaxFrameBytes));
  }
  unsigned char header[kFrameHeaderBytes];
  EncodeFrameHeader(static_cast<uint32_t>(total), header, magic);
  iovec iov[kMaxParts + 1];
  int count = 0;
  iov[count++] = {header, kFrameHeaderBytes};
  for (std::string_view p : parts) {
    if (!p.empty()) iov[count++] = {const_cast<char*>(p.data()), p.size()};
  }
  int first = 0;
  while (first < count) {
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = count - first;
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(Errno("send"));
    }
    size_t left = static_cast<size_t>(n);
    while (first < count && left >= iov[first].iov_len) {
      left -= iov[first].iov_len;
      ++first;
    }
    if (first < count) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return absl::OkStatus();
}

absl::Status ReadExact(int fd, void* buf, size_t n, Deadline deadline) {
  char* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    if (deadline != kNoDeadline) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return absl::DeadlineExceededError("timed out reading");
      pollfd pfd{fd, POLLIN, 0};
      const int wait_ms = static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30));
      const int ready = poll(&pfd, 1, wait_ms);
      if (ready < 0 && errno != EINTR) return absl::UnavailableError(Errno("poll"));
      if (ready <= 0) continue;  // EINTR or the deadline: checked above
    }
    ssize_t r = recv(fd, p + got, n - got, 0);
    if (r > 0) {
      got += static_cast<size_t>(r);
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 && got == 0) return absl::OutOfRangeError("connection closed");
    return absl::UnavailableError(r == 0 ? std::string("connection closed mid-frame")
                                         : Errno("recv"));
  }
  return absl::OkStatus();
}

absl::Status ReadFrame(int fd, std::string* payload, uint32_t magic, size_t max_bytes,
                       Deadline deadline) {
  payload->clear();
  unsigned char header[kFrameHeaderBytes];
  if (absl::Status st = ReadExact(fd, header, sizeof(header), deadline); !st.ok()) return st;
  absl::StatusOr<uint32_t> length = DecodeFrameHeader(header, magic, max_bytes);
  if (!length.ok()) return length.status();
  const size_t total = *length;
  // Grow with the bytes that arrive, never by what the header claims: a
  // header announcing 1 GiB followed by nothing must cost nothing. Reserved
  // but untouched capacity is address space, not memory; only what is
  // resized (zeroed) ahead of a read is touched, and that is bounded by
  // what arrived before (see kReadStepBytes).
  size_t got = 0;
  while (got < total) {
    const size_t step =
        std::min({total - got, kReadStepBytes, std::max(kFirstReadStep, got)});
    if (payload->capacity() < got + step) {
      payload->reserve(std::min(total, std::max({got + step, 2 * payload->capacity(),
                                                 kReadStepBytes})));
    }
    payload->resize(got + step);
    absl::Status st = ReadExact(fd, payload->data() + got, step, deadline);
    if (!st.ok()) {
      payload->clear();
      // A clean EOF after the header is still a frame cut short.
      if (absl::IsOutOfRange(st)) return absl::UnavailableError("connection closed mid-frame");
      return st;
    }
    got += step;
  }
  return absl::OkStatus();
}

bool PeerClosed(int fd) {
  // Receivers never write, so anything readable means EOF or a reset.
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  return poll(&p, 1, 0) != 0 && (p.revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR));
}

bool PeerHungUp(int fd) {
  // POLLRDHUP: the peer shut down or closed, even with its data unread.
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) != 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

}  // namespace specline::transport
