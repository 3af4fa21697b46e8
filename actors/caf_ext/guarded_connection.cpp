#include "actors/caf_ext/guarded_connection.hpp"

#include <sys/socket.h>

#include <atomic>
#include <caf/io/network/native_socket.hpp>
#include <caf/io/network/stream_impl.hpp>
#include <caf/policy/tcp.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <thread>

#include "actors/caf_ext/auth.hpp"

namespace actorflow {

namespace {

using caf::io::network::native_socket;
using caf::io::network::rw_state;
using clock_type = std::chrono::steady_clock;

// ---- what the guard tells the operator and the connecting code ----------------

// One line per closed connection, at most 20 per 10 s: a flood of bad
// connections must not become a flood of log lines.
void log_closed(const std::string& peer, const std::string& reason) {
  static std::mutex mutex;
  static clock_type::time_point window_start;
  static int in_window = 0, suppressed = 0;
  std::lock_guard<std::mutex> lock(mutex);
  auto now = clock_type::now();
  if (now - window_start > std::chrono::seconds(10)) {
    if (suppressed > 0)
      std::cerr << "[network] " << suppressed << " more connections closed (not shown)\n";
    window_start = now;
    in_window = suppressed = 0;
  }
  if (++in_window > 20) {
    ++suppressed;
    return;
  }
  std::cerr << "[network] closed the connection with " << peer << ": " << reason << std::endl;
}

struct failure_record {
  std::string reason;
  clock_type::time_point when;
};

std::mutex failures_mutex;
std::map<uint16_t, failure_record> failures_by_port;

// Taken while the socket is connected: once the peer is gone, the address
// of its socket can no longer be asked for.
struct peer_address {
  std::string host = "?";
  uint16_t port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};

peer_address peer_address_of(native_socket fd) {
  peer_address peer;
  if (auto host = caf::io::network::remote_addr_of_fd(fd)) peer.host = *host;
  if (auto port = caf::io::network::remote_port_of_fd(fd)) peer.port = *port;
  return peer;
}

// Logged for connections peers made to us; kept for the code that asked for
// a connection we made (handshake_failure_since).
void report_failure(const peer_address& peer, connection_role role, const std::string& reason) {
  if (role == connection_role::accepting) {
    log_closed(peer.to_string(), reason);
    return;
  }
  std::lock_guard<std::mutex> lock(failures_mutex);
  failures_by_port[peer.port] = {reason, clock_type::now()};
}

// ---- bytes carried, by peer ------------------------------------------------------

// Each peer's counters, found once per connection (map nodes never move), then
// added to without a lock on every read and write.
struct peer_traffic {
  std::atomic<uint64_t> sent{0}, received{0};
};

std::mutex traffic_mutex;
std::map<std::string, peer_traffic> traffic;

peer_traffic& traffic_of(const peer_address& peer) {
  std::lock_guard<std::mutex> lock(traffic_mutex);
  return traffic[peer.to_string()];
}

// ---- closing connections that do not complete their handshakes in time ---------

// Shuts down (without closing: the multiplexer owns the descriptor) the
// sockets of connections past their deadline; the multiplexer then sees the
// end of the stream and lets CAF close them. A connection's guard forgets
// its entry under the same lock before its socket is closed, so a
// descriptor number is never shut down after it was reused.
class handshake_watchdog {
 public:
  static handshake_watchdog& instance() {
    static handshake_watchdog watchdog;
    return watchdog;
  }

  uint64_t watch(native_socket fd, const peer_address& peer, connection_role role,
                 clock_type::time_point deadline, std::chrono::milliseconds timeout) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    auto id = next_id_++;
    entries_[id] = {fd, peer, role, deadline, timeout};
    wake_.notify_one();
    return id;
  }

  void forget(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.erase(id);
  }

