#include "apps/lib/http_connection.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

namespace actorflow::apps {

namespace {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

milliseconds millis(time_t sec, time_t usec) { return milliseconds(sec * 1000 + usec / 1000); }

std::string seconds_text(milliseconds t) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", static_cast<double>(t.count()) / 1000);
  return text;
}

// Whether `event` comes on the socket within `wait`.
bool wait_for(int sock, short event, milliseconds wait) {
  pollfd p{sock, event, 0};
  for (;;) {
    int n = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(wait.count(), 0, 1 << 30)));
    if (n >= 0) return n > 0;
    if (errno != EINTR) return false;
  }
}

void address_of(const sockaddr_storage& a, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = "";
  if (a.ss_family == AF_INET) {
    auto& in = reinterpret_cast<const sockaddr_in&>(a);
    ::inet_ntop(AF_INET, &in.sin_addr, text, sizeof text);
    port = ntohs(in.sin_port);
  } else if (a.ss_family == AF_INET6) {
    auto& in6 = reinterpret_cast<const sockaddr_in6&>(a);
    ::inet_ntop(AF_INET6, &in6.sin6_addr, text, sizeof text);
    port = ntohs(in6.sin6_port);
  }
  ip = text;
}

// One connection's bytes, buffered across its requests, for cpp-httplib's
// parser; await_head() reads each request's head before the parser starts.
class connection_stream final : public httplib::Stream {
 public:
  enum class head { arrived, closed, idle, stalled, too_large };

  connection_stream(int sock, milliseconds read_timeout, milliseconds write_timeout)
      : sock_(sock), read_timeout_(read_timeout), write_timeout_(write_timeout) {}

  // Waits for the next request's head: up to `idle_timeout` for its first
  // byte (idle while the listening socket is open), then up to the read
  // timeout for the rest. Bytes after the head stay for the parser's reads.
  head await_head(const std::atomic<socket_t>& listening, milliseconds idle_timeout,
                  size_t max_bytes) {
    drop_consumed();
    read_timed_out_ = false;
    if (unread() == 0) {
      auto idle_end = clock_type::now() + idle_timeout;
      for (;;) {
        auto left = std::chrono::duration_cast<milliseconds>(idle_end - clock_type::now());
        if (listening == INVALID_SOCKET || left.count() <= 0) return head::idle;
        // In slices, so that a stopping server lets idle connections go soon.
        if (wait_for(sock_, POLLIN, std::min(left, milliseconds(50)))) break;
      }
      if (fill() <= 0) return head::closed;
    }
    auto deadline = clock_type::now() + read_timeout_;
    while (!head_buffered()) {
      if (unread() > max_bytes) return head::too_large;
      auto left = std::chrono::duration_cast<milliseconds>(deadline - clock_type::now());
      if (left.count() <= 0 || !wait_for(sock_, POLLIN, left)) return head::stalled;
      if (fill() <= 0) return head::closed;
    }
    return head_end_ - offset_ > max_bytes ? head::too_large : head::arrived;
  }

  // Whether a read of this request timed out (its route answered 408).
  bool read_timed_out() const { return read_timed_out_; }

  bool is_readable() const override {
    return unread() > 0 || wait_for(sock_, POLLIN, read_timeout_);
  }
  bool is_writable() const override { return wait_for(sock_, POLLOUT, write_timeout_); }

