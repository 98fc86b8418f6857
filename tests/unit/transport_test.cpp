// The server's HTTP transport (server/transport.h): its request parser on bytes split every
// way, and the transport itself on 127.0.0.1 with small limits: pipelining, chunked bodies,
// framing refusals that close the connection, the connection caps, the head deadline and a
// shutdown bounded while a client trickles and a reply streams.
#include "server/transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ps::server {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

struct Parsed {
  std::vector<HttpRequest> requests;
  int error = 0;
  std::string message;
};

// Feeds `bytes` in pieces of `step` bytes, as a connection would get them, into one parser per
// request.
Parsed parse_all(const std::string& bytes, size_t step, TransportLimits limits = {}) {
  Parsed out;
  std::string pending;
  size_t at = 0;
  auto parser = std::make_unique<RequestParser>(limits);
  for (;;) {
    RequestParser::State st;
    const size_t used = parser->feed(pending, st);
    pending.erase(0, used);
    if (st == RequestParser::State::error) {
      out.error = parser->error().status;
      out.message = parser->error().message;
      return out;
    }
    if (st == RequestParser::State::head) continue;
    if (st == RequestParser::State::complete) {
      out.requests.push_back(parser->request());
      parser = std::make_unique<RequestParser>(limits);
      continue;
    }
    if (at >= bytes.size()) return out;
    pending += bytes.substr(at, step);
    at += step;
  }
}

const std::string kPipelined =
    "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    "POST /tokenize?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 11\r\n\r\nhello world"
    "POST /v1/completions HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    "5\r\n{\"a\":\r\n3;ext=1\r\n 1}\r\n0\r\n\r\n"
    "GET /v1/models HTTP/1.0\r\n\r\n";

TEST(RequestParser, PipelinedRequestsInAnySplitsReadTheSame) {
  for (size_t step : {size_t(1), size_t(2), size_t(7), size_t(64), kPipelined.size()}) {
    const Parsed p = parse_all(kPipelined, step);
    ASSERT_EQ(p.error, 0) << p.message << " (pieces of " << step << ")";
    ASSERT_EQ(p.requests.size(), 4u) << "pieces of " << step;
    EXPECT_EQ(p.requests[0].method, "GET");
    EXPECT_EQ(p.requests[0].path, "/health");
    EXPECT_EQ(p.requests[0].header("host"), "127.0.0.1");
    EXPECT_EQ(p.requests[1].path, "/tokenize");
    EXPECT_EQ(p.requests[1].target, "/tokenize?x=1");
    EXPECT_EQ(p.requests[1].body, "hello world");
    EXPECT_EQ(p.requests[2].body, "{\"a\": 1}");  // chunked, decoded
    EXPECT_EQ(p.requests[3].version, 10);
  }
}

TEST(RequestParser, AChunkedBodyOfOnlyItsLastChunkInPieces) {
  const std::string r =
      "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-Trailer: 1\r\n\r\n"
      "POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
  for (size_t step : {size_t(1), size_t(2), size_t(3), r.size()}) {
    const Parsed p = parse_all(r, step);
    ASSERT_EQ(p.error, 0) << p.message << " (pieces of " << step << ")";
    ASSERT_EQ(p.requests.size(), 2u);
    EXPECT_EQ(p.requests[1].path, "/b");
    EXPECT_EQ(p.requests[1].body, "");
  }
}

TEST(RequestParser, AmbiguousOrBrokenFramingIs400) {
  const std::vector<std::string> bad = {
      "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
      "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
      "POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
      "GET /\x01 HTTP/1.1\r\n\r\n",
      "GET nothing HTTP/1.1\r\n\r\n",
      "GET / HTTP/1.1\r\nBad Header\r\n\r\n",
  };
  for (const std::string& b : bad)
    for (size_t step : {size_t(1), b.size()}) {
      const Parsed p = parse_all(b, step);
      EXPECT_EQ(p.error, 400) << b;
      EXPECT_TRUE(p.requests.empty()) << b;
    }
}

TEST(RequestParser, LimitsAreStatuses) {
  // A head over 64 KiB, and one of 101 fields: 431, whatever follows.
  std::string big = "GET / HTTP/1.1\r\nX-Pad: " + std::string(70000, 'a') + "\r\n\r\n";
  EXPECT_EQ(parse_all(big, 4096).error, 431);
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 101; ++i) many += "X-F" + std::to_string(i) + ": 1\r\n";
  EXPECT_EQ(parse_all(many + "\r\n", 100).error, 431);
  // A body over the limit is refused from its declared length, before any of it comes.
  TransportLimits small;
  small.max_body_bytes = 10;
  EXPECT_EQ(parse_all("POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", 5, small).error, 413);
  EXPECT_EQ(parse_all("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nb\r\nhello world\r\n"
                      "0\r\n\r\n",
                      5, small)
                .error,
            413);
  EXPECT_EQ(
      parse_all("POST / HTTP/1.1\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\nab", 100)
          .error,
      415);
}