  ~handshake_watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
      wake_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  struct entry {
    native_socket fd;
    peer_address peer;
    connection_role role;
    clock_type::time_point deadline;
    std::chrono::milliseconds timeout;
  };

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      auto next = clock_type::now() + std::chrono::seconds(60);
      for (auto it = entries_.begin(); it != entries_.end();) {
        if (it->second.deadline <= clock_type::now()) {
          expire(it->second);
          it = entries_.erase(it);
        } else {
          next = std::min(next, it->second.deadline);
          ++it;
        }
      }
      wake_.wait_until(lock, next);
    }
  }

  static void expire(const entry& e) {
    report_failure(
        e.peer, e.role,
        "the handshake did not complete within " + std::to_string(e.timeout.count()) + " ms");
    ::shutdown(e.fd, SHUT_RDWR);
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<uint64_t, entry> entries_;
  uint64_t next_id_ = 1;
  bool stop_ = false;
  std::thread thread_;
};

// ---- the guard: a CAF stream policy ---------------------------------------------

constexpr char hello_magic[8] = {'A', 'F', 'L', 'O', 'W', 'A', 'U', '1'};
constexpr size_t hello_bytes = sizeof hello_magic + auth_nonce_bytes;
constexpr size_t basp_header_bytes = 32;  // caf::io::basp::header_size in 0.17

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

class guard_policy {
 public:
  guard_policy(connection_role role, std::shared_ptr<const connection_limits> limits)
      : role_(role), limits_(std::move(limits)) {}
  guard_policy(const guard_policy&) = delete;
  guard_policy& operator=(const guard_policy&) = delete;
  ~guard_policy() {
    if (watch_id_ != 0) handshake_watchdog::instance().forget(watch_id_);
  }

  rw_state read_some(size_t& result, native_socket fd, void* buf, size_t len) {
    result = 0;
    if (!start(fd)) return rw_state::failure;
    if (phase_ != phase::open) {
      if (!advance_handshake(fd)) return rw_state::failure;
      if (phase_ != phase::open) return rw_state::success;  // wait for more
    }
    auto state = caf::policy::tcp::read_some(result, fd, buf, len);
    if (state == rw_state::failure && messages_ == 0)
      return fail(
          "the peer closed the connection before its first message: it may want TLS, "
          "or speak another protocol");
    if (state == rw_state::success && !track_messages(fd, static_cast<unsigned char*>(buf), result))
      return rw_state::failure;
    if (result > 0) traffic_->received.fetch_add(result, std::memory_order_relaxed);
    return state;
  }

  // Until the peer has proved the secret, what CAF writes (its handshake,
  // which names this node) is held back.
  rw_state write_some(size_t& result, native_socket fd, const void* buf, size_t len) {
    result = 0;
    if (!start(fd)) return rw_state::failure;
    if (phase_ == phase::open) {
      auto state = caf::policy::tcp::write_some(result, fd, buf, len);
      if (result > 0) traffic_->sent.fetch_add(result, std::memory_order_relaxed);
      return state;
    }
    if (held_back_.size() + len > connection_limits::handshake_message_bytes)
      return fail("wrote too much before the handshake completed");
    held_back_.append(static_cast<const char*>(buf), len);
    result = len;
    return rw_state::success;
  }

  bool try_accept(native_socket& result, native_socket fd) {
    return caf::policy::tcp::try_accept(result, fd);
  }

  static constexpr bool must_read_more(native_socket, size_t) { return false; }

 private:
  enum class phase { hello, proof, open };

  const char* own_role() const {
    return role_ == connection_role::accepting ? "accepting" : "connecting";
  }
  const char* peer_role() const {
    return role_ == connection_role::accepting ? "connecting" : "accepting";
  }

  rw_state fail(const std::string& reason) {
    if (!failed_) report_failure(peer_, role_, reason);
    failed_ = true;
    return rw_state::failure;
  }

  // On the first event of the connection: the deadline, and our hello.
  bool start(native_socket fd) {
    if (started_) return !failed_;
    started_ = true;
    peer_ = peer_address_of(fd);
    traffic_ = &traffic_of(peer_);
    auto timeout = limits_->handshake_timeout;
    watch_id_ = handshake_watchdog::instance().watch(fd, peer_, role_, clock_type::now() + timeout,
                                                     timeout);
    if (limits_->secret.empty()) {
      phase_ = phase::open;
      return true;
    }
    own_nonce_ = random_nonce();
    return send_all(fd, std::string(hello_magic, sizeof hello_magic) + own_nonce_);
  }

