// Connections of actorflow-serve's HTTP front end. cpp-httplib parses each
// request from a stream it reads itself, and when the request line or the
// headers stall past its read timeout it closes the connection without a
// word. Here a connection reads each request's head (request line and
// headers, up to the blank line) before cpp-httplib's parser sees it, so a
// head that stalls gets 408 and one over the size limit gets 431, both as
// {"error": "..."} like every other refusal. A connection that sends nothing
// is idle, not late: it is closed silently after the keep-alive timeout, as
// cpp-httplib does.
//
// Bytes that arrive after one request (a pipelined next one) stay buffered
// for the next, where cpp-httplib would drop them with its per-request
// stream. A request whose body read timed out (answered 408 by its route)
// closes its connection, since the rest of that body could arrive later and
// be taken for a request.
#pragma once
#include <httplib.h>

#include <cstddef>

namespace actorflow::apps {

class head_timed_http_server : public httplib::Server {
 public:
  /// A request head (request line and headers) larger than this is refused
  /// with 431: it bounds what an idle connection can make the server hold.
  static constexpr size_t max_head_bytes = size_t{64} << 10;

 private:
  // cpp-httplib's per-connection loop, over our connection stream; it is a
  // private virtual of httplib::Server, overridden (not called) here.
  bool process_and_close_socket(socket_t sock) override;
};

}  // namespace actorflow::apps