TEST(RequestParser, KeepAliveAndContinue) {
  TransportLimits l;
  RequestParser p(l);
  RequestParser::State st;
  std::string head = "POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
  EXPECT_EQ(p.feed(head, st), head.size());
  EXPECT_EQ(st, RequestParser::State::head);
  EXPECT_TRUE(p.expects_continue());
  EXPECT_TRUE(p.body_pending());
  EXPECT_TRUE(p.keep_alive());
  p.feed("ok", st);
  EXPECT_EQ(st, RequestParser::State::complete);
  EXPECT_EQ(p.request().body, "ok");

  RequestParser q(l);
  q.feed("GET / HTTP/1.1\r\nConnection: close\r\n\r\n", st);
  EXPECT_FALSE(q.keep_alive());
  RequestParser r(l);
  r.feed("GET / HTTP/1.0\r\n\r\n", st);
  EXPECT_FALSE(r.keep_alive());
}

// ---- the transport on a socket

int connect_to(int port, const char* from = "127.0.0.1") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in src{};
  src.sin_family = AF_INET;
  inet_pton(AF_INET, from, &src.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&src), sizeof(src)) != 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, const std::string& s) {
  size_t at = 0;
  while (at < s.size()) {
    const ssize_t n = send(fd, s.data() + at, s.size() - at, MSG_NOSIGNAL);
    if (n <= 0) return;
    at += size_t(n);
  }
}