  // The handshake's messages are a few dozen bytes on a fresh connection:
  // they fit its send buffer, so a short write is a broken connection.
  bool send_all(native_socket fd, const std::string& bytes) {
    auto sent = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (sent == static_cast<ssize_t>(bytes.size())) return true;
    fail("could not send the handshake");
    return false;
  }

  // Reads exactly what the current handshake message still needs (never a
  // byte of what follows it), and acts on a complete one.
  bool advance_handshake(native_socket fd) {
    while (phase_ != phase::open) {
      size_t need = phase_ == phase::hello ? hello_bytes : auth_proof_bytes;
      while (inbox_.size() < need) {
        char chunk[hello_bytes];
        auto got = ::recv(fd, chunk, need - inbox_.size(), 0);
        if (got > 0) {
          inbox_.append(chunk, static_cast<size_t>(got));
          if (phase_ == phase::hello && !starts_with_magic()) return false;
          continue;
        }
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
        fail(phase_ == phase::hello
                 ? "the peer closed the connection before the handshake: it may run "
                   "without --secret, or with TLS"
             : role_ == connection_role::connecting
                 ? "the peer refused our proof of the cluster secret: wrong --secret"
                 : "the peer closed the connection during the handshake");
        return false;
      }
      if (!(phase_ == phase::hello ? on_hello(fd) : on_proof(fd))) return false;
      inbox_.clear();
    }
    return true;
  }

  // Judged on the first bytes, so that a peer of another kind is closed at
  // once rather than at the handshake's deadline.
  bool starts_with_magic() {
    auto n = std::min(inbox_.size(), sizeof hello_magic);
    if (std::memcmp(inbox_.data(), hello_magic, n) == 0) return true;
    fail("the peer does not ask for a cluster secret: it runs without --secret (or with TLS)");
    return false;
  }

  bool on_hello(native_socket fd) {
    peer_nonce_ = inbox_.substr(sizeof hello_magic);
    phase_ = phase::proof;
    return send_all(fd, proof(own_role()));
  }

  bool on_proof(native_socket fd) {
    if (!same_proof(inbox_, proof(peer_role()))) {
      fail("the peer proved another cluster secret: wrong --secret");
      return false;
    }
    phase_ = phase::open;
    if (held_back_.empty()) return true;
    bool sent = send_all(fd, held_back_);
    held_back_.clear();
    held_back_.shrink_to_fit();
    return sent;
  }

  std::string proof(const char* role) const {
    bool accepting = role_ == connection_role::accepting;
    return connection_proof(limits_->secret, role, accepting ? own_nonce_ : peer_nonce_,
                            accepting ? peer_nonce_ : own_nonce_);
  }

  // Follows BASP's framing (a 32-byte header whose payload length is a
  // big-endian uint32 at offset 4, then the payload) over the bytes read,
  // and refuses a header announcing more than its bound before CAF
  // allocates the payload.
  bool track_messages(native_socket fd, const unsigned char* data, size_t n) {
    while (n > 0) {
      if (payload_left_ > 0) {
        auto k = std::min<uint64_t>(n, payload_left_);
        payload_left_ -= k;
        data += k;
        n -= k;
        if (payload_left_ == 0) message_done();
        continue;
      }
      auto k = std::min(n, basp_header_bytes - header_got_);
      std::memcpy(header_ + header_got_, data, k);
      header_got_ += k;
      data += k;
      n -= k;
      if (header_got_ < basp_header_bytes) break;
      header_got_ = 0;
      if (!on_header(fd)) return false;
    }
    return true;
  }

  bool on_header(native_socket fd) {
    if (messages_ == 0 && std::memcmp(header_, hello_magic, sizeof hello_magic) == 0) {
      fail("the peer asks for the cluster secret (--secret); this process has none");
      return false;
    }
    uint64_t bytes = big_endian_u32(header_ + 4);
    uint64_t bound =
        messages_ == 0 ? connection_limits::handshake_message_bytes : limits_->max_message_bytes;
    if (bytes > bound) {
      fail("a message of " + std::to_string(bytes) + " bytes exceeds the bound of " +
           std::to_string(bound) +
           (messages_ == 0 ? " for a handshake" : " (--max-message-bytes)"));
      return false;
    }
    payload_left_ = bytes;
    if (bytes == 0) message_done();
    return true;
  }

