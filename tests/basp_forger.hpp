// A peer that speaks CAF 0.17's BASP by hand, as an attacker would: it
// reads the server's handshake (the node id and published actor it reveals),
// answers with a client handshake for any node it likes, and sends routed
// messages that claim any source node and actor, or headers that announce
// any payload length. It uses CAF's own serializer for the payloads only.
#pragma once
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/io/basp/header.hpp>
#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace actorflow::testing {

class basp_forger {
 public:
  basp_forger(caf::actor_system& system, uint16_t port) : system_(system) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~basp_forger() { ::close(fd_); }
  basp_forger(const basp_forger&) = delete;
  basp_forger& operator=(const basp_forger&) = delete;

  bool connected() const { return connected_; }

  /// What a BASP server's handshake reveals, if the first bytes are one.
  struct server_handshake {
    caf::node_id node;
    caf::actor_id published_actor = 0;
  };
  std::optional<server_handshake> read_server_handshake(std::chrono::milliseconds timeout) {
    std::vector<char> head;
    if (!read_exactly(head, caf::io::basp::header_size, timeout)) return std::nullopt;
    caf::io::basp::header hdr;
    caf::binary_deserializer head_source{system_, head};
    if (head_source(hdr) || hdr.operation != caf::io::basp::message_type::server_handshake ||
        hdr.payload_len > 65536)
      return std::nullopt;
    std::vector<char> payload;
    if (!read_exactly(payload, hdr.payload_len, timeout)) return std::nullopt;
    server_handshake out;
    std::vector<std::string> app_ids;
    std::set<std::string> interface;
    caf::binary_deserializer source{system_, payload};
    if (source(out.node, app_ids, out.published_actor, interface)) return std::nullopt;
    return out;
  }

  void send_client_handshake(const caf::node_id& claimed) {
    std::vector<char> payload;
    caf::binary_serializer sink{system_, payload};
    (void)sink(const_cast<caf::node_id&>(claimed));
    send_message(caf::io::basp::message_type::client_handshake, 0, 0, payload);
  }

  /// A routed message from (source_node, source_actor) to dest_actor on
  /// dest_node: the receiver answers the claimed source.
  void send_routed(const caf::node_id& source_node, caf::actor_id source_actor,
                   const caf::node_id& dest_node, caf::actor_id dest_actor, caf::message msg) {
    std::vector<char> payload;
    caf::binary_serializer sink{system_, payload};
    std::vector<caf::strong_actor_ptr> forwarding_stack;
    (void)sink(const_cast<caf::node_id&>(source_node), const_cast<caf::node_id&>(dest_node),
               forwarding_stack, msg);
    send_message(caf::io::basp::message_type::routed_message, source_actor, dest_actor, payload);
  }

  /// A header alone, announcing `payload_len` bytes that never come.
  void send_header(caf::io::basp::message_type type, uint32_t payload_len) {
    send_bytes(header_bytes(type, payload_len, 0, 0));
  }

  void send_bytes(const std::vector<char>& bytes) {
    (void)!::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  }

  /// Whether the peer closes the connection within `timeout` (whatever it
  /// sends before is read and dropped).
  bool closed_by_peer(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      auto n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return true;
    }
  }

 private:
  std::vector<char> header_bytes(caf::io::basp::message_type type, uint32_t payload_len,
                                 caf::actor_id source_actor, caf::actor_id dest_actor) {
    caf::io::basp::header hdr{type, 0, payload_len, 0, source_actor, dest_actor};
    std::vector<char> bytes;
    caf::binary_serializer sink{system_, bytes};
    (void)sink(hdr);
    return bytes;
  }

  void send_message(caf::io::basp::message_type type, caf::actor_id source_actor,
                    caf::actor_id dest_actor, const std::vector<char>& payload) {
    auto bytes =
        header_bytes(type, static_cast<uint32_t>(payload.size()), source_actor, dest_actor);
    bytes.insert(bytes.end(), payload.begin(), payload.end());
    send_bytes(bytes);
  }

  bool read_exactly(std::vector<char>& out, size_t n, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    out.resize(n);
    size_t got = 0;
    while (got < n) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      auto k = ::recv(fd_, out.data() + got, n - got, 0);
      if (k <= 0) return false;
      got += static_cast<size_t>(k);
    }
    return true;
  }

  caf::actor_system& system_;
  int fd_ = -1;
  bool connected_ = false;
};

}  // namespace actorflow::testing