// Everything the server sends until it closes, or `limit` passes.
std::string read_until_closed(int fd, std::chrono::milliseconds limit, bool* closed = nullptr) {
  std::string out;
  const auto end = Clock::now() + limit;
  if (closed) *closed = false;
  while (Clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    const int left =
        int(std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count());
    if (poll(&p, 1, std::max(left, 1)) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    out.append(buf, size_t(n));
  }
  return out;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

struct Fixture {
  TransportLimits limits;
  std::mutex m;
  std::vector<RequestEnd> ends;
  std::atomic<int> streaming{0};
  std::unique_ptr<HttpTransport> t;

  void start() {
    TransportHandlers h;
    h.check_head = [](const HttpRequest& req, HttpResponse& res) {
      if (req.path != "/forbidden") return false;
      res.status = 403;
      res.body = error_json(403, "permission_error", "no");
      return true;
    };
    h.handle = [this](const HttpRequest& req, HttpResponse& res, ReplyWriter&) {
      if (req.path == "/big") {  // far more than socket buffers hold
        res.stream = [](ReplyWriter& w, std::string& detail) {
          const std::string chunk(64 << 10, 'x');
          for (int i = 0; i < 4096; ++i)
            if (!w.write(chunk)) {
              detail = w.stopping() ? "stopping" : "gone";
              return false;
            }
          return true;
        };
        return;
      }
      if (req.path == "/stream") {
        res.content_type = "text/event-stream";
        res.stream = [this](ReplyWriter& w, std::string& detail) {
          ++streaming;
          for (int i = 0; i < 1000; ++i) {
            if (!w.write("data: tick\n\n")) {
              detail = w.stopping() ? "stopping" : "gone";
              return false;
            }
            std::this_thread::sleep_for(20ms);
          }
          return true;
        };
        return;
      }
      res.set_content(req.method + " " + req.path + " [" + req.body + "]", "text/plain");
    };
    h.finished = [this](const RequestEnd& e) {
      std::lock_guard<std::mutex> lock(m);
      ends.push_back(e);
    };
    t = std::make_unique<HttpTransport>(limits, h);
    t->listen("127.0.0.1", 0);
    t->start();
  }
  std::vector<RequestEnd> ended() {
    std::lock_guard<std::mutex> lock(m);
    return ends;
  }
};

TEST(HttpTransport, PipelinedRequestsAreAnsweredInOrder) {
  Fixture f;
  f.start();
  const int fd = connect_to(f.t->port());
  ASSERT_GE(fd, 0);
  send_all(fd, kPipelined);
  bool closed = false;
  const std::string got = read_until_closed(fd, 3000ms, &closed);
  close(fd);
  const size_t a = got.find("GET /health []"), b = got.find("POST /tokenize [hello world]"),
               c = got.find("POST /v1/completions [{\"a\": 1}]"), d = got.find("GET /v1/models []");
  ASSERT_NE(d, std::string::npos) << got;
  EXPECT_TRUE(a < b && b < c && c < d) << got;
  EXPECT_EQ(count(got, "HTTP/1.1 200 OK"), 3u) << got;
  EXPECT_EQ(count(got, "HTTP/1.0 200 OK"), 1u) << got;
  EXPECT_TRUE(closed) << "an HTTP/1.0 request without keep-alive ends its connection";
}

TEST(HttpTransport, RefusedFramingClosesTheConnection) {
  Fixture f;
  f.start();
  // A smuggling attempt: what the body would hide as a second request is never answered.
  const int fd = connect_to(f.t->port());
  send_all(fd,
           "POST /a HTTP/1.1\r\nContent-Length: 40\r\nTransfer-Encoding: chunked\r\n\r\n"
           "0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n");
  bool closed = false;
  const std::string got = read_until_closed(fd, 3000ms, &closed);
  close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 400 ", 0), 0u) << got;
  EXPECT_EQ(count(got, "HTTP/1.1"), 1u) << got;
  EXPECT_EQ(got.find("smuggled"), std::string::npos) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  EXPECT_TRUE(closed);
  // A head refused by the check: answered without reading the body; the connection ends.
  const int fd2 = connect_to(f.t->port());
  send_all(fd2, "POST /forbidden HTTP/1.1\r\nContent-Length: 100000\r\n\r\npartial");
  const std::string got2 = read_until_closed(fd2, 5000ms, &closed);
  close(fd2);
  EXPECT_EQ(got2.rfind("HTTP/1.1 403 ", 0), 0u) << got2;
  EXPECT_TRUE(closed);
  const auto ends = f.ended();
  ASSERT_EQ(ends.size(), 2u);
  EXPECT_EQ(ends[0].status, 400);
  EXPECT_EQ(ends[0].outcome, Outcome::refused);
  EXPECT_EQ(ends[1].status, 403);
  EXPECT_EQ(ends[1].path, "/forbidden");
}

TEST(HttpTransport, ChunkHeadersAndTrailersAreBounded) {
  Fixture f;
  f.start();
  // A chunk-size line that never ends would otherwise be buffered for as long as it grows.
  const int fd = connect_to(f.t->port());
  send_all(fd,
           "POST /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;" + std::string(100000, 'a'));
  bool closed = false;
  std::string got = read_until_closed(fd, 5000ms, &closed);
  close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 400 ", 0), 0u) << got.substr(0, 200);
  EXPECT_NE(got.find("chunk header or the trailers"), std::string::npos) << got.substr(0, 300);
  EXPECT_TRUE(closed);
}

TEST(HttpTransport, AnswersToHeadCarryNoBody) {
  Fixture f;
  f.start();
  // Refused on the I/O thread and answered by a worker alike: the next response on the
  // connection starts where the head ends.
  const int fd = connect_to(f.t->port());
  send_all(fd,
           "HEAD /forbidden HTTP/1.1\r\n\r\nHEAD /x HTTP/1.1\r\n\r\n"
           "GET /y HTTP/1.1\r\nConnection: close\r\n\r\n");
  const std::string got = read_until_closed(fd, 3000ms);
  close(fd);
  const size_t a = got.find("HTTP/1.1 403 "), b = got.find("HTTP/1.1 200 "),
               c = got.find("HTTP/1.1 200 ", b + 1);
  ASSERT_EQ(a, 0u) << got;
  ASSERT_NE(c, std::string::npos) << got;
  EXPECT_EQ(got.substr(b - 4, 4), "\r\n\r\n") << got;
  EXPECT_EQ(got.find("[]"), got.rfind("[]")) << "only the GET has a body: " << got;
  EXPECT_NE(got.find("GET /y []"), std::string::npos) << got;
}

TEST(HttpTransport, AFailingLogDoesNotStopTheServer) {
  Fixture f;
  f.start();
  TransportHandlers h;
  h.handle = [](const HttpRequest&, HttpResponse& res, ReplyWriter&) { res.body = "{}"; };
  h.finished = [](const RequestEnd&) { throw std::runtime_error("stderr is gone"); };
  HttpTransport t(f.limits, h);
  t.listen("127.0.0.1", 0);
  t.start();
  for (int i = 0; i < 3; ++i) {
    const int fd = connect_to(t.port());
    send_all(fd, "GET / HTTP/1.1\r\nConnection: close\r\n\r\n");
    const std::string got = read_until_closed(fd, 3000ms);
    close(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 200 ", 0), 0u) << got;
  }
}

TEST(HttpTransport, ConnectionCapsAnswer503NamingTheFlag) {
  Fixture f;
  f.limits.max_connections = 3;
  f.limits.max_connections_per_client = 2;
  f.start();
  const int a = connect_to(f.t->port()), b = connect_to(f.t->port());
  const int c = connect_to(f.t->port());  // a third from 127.0.0.1
  bool closed = false;
  std::string got = read_until_closed(c, 3000ms, &closed);
  close(c);
  EXPECT_EQ(got.rfind("HTTP/1.1 503 ", 0), 0u) << got;
  EXPECT_NE(got.find("--max-connections-per-client 2"), std::string::npos) << got;
  EXPECT_TRUE(closed);
  const int d = connect_to(f.t->port(), "127.0.0.2");  // another client: the third in all
  send_all(d, "GET /ok HTTP/1.1\r\nConnection: close\r\n\r\n");
  got = read_until_closed(d, 3000ms);
  close(d);
  EXPECT_EQ(got.rfind("HTTP/1.1 200 ", 0), 0u) << got;
  const int d2 = connect_to(f.t->port(), "127.0.0.2");
  const int e = connect_to(f.t->port(), "127.0.0.3");  // the fourth in all
  got = read_until_closed(e, 3000ms);
  close(e);
  EXPECT_EQ(got.rfind("HTTP/1.1 503 ", 0), 0u) << got;
  EXPECT_NE(got.find("(--max-connections 3)"), std::string::npos) << got;
  for (int fd : {a, b, d2}) close(fd);
}

TEST(HttpTransport, ASlowHeadIs408AndDoesNotHoldOthers) {
  Fixture f;
  f.limits.header_timeout = 1500ms;
  f.start();
  std::vector<int> slow;
  for (int i = 0; i < 20; ++i) {
    slow.push_back(connect_to(f.t->port()));
    send_all(slow.back(), "G");
  }
  // While they dawdle, a whole request is served.
  const int fd = connect_to(f.t->port());
  send_all(fd, "GET /quick HTTP/1.1\r\nConnection: close\r\n\r\n");
  const auto t0 = Clock::now();
  std::string got = read_until_closed(fd, 3000ms);
  close(fd);
  EXPECT_EQ(got.rfind("HTTP/1.1 200 ", 0), 0u) << got;
  EXPECT_LT(Clock::now() - t0, 1000ms) << "served beside the slow heads, not after them";
  for (int s : slow) {
    bool closed = false;
    got = read_until_closed(s, 4000ms, &closed);
    close(s);
    EXPECT_EQ(got.rfind("HTTP/1.1 408 ", 0), 0u) << got;
    EXPECT_TRUE(closed);
  }
}

TEST(HttpTransport, AReplyTheClientDoesNotReadEndsAtTheWriteTimeout) {
  Fixture f;
  f.limits.write_timeout = 600ms;
  f.start();
  // A client with a small receive buffer that asks for a large reply and reads none of it.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const int small = 4096;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(f.t->port()));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  send_all(fd, "GET /big HTTP/1.1\r\n\r\n");
  const auto t0 = Clock::now();
  while (f.ended().empty() && Clock::now() - t0 < 10s) std::this_thread::sleep_for(10ms);
  const auto took = Clock::now() - t0;
  close(fd);
  const auto ends = f.ended();
  ASSERT_EQ(ends.size(), 1u) << "the reply never ended";
  EXPECT_EQ(ends[0].outcome, Outcome::client_left);
  EXPECT_EQ(ends[0].detail, "gone");
  EXPECT_GE(took, 600ms) << "ended before the client had been given its write timeout";
  EXPECT_LT(took, 5s);
  // The server goes on serving others.
  const int other = connect_to(f.t->port());
  send_all(other, "GET /after HTTP/1.1\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(read_until_closed(other, 3000ms).rfind("HTTP/1.1 200 ", 0), 0u);
  close(other);
}

TEST(HttpTransport, StopIsBoundedWhateverClientsDo) {
  Fixture f;
  f.limits.shutdown_grace = 500ms;
  f.start();
  const int trickle = connect_to(f.t->port());
  send_all(trickle, "GET /x HTTP/1.1\r\nX-Slow: ");
  const int stream = connect_to(f.t->port());
  send_all(stream, "GET /stream HTTP/1.1\r\n\r\n");
  const int idle = connect_to(f.t->port());
  while (f.streaming == 0) std::this_thread::sleep_for(5ms);
  const auto t0 = Clock::now();
  f.t->stop();
  EXPECT_LT(Clock::now() - t0, 2000ms);
  bool closed = false;
  const std::string got = read_until_closed(stream, 2000ms, &closed);
  EXPECT_NE(got.find("data: tick"), std::string::npos);
  EXPECT_TRUE(closed);
  for (int fd : {trickle, stream, idle}) close(fd);
  const auto ends = f.ended();
  ASSERT_EQ(ends.size(), 1u);
  EXPECT_EQ(ends[0].path, "/stream");
  EXPECT_EQ(ends[0].outcome, Outcome::shutdown);
  EXPECT_EQ(ends[0].detail, "stopping");
}

}  // namespace
}  // namespace ps::server