  // The peer's first complete message is BASP's handshake: from then on the
  // connection is established and no longer on the clock.
  void message_done() {
    if (messages_++ == 0 && watch_id_ != 0) {
      handshake_watchdog::instance().forget(watch_id_);
      watch_id_ = 0;
    }
  }

  connection_role role_;
  std::shared_ptr<const connection_limits> limits_;
  peer_address peer_;
  peer_traffic* traffic_ = nullptr;  // set in start(), before any read or write
  bool started_ = false, failed_ = false;
  phase phase_ = phase::hello;
  uint64_t watch_id_ = 0;
  std::string own_nonce_, peer_nonce_, inbox_, held_back_;
  unsigned char header_[basp_header_bytes] = {};
  size_t header_got_ = 0;
  uint64_t payload_left_ = 0;
  uint64_t messages_ = 0;
};

// CAF's scribe_impl with the guard as its stream's policy.
class guarded_scribe : public caf::io::scribe {
 public:
  guarded_scribe(caf::io::network::default_multiplexer& mpx, native_socket fd, connection_role role,
                 std::shared_ptr<const connection_limits> limits)
      : caf::io::scribe(caf::io::network::conn_hdl_from_socket(fd)),
        stream_(mpx, fd, role, std::move(limits)) {}

  void configure_read(caf::io::receive_policy::config config) override {
    stream_.configure_read(config);
    if (!launched_) launch();
  }
  void ack_writes(bool enable) override { stream_.ack_writes(enable); }
  std::vector<char>& wr_buf() override { return stream_.wr_buf(); }
  std::vector<char>& rd_buf() override { return stream_.rd_buf(); }
  void graceful_shutdown() override {
    stream_.graceful_shutdown();
    detach(&stream_.backend(), false);
  }
  void flush() override { stream_.flush(this); }
  std::string addr() const override {
    auto x = caf::io::network::remote_addr_of_fd(stream_.fd());
    return x ? *x : std::string();
  }
  uint16_t port() const override {
    auto x = caf::io::network::remote_port_of_fd(stream_.fd());
    return x ? *x : 0;
  }
  void add_to_loop() override { stream_.activate(this); }
  void remove_from_loop() override { stream_.passivate(); }

 private:
  // A write event right away gives the guard its first call, so each side
  // sends its hello without waiting for the other.
  void launch() {
    launched_ = true;
    stream_.start(this);
    stream_.force_empty_write(this);
  }

  bool launched_ = false;
  caf::io::network::stream_impl<guard_policy> stream_;
};

}  // namespace

caf::io::scribe_ptr make_guarded_scribe(caf::io::network::default_multiplexer& mpx,
                                        native_socket fd, connection_role role,
                                        std::shared_ptr<const connection_limits> limits) {
  caf::io::network::keepalive(fd, true);
  return caf::make_counted<guarded_scribe>(mpx, fd, role, std::move(limits));
}

std::optional<std::string> handshake_failure_since(uint16_t port, clock_type::time_point since) {
  std::lock_guard<std::mutex> lock(failures_mutex);
  auto it = failures_by_port.find(port);
  if (it == failures_by_port.end() || it->second.when < since) return std::nullopt;
  return it->second.reason;
}

std::map<std::string, traffic_bytes> traffic_by_peer() {
  std::map<std::string, traffic_bytes> out;
  std::lock_guard<std::mutex> lock(traffic_mutex);
  for (auto& [peer, t] : traffic)
    out[peer] = {t.sent.load(std::memory_order_relaxed),
                 t.received.load(std::memory_order_relaxed)};
  return out;
}

traffic_bytes traffic_total() {
  traffic_bytes total;
  for (auto& [peer, t] : traffic_by_peer()) {
    total.sent += t.sent;
    total.received += t.received;
  }
  return total;
}

void report_handshake_failure(int fd, connection_role role, const std::string& reason) {
  report_failure(peer_address_of(fd), role, reason);
}

}  // namespace actorflow
