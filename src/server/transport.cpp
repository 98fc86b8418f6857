#include "server/transport.h"

#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_set>

namespace ps::server {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(uint8_t(a[i])) != std::tolower(uint8_t(b[i]))) return false;
  return true;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A fixed set of threads taking tasks in order.
class WorkerPool {
 public:
  explicit WorkerPool(size_t n) {
    for (size_t i = 0; i < n; ++i) threads_.emplace_back([this] { run(); });
  }
  ~WorkerPool() {
    {
      std::lock_guard<std::mutex> lock(m_);
      done_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  // False once the pool is shutting down (the task is dropped).
  bool submit(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(m_);
      if (done_) return false;
      tasks_.push_back(std::move(task));
    }
    cv_.notify_one();
    return true;
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [this] { return done_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      try {
        task();
      } catch (...) {  // a task reports its own failures; none may end the thread
      }
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool done_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// HttpRequest, names

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [n, v] : headers)
    if (iequals(n, name)) return v;
  return "";
}

bool HttpRequest::has_header(std::string_view name) const {
  for (const auto& h : headers)
    if (iequals(h.first, name)) return true;
  return false;
}

const char* outcome_name(Outcome o) {
  switch (o) {
    case Outcome::done:
      return "done";
    case Outcome::refused:
      return "refused";
    case Outcome::client_left:
      return "client_left";
    case Outcome::shutdown:
      return "shutdown";
  }
  return "?";
}

std::string status_reason(int status) {
  if (status == 499) return "Client Closed Request";
  const std::string_view r = bhttp::obsolete_reason(bhttp::int_to_status(unsigned(status)));
  return r.empty() || r == "<unknown-status>" ? "Status" : std::string(r);
}

std::string error_json(int status, const std::string& type, const std::string& message) {
  // The message is ours, but may quote the client's bytes: escaped as JSON strings are.
  std::string m;
  for (const char c : message) {
    const auto u = uint8_t(c);
    if (c == '"' || c == '\\')
      m += '\\', m += c;
    else if (u < 0x20 || u >= 0x80)
      m += fmt::format("\\u{:04x}", u);
    else
      m += c;
  }
  return fmt::format(R"({{"error":{{"code":{},"message":"{}","type":"{}"}}}})", status, m, type);
}

// ---------------------------------------------------------------------------------------------
// RequestParser

struct RequestParser::Impl {
  TransportLimits limits;
  std::optional<bhttp::request_parser<bhttp::string_body>> p;
  bool head_reported = false;
  HttpRequest req;
  HeaderVerdict err;
};

RequestParser::RequestParser(const TransportLimits& limits) : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  impl_->p.emplace();
  impl_->p->header_limit(uint32_t(kMaxHeaderBytes));
  impl_->p->body_limit(uint64_t(limits.max_body_bytes));
}

RequestParser::~RequestParser() = default;

HttpRequest& RequestParser::request() { return impl_->req; }
const HeaderVerdict& RequestParser::error() const { return impl_->err; }
bool RequestParser::keep_alive() const {
  return impl_->p->is_header_done() && impl_->p->keep_alive();
}
bool RequestParser::expects_continue() const {
  const std::string e = impl_->req.header("Expect");
  return iequals(e, "100-continue");
}
bool RequestParser::body_pending() const {
  return impl_->p->is_header_done() && !impl_->p->is_done();
}

size_t RequestParser::feed(std::string_view bytes, State& state) {
  Impl& m = *impl_;
  auto& p = *m.p;
  size_t used = 0;
  const auto fail = [&](int status, std::string type, std::string message) {
    m.err = {status, std::move(type), std::move(message)};
    state = State::error;
    return used;
  };
  for (;;) {
    if (p.is_header_done() && !m.head_reported) {
      m.head_reported = true;
      const auto& h = p.get();
      HttpRequest& r = m.req;
      r.method = std::string(h.method_string());
      r.target = std::string(h.target());
      r.version = int(h.version());
      for (const auto& f : h)
        r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
      // The origin form ("/path?query"), or the absolute form a proxy would send.
      std::string_view t = r.target;
      if (t.starts_with("http://") || t.starts_with("https://")) {
        const size_t slash = t.find('/', t.find("//") + 2);
        t = slash == std::string_view::npos ? "/" : t.substr(slash);
      }
      if (t.empty() || (t[0] != '/' && !(t == "*" && r.method == "OPTIONS")))
        return fail(
            400, "invalid_request_error",
            fmt::format("the request target must be a path (got {:?})", r.target.substr(0, 80)));
      r.path = std::string(t.substr(0, t.find('?')));
      if (HeaderVerdict v = check_request_headers(r.headers); v.status != 0) {
        m.err = std::move(v);
        state = State::error;
        return used;
      }
      state = State::head;
      return used;
    }
    if (p.is_done()) {
      m.req.body = std::move(p.get().body());
      state = State::complete;
      return used;
    }
    if (used == bytes.size()) {
      state = State::need_more;
      return used;
    }
    boost::beast::error_code ec;
    const size_t n = p.put(asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    used += n;
    if (ec == bhttp::error::need_more) {
      state = State::need_more;
      return used;
    }
    if (ec == bhttp::error::header_limit)
      return fail(431, "request_header_fields_too_large",
                  fmt::format("the request head is over {} bytes", kMaxHeaderBytes));
    if (ec == bhttp::error::body_limit)
      return fail(413, "request_too_large",
                  fmt::format("the request body is over {} bytes", m.limits.max_body_bytes));
    if (ec)
      return fail(400, "invalid_request_error", fmt::format("malformed request: {}", ec.message()));
    if (n == 0 && !p.is_header_done() && !p.is_done()) {  // nothing taken, no error: wait
      state = State::need_more;
      return used;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// HttpTransport

namespace {

std::string head_text(const HttpResponse& res, int version, bool chunked, bool close,
                      size_t length) {
  std::string h = fmt::format("HTTP/1.{} {} {}\r\nContent-Type: {}\r\n", version == 10 ? 0 : 1,
                              res.status, status_reason(res.status), res.content_type);
  if (chunked)
    h += "Transfer-Encoding: chunked\r\n";
  else if (length != size_t(-1) && res.status != 204 && res.status != 304)
    h += fmt::format("Content-Length: {}\r\n", length);
  if (close)
    h += "Connection: close\r\n";
  else if (version == 10)
    h += "Connection: keep-alive\r\n";
  for (const auto& [n, v] : res.headers) h += fmt::format("{}: {}\r\n", n, v);
  h += "\r\n";
  return h;
}

}  // namespace

struct HttpTransport::Impl {
  TransportLimits limits;
  TransportHandlers handlers;
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::optional<WorkerPool> workers;
  std::thread io_thread;
  std::atomic<bool> stopping{false}, stop_called{false}, hard_stop{false}, started{false};
  std::atomic<uint64_t> next_id{1};
  std::atomic<int> handling{0};  // replies being written by workers
  // The connections, on the I/O thread only.
  struct Conn;
  std::unordered_set<std::shared_ptr<Conn>> conns;
  std::map<std::string, size_t> per_client;
  // Counted on the I/O thread, waited for by stop().
  std::mutex m;
  std::condition_variable cv;
  size_t open = 0;
  std::optional<asio::steady_timer> accept_retry;

  void accept();
  void accepted(tcp::socket sock);
  void closed(const std::shared_ptr<Conn>& c);
};

struct HttpTransport::Impl::Conn : std::enable_shared_from_this<Conn>, ReplyWriter {
  enum class Phase { idle, head, body, handling, closing };
  Impl& t;
  tcp::socket sock;
  asio::steady_timer timer;
  std::string client;
  boost::beast::flat_buffer buf;
  std::optional<RequestParser> parser;
  Phase phase = Phase::idle;
  Clock::time_point head_start, body_start, request_start;
  uint64_t timer_gen = 0;
  bool timed_out = false, is_closed = false;
  bool short_linger = false;  // a refusal at the connection caps: let go quickly
  // Worker side (while Phase::handling).
  Clock::time_point last_progress;
  bool write_failed = false;
  Outcome write_failure = Outcome::client_left;

  Conn(Impl& tr, tcp::socket s, std::string c)
      : t(tr), sock(std::move(s)), timer(tr.io), client(std::move(c)) {}

  // ---- I/O thread
  void begin_request() {
    parser.emplace(t.limits);
    phase = Phase::idle;
    parse();
  }
  // A new connection's first request is a head like any other: a client that connects and
  // says nothing is let go after the header timeout, not the keep-alive time.
  bool first_request = true;
  Clock::time_point accepted_at = Clock::now();

  // A deadline for an operation whose end only closes the connection (a reply the I/O thread
  // writes, the 100 Continue, the drain before closing): on expiry the connection is closed,
  // whatever completions are already queued.
  void arm_close(Clock::time_point deadline) {
    const uint64_t gen = ++timer_gen;
    timer.expires_at(deadline);
    timer.async_wait([self = shared_from_this(), gen](const boost::system::error_code& ec) {
      if (ec || gen != self->timer_gen || self->is_closed) return;
      self->close();
    });
  }
  void disarm() {
    ++timer_gen;
    timer.cancel();
  }

  // A deadline for a read: on expiry the read ends and on_read says why (timed_out).
  void arm(Clock::time_point deadline) {
    const uint64_t gen = ++timer_gen;
    timer.expires_at(deadline);
    timer.async_wait([self = shared_from_this(), gen](const boost::system::error_code& ec) {
      if (ec || gen != self->timer_gen || self->is_closed) return;
      self->timed_out = true;
      boost::system::error_code ignored;
      self->sock.cancel(ignored);
    });
  }

  void read_more() {
    const auto now = Clock::now();
    Clock::time_point deadline;
    if (phase == Phase::idle)
      deadline = first_request ? accepted_at + t.limits.header_timeout : now + t.limits.keep_alive;
    else if (phase == Phase::head)
      deadline = head_start + t.limits.header_timeout;
    else
      deadline = std::min(body_start + t.limits.body_timeout, now + t.limits.header_timeout);
    timed_out = false;
    arm(deadline);
    sock.async_read_some(buf.prepare(16384), [self = shared_from_this()](
                                                 const boost::system::error_code& ec, size_t n) {
      ++self->timer_gen;
      self->timer.cancel();
      self->on_read(ec, n);
    });
  }

  void on_read(const boost::system::error_code& ec, size_t n) {
    if (is_closed) return;
    if (timed_out) {
      if (phase == Phase::idle || t.stopping) return close();
      return refuse(408, "timeout_error",
                    phase == Phase::head
                        ? fmt::format("the request head did not arrive within {} s",
                                      t.limits.header_timeout.count() / 1000.0)
                        : fmt::format("the request body did not arrive within its time ({} s, "
                                      "and no pause over {} s)",
                                      t.limits.body_timeout.count() / 1000.0,
                                      t.limits.header_timeout.count() / 1000.0));
    }
    if (ec) {
      // The client closed or reset: quietly between requests, else the request ends here.
      if (phase == Phase::body) report(0, Outcome::client_left, "the body was cut short");
      return close();
    }
    buf.commit(n);
    parse();
  }

  void parse() {
    for (;;) {
      if (phase == Phase::idle && buf.size() > 0) {
        phase = Phase::head;
        head_start = request_start = Clock::now();
      }
      RequestParser::State st;
      const auto* data = static_cast<const char*>(buf.data().data());
      const size_t used = parser->feed(std::string_view(data, buf.size()), st);
      buf.consume(used);
      switch (st) {
        case RequestParser::State::need_more:
          if (t.stopping) return close();
          // A head is bounded by the parser; a chunk's size line and the trailers are not, and
          // would otherwise be buffered for as long as they grow.
          if (buf.size() > kMaxHeaderBytes)
            return refuse(
                400, "invalid_request_error",
                fmt::format("a chunk header or the trailers are over {} bytes", kMaxHeaderBytes));
          return read_more();
        case RequestParser::State::error: {
          const HeaderVerdict& e = parser->error();
          return refuse(e.status, e.type, e.message);
        }
        case RequestParser::State::head: {
          HttpRequest& r = parser->request();
          r.id = t.next_id++;
          r.remote_addr = client;
          phase = Phase::body;
          body_start = Clock::now();
          HttpResponse res;
          bool answered = false;
          try {
            answered = t.handlers.check_head && t.handlers.check_head(r, res);
          } catch (const std::exception& e) {
            res = HttpResponse{};
            res.status = 500;
            res.body = error_json(500, "server_error", e.what());
            res.close = answered = true;
          }
          if (answered) return answer_now(res);
          // An HTTP/1.0 client's expectation is ignored (RFC 9110 10.1.1).
          if (parser->expects_continue() && parser->body_pending() && r.version == 11) {
            auto msg = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
            arm_close(body_start + t.limits.body_timeout);
            asio::async_write(
                sock, asio::buffer(*msg),
                [self = shared_from_this(), msg](const boost::system::error_code& ec, size_t) {
                  if (ec || self->is_closed) {
                    if (!self->is_closed)
                      self->report(0, Outcome::client_left, "the client left before its body");
                    return self->close();
                  }
                  self->disarm();
                  self->parse();
                });
            return;
          }
          continue;
        }
        case RequestParser::State::complete:
          return dispatch();
      }
    }
  }

  // A reply the I/O thread writes itself (refusals, preflights); the connection is kept only
  // when the request was read whole and the reply does not end it.
  void answer_now(HttpResponse& res) {
    const bool keep = !res.close && parser->keep_alive() && !parser->body_pending() && !t.stopping;
    const HttpRequest& r = parser->request();
    auto text =
        std::make_shared<std::string>(head_text(res, r.version, false, !keep, res.body.size()) +
                                      (r.method == "HEAD" ? std::string() : res.body));
    RequestEnd end{r.id,
                   r.method,
                   r.path,
                   client,
                   res.status,
                   res.status >= 400 ? Outcome::refused : Outcome::done,
                   seconds_since(request_start),
                   res.detail};
    write_then(text, std::move(end), keep);
  }

  // An error the transport itself answers (the head was not acceptable, or too slow): the
  // connection is closed after it, since what follows in it cannot be trusted to be framed.
  void refuse(int status, const std::string& type, const std::string& message) {
    HttpResponse res;
    res.status = status;
    res.body = error_json(status, type, message);
    res.close = true;
    HttpRequest& r = parser->request();
    if (r.id == 0) r.id = t.next_id++;
    auto text = std::make_shared<std::string>(
        head_text(res, r.version == 10 ? 10 : 11, false, true, res.body.size()) +
        (r.method == "HEAD" ? std::string() : res.body));
    RequestEnd end{r.id,
                   r.method.empty() ? "-" : r.method,
                   r.path.empty() ? "-" : r.path,
                   client,
                   status,
                   Outcome::refused,
                   seconds_since(request_start),
                   message};
    write_then(text, std::move(end), false);
  }

  void write_then(std::shared_ptr<std::string> text, RequestEnd end, bool keep) {
    phase = Phase::closing;
    arm_close(Clock::now() + std::min(t.limits.write_timeout, milliseconds(5000)));
    asio::async_write(sock, asio::buffer(*text),
                      [self = shared_from_this(), text, end = std::move(end), keep](
                          const boost::system::error_code& ec, size_t) mutable {
                        self->disarm();
                        if (ec || self->is_closed) {
                          end.outcome = self->t.stopping ? Outcome::shutdown : Outcome::client_left;
                          self->report(end);
                          return self->close();
                        }
                        self->report(end);
                        self->first_request = false;
                        if (keep && !self->t.stopping) return self->begin_request();
                        self->linger_close();
                      });
  }

  // Closing after a reply while the client may still be sending (a body left unread): the
  // write side first, then what arrives is read and dropped for a moment, so the client reads
  // the reply instead of a reset.
  void linger_close() {
    if (is_closed) return;
    boost::system::error_code ignored;
    sock.shutdown(tcp::socket::shutdown_send, ignored);
    phase = Phase::closing;
    arm_close(Clock::now() + milliseconds(t.stopping || short_linger ? 200 : 2000));
    drain(size_t(1) << 20);
  }
  void drain(size_t budget) {
    auto sink = std::make_shared<std::array<char, 16384>>();
    sock.async_read_some(asio::buffer(*sink), [self = shared_from_this(), sink, budget](
                                                  const boost::system::error_code& ec, size_t n) {
      if (ec || n >= budget || self->is_closed) return self->close();
      self->drain(budget - n);
    });
  }

  void close() {
    if (is_closed) return;
    is_closed = true;
    ++timer_gen;
    timer.cancel();
    boost::system::error_code ignored;
    sock.shutdown(tcp::socket::shutdown_both, ignored);
    sock.close(ignored);
    t.closed(shared_from_this());
  }

  void report(int status, Outcome o, std::string detail) {
    const HttpRequest& r = parser->request();
    report(RequestEnd{r.id, r.method.empty() ? "-" : r.method, r.path.empty() ? "-" : r.path,
                      client, status, o, seconds_since(request_start), std::move(detail)});
  }
  void report(const RequestEnd& e) {
    if (!t.handlers.finished) return;
    try {
      t.handlers.finished(e);
    } catch (...) {  // a log that cannot be written (stderr closed) must not end the server
    }
  }

  void dispatch() {
    if (t.stopping || is_closed) {
      report(0, Outcome::shutdown, "the server is stopping");
      return close();
    }
    phase = Phase::handling;
    ++t.handling;
    if (!t.workers->submit([self = shared_from_this()] { self->serve(); })) {
      --t.handling;
      report(0, Outcome::shutdown, "the server is stopping");
      close();
    }
  }

  // ---- worker thread (the I/O thread leaves the socket alone meanwhile)
  void serve() {
    const HttpRequest& req = parser->request();
    HttpResponse res;
    write_failed = false;
    last_progress = Clock::now();
    const auto failed = [&](const std::string& what) {
      res = HttpResponse{};
      res.status = 500;
      res.body = error_json(500, "server_error", what);
      res.detail = what;
    };
    try {
      t.handlers.handle(req, res, *this);
    } catch (const std::exception& e) {
      failed(e.what());
    } catch (...) {
      failed("unknown error");
    }
    // An HTTP/1.0 request framed as chunked ends its connection (RFC 9112 6.1).
    const bool keep = !res.close && parser->keep_alive() && !t.stopping &&
                      !(req.version == 10 && req.has_header("Transfer-Encoding"));
    const bool head_only = req.method == "HEAD";
    Outcome outcome = res.status >= 400 ? Outcome::refused : Outcome::done;
    if (res.status == 499) outcome = Outcome::client_left;
    if (res.stream) {
      const bool chunked = req.version != 10;
      chunked_ = chunked;
      bool ok = send(head_text(res, req.version, chunked, !keep || !chunked, size_t(-1)));
      std::string detail;
      bool complete = head_only;
      if (ok && !head_only) {
        try {
          complete = res.stream(*this, detail);
        } catch (const std::exception& e) {
          detail = fmt::format("the stream failed: {}", e.what());
        } catch (...) {
          detail = "the stream failed";
        }
        if (complete && chunked) ok = send("0\r\n\r\n");
      }
      res.detail = detail;
      if (!ok || !complete)
        outcome = write_failed ? write_failure
                  : t.stopping ? Outcome::shutdown
                               : Outcome::client_left;
      finish(req, res, outcome, keep && chunked && ok && complete);
      return;
    }
    std::string text = head_text(res, req.version, false, !keep, res.body.size());
    if (!head_only) text += res.body;
    const bool ok = send(text);
    if (!ok && outcome != Outcome::client_left) outcome = write_failure;
    finish(req, res, outcome, keep && ok);
  }

  void finish(const HttpRequest& req, const HttpResponse& res, Outcome o, bool keep) {
    report(RequestEnd{req.id, req.method, req.path, client, res.status, o,
                      seconds_since(request_start), res.detail});
    asio::post(t.io, [self = shared_from_this(), keep] {
      --self->t.handling;
      if (self->is_closed) return;
      self->first_request = false;
      if (keep && !self->t.stopping) return self->begin_request();
      self->linger_close();
    });
  }

  bool chunked_ = true;

  // Everything of `bytes`, or false: the client left, stopped reading for the write timeout,
  // or the server is past its shutdown grace.
  bool send(std::string_view bytes) {
    if (write_failed) return false;
    const int fd = sock.native_handle();
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        bytes.remove_prefix(size_t(n));
        last_progress = Clock::now();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (t.hard_stop) return fail_write(Outcome::shutdown);
        if (Clock::now() - last_progress > t.limits.write_timeout)
          return fail_write(Outcome::client_left);
        pollfd pfd{fd, POLLOUT, 0};
        ::poll(&pfd, 1, 100);
        continue;
      }
      return fail_write(Outcome::client_left);
    }
    return true;
  }
  bool fail_write(Outcome why) {
    write_failed = true;
    write_failure = why;
    return false;
  }

  // ReplyWriter
  bool write(std::string_view bytes) override {
    if (t.hard_stop) return fail_write(Outcome::shutdown);
    if (bytes.empty()) return alive();
    if (!chunked_) return send(bytes);
    return send(fmt::format("{:x}\r\n", bytes.size())) && send(bytes) && send("\r\n");
  }
  bool alive() override {
    if (write_failed) return false;
    if (t.stopping) return false;
    char c;
    const ssize_t n = ::recv(sock.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return !(n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR));
  }
  bool stopping() const override { return t.stopping; }
};

void HttpTransport::Impl::accept() {
  acceptor.async_accept([this](const boost::system::error_code& ec, tcp::socket sock) {
    if (stopping) return;
    if (ec) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      // Out of descriptors (or another passing failure): try again shortly, not in a spin.
      accept_retry.emplace(io, milliseconds(100));
      accept_retry->async_wait([this](const boost::system::error_code& e) {
        if (!e && !stopping) accept();
      });
      return;
    }
    accepted(std::move(sock));
    accept();
  });
}

void HttpTransport::Impl::accepted(tcp::socket sock) {
  boost::system::error_code ec;
  const auto peer = sock.remote_endpoint(ec);
  if (ec) return;
  sock.set_option(tcp::no_delay(true), ec);
  std::string client = peer.address().to_string();
  auto c = std::make_shared<Conn>(*this, std::move(sock), client);
  conns.insert(c);
  {
    std::lock_guard<std::mutex> lock(m);
    ++open;
  }
  const size_t mine = ++per_client[client];
  // Past a cap: a 503 that says which, and the connection closed.
  std::string why;
  if (conns.size() > limits.max_connections)
    why = fmt::format("too many connections: {} are open (--max-connections {}); retry later",
                      conns.size() - 1, limits.max_connections);
  else if (mine > limits.max_connections_per_client)
    why = fmt::format(
        "too many connections from {}: {} are open (--max-connections-per-client {}); retry "
        "later",
        client, mine - 1, limits.max_connections_per_client);
  c->parser.emplace(limits);
  c->request_start = Clock::now();
  if (!why.empty()) {
    c->short_linger = true;
    return c->refuse(503, "unavailable_error", why);
  }
  c->begin_request();
}

void HttpTransport::Impl::closed(const std::shared_ptr<Conn>& c) {
  if (auto it = per_client.find(c->client); it != per_client.end() && --it->second == 0)
    per_client.erase(it);
  conns.erase(c);
  {
    std::lock_guard<std::mutex> lock(m);
    --open;
  }
  cv.notify_all();
}

HttpTransport::HttpTransport(TransportLimits limits, TransportHandlers handlers)
    : impl_(std::make_unique<Impl>()) {
  impl_->limits = limits;
  impl_->handlers = std::move(handlers);
}

HttpTransport::~HttpTransport() {
  stop();
  if (impl_->io_thread.joinable()) impl_->io_thread.join();
}

void HttpTransport::listen(const std::string& host, int port) {
  Impl& m = *impl_;
  boost::system::error_code ec;
  tcp::resolver resolver(m.io);
  const auto results = resolver.resolve(
      host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec) throw std::system_error(EADDRNOTAVAIL, std::generic_category(), host);
  // IPv4 first: "localhost" then listens where most clients look for it (127.0.0.1).
  std::vector<tcp::endpoint> endpoints;
  for (const auto& r : results) endpoints.push_back(r.endpoint());
  std::stable_partition(endpoints.begin(), endpoints.end(),
                        [](const tcp::endpoint& e) { return e.address().is_v4(); });
  boost::system::error_code last = asio::error::host_not_found;
  for (const tcp::endpoint& e : endpoints) {
    tcp::acceptor a(m.io);
    a.open(e.protocol(), last);
    if (last) continue;
    a.set_option(asio::socket_base::reuse_address(true), last);
    if (!last) a.bind(e, last);
    if (!last) a.listen(asio::socket_base::max_listen_connections, last);
    if (last) continue;
    m.acceptor = std::move(a);
    return;
  }
  throw std::system_error(last.value(), std::generic_category(), host);
}

int HttpTransport::port() const {
  boost::system::error_code ec;
  const auto e = impl_->acceptor.local_endpoint(ec);
  return ec ? 0 : int(e.port());
}

void HttpTransport::start() {
  Impl& m = *impl_;
  if (m.started.exchange(true)) return;
  m.workers.emplace(std::max<size_t>(1, m.limits.workers));
  m.accept();
  m.io_thread = std::thread([&m] {
    auto guard = asio::make_work_guard(m.io);
    for (;;) {
      try {
        m.io.run();
        return;
      } catch (const std::exception& e) {  // one connection's failure (out of memory, ...)
        std::fprintf(stderr, "polystack: the HTTP transport went on after: %s\n", e.what());
      } catch (...) {
      }
    }
  });
}

bool HttpTransport::stopping() const { return impl_->stopping; }

void HttpTransport::announce_stop() { impl_->stopping = true; }

void HttpTransport::stop() {
  Impl& m = *impl_;
  m.stopping = true;
  if (m.stop_called.exchange(true)) return;
  if (!m.started) return;
  // Stop accepting; close what waits or reads (a trickling client gets nothing more).
  asio::post(m.io, [&m] {
    boost::system::error_code ignored;
    m.acceptor.close(ignored);
    if (m.accept_retry) m.accept_retry->cancel();
    std::vector<std::shared_ptr<Impl::Conn>> reading;
    for (const auto& c : m.conns)
      if (c->phase != Impl::Conn::Phase::handling && c->phase != Impl::Conn::Phase::closing)
        reading.push_back(c);
    for (const auto& c : reading) {
      // A request whose head was read ends here; an idle or half-read one was never a request.
      if (c->phase == Impl::Conn::Phase::body)
        c->report(0, Outcome::shutdown, "the server stopped before the body came");
      c->close();
    }
  });
  // Running replies end themselves (their writers say stopping); past the grace their writes
  // fail too.
  {
    std::unique_lock<std::mutex> lock(m.m);
    m.cv.wait_for(lock, m.limits.shutdown_grace, [&m] { return m.open == 0; });
  }
  m.hard_stop = true;
  {
    std::unique_lock<std::mutex> lock(m.m);
    m.cv.wait_for(lock, milliseconds(1000), [&m] { return m.open == 0; });
  }
  // What is left (a reply whose client stopped reading) ends with the workers.
  asio::post(m.io, [&m] {
    std::vector<std::shared_ptr<Impl::Conn>> left;
    for (const auto& c : m.conns)
      if (c->phase != Impl::Conn::Phase::handling) left.push_back(c);
    for (const auto& c : left) c->close();
  });
  m.workers.reset();  // joins: every handler has returned
  m.io.stop();
  if (m.io_thread.joinable()) m.io_thread.join();
}

}  // namespace ps::server
