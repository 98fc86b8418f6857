#pragma once
// The server's HTTP/1.1 transport, on Boost.Beast's message parser and Boost.Asio's event
// loop. One I/O thread reads every connection without blocking, so a client that trickles its
// request, or holds its connection open and idle, costs a socket and a timer, never a thread;
// a complete request goes to a bounded pool of workers, whose handler may block (a completion
// waits for the engine) and writes its reply itself.
//
// What a client can hold is bounded: connections at once (global and per client address, then
// 503), the time its head may take from its first byte, the time its body may take and stall,
// the time an idle connection stays open, the time a reply may wait for the client to read,
// the size of the head (64 KiB, 100 fields: 431) and of the body (413). Framing follows RFC
// 9112: one Content-Length, not both a length and chunked, no transfer coding but chunked, no
// compressed body (server/request_limits.h); a request refused for its framing is answered and
// its connection closed, so no byte of it is read as the next request. Keep-alive and
// pipelining: requests of one connection are answered in order, one at a time. Shutdown is
// bounded: stop() closes idle and reading connections at once, tells running handlers, and
// returns within TransportLimits::shutdown_grace plus a second, whatever clients do (handlers
// must look at their writer's stopping() or alive() while they wait).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/request_limits.h"

namespace ps::server {

struct TransportLimits {
  size_t max_connections = 256;
  size_t max_connections_per_client = 64;  // per client IP address
  size_t max_body_bytes = size_t(64) << 20;
  std::chrono::milliseconds header_timeout{10000};  // the head, from its first byte
  std::chrono::milliseconds body_timeout{60000};    // the body, from the end of the head
  // No byte of the body for this long ends it too (at most header_timeout).
  std::chrono::milliseconds keep_alive{30000};     // an idle connection between requests
  std::chrono::milliseconds write_timeout{30000};  // a reply the client does not read
  std::chrono::milliseconds shutdown_grace{3000};  // stop(): running replies, then cut
  size_t workers = 8;                              // handlers at once
};

struct HttpRequest {
  uint64_t id = 0;                                           // in arrival order, from 1
  std::string method, target, path;                          // path: the target without its query
  int version = 11;                                          // 10 or 11
  std::vector<std::pair<std::string, std::string>> headers;  // as received
  std::string body;                                          // decoded (chunked bodies joined)
  std::string remote_addr;
  // The first field of that name (any case), "" when none.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

// How a request ended.
enum class Outcome {
  done,         // answered in full with a success status
  refused,      // answered in full with an error status (4xx, 5xx)
  client_left,  // the client closed the connection, or stopped reading, before the end
  shutdown,     // cut short because the server is stopping
};
const char* outcome_name(Outcome o);  // "done", "refused", "client_left", "shutdown"

// The client of a request being answered, for its handler (on a worker thread).
class ReplyWriter {
 public:
  virtual ~ReplyWriter() = default;
  // Sends bytes of a streamed body; false once the client is gone, has not read for the write
  // timeout, or the shutdown grace has passed (until then a stopping server still writes, so a
  // handler can end its reply in its own words).
  virtual bool write(std::string_view bytes) = 0;
  // Whether the client is still connected and the server is not stopping.
  virtual bool alive() = 0;
  virtual bool stopping() const = 0;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // A streamed body (chunked): run after the head is sent; writes through the writer and says
  // whether it wrote everything it meant to, with words for the log in `detail`.
  std::function<bool(ReplyWriter&, std::string& detail)> stream;
  std::string detail;  // for the request's log line
  bool close = false;  // close the connection after this reply

  void set_content(std::string text, std::string type) {
    body = std::move(text);
    content_type = std::move(type);
  }
  void set_header(std::string name, std::string value) {
    headers.emplace_back(std::move(name), std::move(value));
  }
};

// A request's end, for the log and the counts.
struct RequestEnd {
  uint64_t id = 0;
  std::string method = "-", path = "-";  // "-" where the head was never read whole
  std::string remote_addr;
  int status = 0;  // 0: no reply was sent
  Outcome outcome = Outcome::done;
  double seconds = 0;
  std::string detail;
};

struct TransportHandlers {
  // On the I/O thread once a head is read and its framing is acceptable, before the body:
  // return true to answer with `res` at once (the body is not read; a connection whose body is
  // left unread is closed). Must not block.
  std::function<bool(const HttpRequest& head, HttpResponse& res)> check_head;
  // On a worker, with the whole request.
  std::function<void(const HttpRequest&, HttpResponse&, ReplyWriter&)> handle;
  // When a request has ended (any thread).
  std::function<void(const RequestEnd&)> finished;
};

// The request parser the transport runs on each connection's bytes, on its own so it can be
// fuzzed and tested without sockets.
class RequestParser {
 public:
  enum class State { need_more, head, complete, error };
  explicit RequestParser(const TransportLimits& limits);
  ~RequestParser();
  RequestParser(const RequestParser&) = delete;
  RequestParser& operator=(const RequestParser&) = delete;
  // Reads what it can of `bytes`, returning how many it used. State::head once, when the head
  // is complete and acceptable (feed again for the body); State::complete when the whole
  // request is in (request() has it); State::error with error() (400, 413, 431, 415).
  size_t feed(std::string_view bytes, State& state);
  HttpRequest& request();
  const HeaderVerdict& error() const;
  bool keep_alive() const;        // the client keeps the connection after this request
  bool expects_continue() const;  // Expect: 100-continue
  bool body_pending() const;      // head read, body not (wholly) yet

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Serialized reply heads and bodies.
std::string status_reason(int status);
std::string error_json(int status, const std::string& type, const std::string& message);

class HttpTransport {
 public:
  HttpTransport(TransportLimits limits, TransportHandlers handlers);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;
  // Binds and listens (SO_REUSEADDR, not SO_REUSEPORT). Throws std::system_error (its code
  // says why: address in use, not an address of this machine, ...).
  void listen(const std::string& host, int port);
  int port() const;  // the port bound (listen's port, or the one chosen for 0)
  // Serves on threads of its own until stop().
  void start();
  // Marks the transport stopping without waiting: writers report stopping() from now on and
  // replies cut short count as shut down (call it before ending what handlers wait for).
  void announce_stop();
  // Stops accepting, closes connections that wait or read, lets running replies end (their
  // writers report stopping) and returns within the shutdown grace. Idempotent; any thread.
  void stop();
  bool stopping() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ps::server