  ssize_t read(char* ptr, size_t size) override {
    if (unread() == 0) {
      drop_consumed();
      if (!wait_for(sock_, POLLIN, read_timeout_)) {
        read_timed_out_ = true;
        return -1;
      }
      if (ssize_t n = fill(); n <= 0) return n;
    }
    size_t n = std::min(size, unread());
    std::memcpy(ptr, buffer_.data() + offset_, n);
    offset_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    ssize_t n;
    do n = ::send(sock_, ptr, size, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t length = sizeof a;
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&a), &length) == 0)
      address_of(a, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t length = sizeof a;
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&a), &length) == 0)
      address_of(a, ip, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  size_t unread() const { return buffer_.size() - offset_; }

  // A blank line ends the head; cpp-httplib takes "\n" line ends as well as
  // "\r\n". The search resumes where the last one stopped, so that a head
  // trickled in byte by byte is not scanned over and over.
  bool head_buffered() {
    size_t from = std::max(offset_, scanned_);
    for (size_t i = from; i + 1 < buffer_.size(); ++i) {
      if (buffer_[i] != '\n') continue;
      size_t next = buffer_[i + 1] == '\r' ? i + 2 : i + 1;
      if (next < buffer_.size() && buffer_[next] == '\n') {
        head_end_ = next + 1;
        scanned_ = head_end_;
        return true;
      }
    }
    scanned_ = buffer_.size() >= 2 ? std::max(from, buffer_.size() - 2) : from;
    return false;
  }

  // What the socket holds, appended: bytes read, 0 when the peer closed,
  // -1 on an error.
  ssize_t fill() {
    char chunk[16384];
    ssize_t n;
    do n = ::recv(sock_, chunk, sizeof chunk, 0);
    while (n < 0 && errno == EINTR);
    if (n > 0) buffer_.append(chunk, static_cast<size_t>(n));
    return n;
  }

  void drop_consumed() {
    buffer_.erase(0, offset_);
    scanned_ -= std::min(scanned_, offset_);
    offset_ = 0;
  }

  int sock_;
  milliseconds read_timeout_, write_timeout_;
  std::string buffer_;
  size_t offset_ = 0;    // bytes of buffer_ the parser has read
  size_t scanned_ = 0;   // where the search for the head's end resumes
  size_t head_end_ = 0;  // one past the blank line of the last head found
  bool read_timed_out_ = false;
};

// A refusal before any route: cpp-httplib has no part in it.
void refuse(connection_stream& strm, int status, const char* reason, const std::string& message) {
  std::string body = nlohmann::json{{"error", message}}.dump();
  std::string text = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                     "\r\nConnection: close\r\nContent-Type: application/json\r\n"
                     "Content-Length: " +
                     std::to_string(body.size()) + "\r\n\r\n" + body;
  for (size_t sent = 0; sent < text.size();) {
    ssize_t n = strm.write(text.data() + sent, text.size() - sent);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

// Closes after an answer the client may still be sending into: closing with
// unread bytes would reset the connection, and the reset can reach the
// client before the answer does. What it still sends is read and dropped,
// for a bounded time.
void close_after_refusal(int sock) {
  ::shutdown(sock, SHUT_WR);
  char sink[4096];
  auto end = clock_type::now() + milliseconds(500);
  while (clock_type::now() < end && wait_for(sock, POLLIN, milliseconds(100)))
    if (::recv(sock, sink, sizeof sink, 0) <= 0) break;
  ::close(sock);
}

}  // namespace

bool head_timed_http_server::process_and_close_socket(socket_t sock) {
  connection_stream strm(sock, millis(read_timeout_sec_, read_timeout_usec_),
                         millis(write_timeout_sec_, write_timeout_usec_));
  bool ok = false, refused = false;
  for (size_t left = keep_alive_max_count_; left > 0; --left) {
    auto head = strm.await_head(svr_sock_, millis(keep_alive_timeout_sec_, 0), max_head_bytes);
    if (head == connection_stream::head::stalled) {
      refuse(strm, 408, "Request Timeout",
             "[http] the request line and headers did not arrive within " +
                 seconds_text(millis(read_timeout_sec_, read_timeout_usec_)) + " s");
      refused = true;
      break;
    }
    if (head == connection_stream::head::too_large) {
      refuse(strm, 431, "Request Header Fields Too Large",
             "[http] the request line and headers are larger than the server accepts (" +
                 std::to_string(max_head_bytes) + " bytes)");
      refused = true;
      break;
    }
    if (head != connection_stream::head::arrived) break;
    bool closed = false;
    bool last = left == 1 || svr_sock_ == INVALID_SOCKET;
    ok = process_request(strm, last, closed, nullptr);
    refused = strm.read_timed_out();
    if (!ok || closed || refused) break;
  }
  if (refused) {
    close_after_refusal(sock);
  } else {
    ::shutdown(sock, SHUT_RDWR);
    ::close(sock);
  }
  return ok;
}

}  // namespace actorflow::apps
