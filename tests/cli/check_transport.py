#!/usr/bin/env python3
"""The HTTP transport of `polystack serve` over raw sockets, on 127.0.0.1 only.

- Keep-alive and pipelining: four requests written at once on one connection (GET /health,
  GET /v1/models, POST /tokenize with a Content-Length body, GET /health) are all answered, in
  order, on that connection; a chunked request body is decoded (the same tokens as sent with a
  length, and a request pipelined after it is answered); `Expect: 100-continue` gets an interim
  100 before the final answer.
- Framing and limits, each answered with its status and an error object and then the
  connection closed: 101 header fields or over 64 KiB of head (431; 100 fields are taken), a
  declared body over 64 MiB (413), a compressed body (415), two different lengths, a length
  beside Transfer-Encoding, a Transfer-Encoding other than chunked and a malformed chunk size
  (400). A smuggled request inside a body framed both ways is never answered: one 400, then EOF.
- A header flood (1 MiB of header lines) is a 431, and the server's peak memory grows by less
  than 16 MiB.
- 50 requests on one keep-alive connection: a median under 20 ms (with Nagle's algorithm and
  delayed ACKs it is ~40 ms).
- Timeouts: a head not complete within --header-timeout is a 408 (timeout_error) and a close;
  40 clients trickling their heads a byte at a time do not keep a fresh client from /health and
  a completion (each within 3 s), and each trickler is answered or closed within 8 s of its
  first byte; a body not complete within --body-timeout ends its connection; an idle
  connection is closed silently after --keep-alive.
- Connection caps: past --max-connections-per-client and --max-connections a new connection
  gets 503 (unavailable_error, a message naming the flag, Connection: close) and is closed;
  other addresses are served meanwhile, and once the connections close the server takes more.
- Shutdown: SIGTERM during a stream and a trickling client ends the server within 6 s with exit
  0, the stream logged as `200 shutdown`.
- Each request's log line and the /metrics counters give its outcome: done, refused, client
  left.

Exits 77 (skipped) when stories260K is absent.
"""
import argparse
import http.client
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

import servertest

SKIP = 77
problems = []


def fail(msg):
    print("FAIL:", msg)
    problems.append(msg)


def Server(binary, model, args, env=None):
    return servertest.Server(binary, model, args, env, on_fail=fail)


# ---------------------------------------------------------------------------------------------
# Raw HTTP/1.1 over a socket: requests as bytes, responses read one after another from a buffer
# (so that pipelined answers can be taken apart), and reading until the server closes.


def raw_request(method, path, body=b"", headers=(), length=True):
    """A request as bytes; Host is 127.0.0.1 unless headers give one."""
    if isinstance(body, str):
        body = body.encode()
    lines = [f"{method} {path} HTTP/1.1"]
    if not any(k.lower() == "host" for k, _ in headers):
        lines.append("Host: 127.0.0.1")
    lines += [f"{k}: {v}" for k, v in headers]
    if length and body:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def json_post(path, obj, headers=()):
    return raw_request("POST", path, json.dumps(obj),
                       [("Content-Type", "application/json")] + list(headers))


def chunked(body, sizes):
    """body in chunks of the given sizes (the rest in a last one), then the zero chunk."""
    out, at = b"", 0
    for n in list(sizes) + [len(body)]:
        piece = body[at:at + n]
        at += len(piece)
        if piece:
            out += f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
    return out + b"0\r\n\r\n"


class Response:
    def __init__(self, status, reason, headers, body):
        self.status, self.reason, self.headers, self.body = status, reason, headers, body

    def header(self, name):
        return self.headers.get(name.lower())

    def json(self):
        try:
            return json.loads(self.body.decode("utf-8", "replace"))
        except ValueError:
            return None


class Conn:
    """One client connection with a read buffer; every read bounded by the socket's timeout."""

    def __init__(self, port, source="127.0.0.1", timeout=10):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                             source_address=(source, 0))
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            raise EOFError("the server closed the connection")
        self.buf += chunk

    def _until(self, sep, limit=1 << 20):
        while sep not in self.buf:
            if len(self.buf) > limit:
                raise ValueError(f"no {sep!r} in {limit} bytes")
            self._fill()
        i = self.buf.index(sep) + len(sep)
        out, self.buf = self.buf[:i], self.buf[i:]
        return out

    def _exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_response(self, head_request=False):
        """The next response (an interim 1xx one included) with its body: by Content-Length,
        chunked, or (neither) up to the close."""
        head = self._until(b"\r\n\r\n").decode("latin-1").split("\r\n")
        parts = head[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ValueError(f"not a status line: {head[0]!r}")
        status, reason = int(parts[1]), parts[2] if len(parts) > 2 else ""
        headers = {}
        for line in head[1:]:
            if ":" in line:
                k, v = line.split(":", 1)
                headers[k.strip().lower()] = v.strip()
        if status < 200 or status in (204, 304) or head_request:
            return Response(status, reason, headers, b"")
        if "chunked" in headers.get("transfer-encoding", "").lower():
            body = b""
            while True:
                size = int(self._until(b"\r\n").split(b";")[0].strip(), 16)
                if size == 0:
                    while self._until(b"\r\n") != b"\r\n":  # trailer fields
                        pass
                    break
                body += self._exact(size)
                self._until(b"\r\n")
        elif "content-length" in headers:
            body = self._exact(int(headers["content-length"]))
        else:
            body, _ = read_all_until_eof(self.sock, self.sock.gettimeout() or 10)
            body, self.buf = self.buf + body, b""
        return Response(status, reason, headers, body)

    def rest_until_eof(self, timeout):
        data, how = read_all_until_eof(self.sock, timeout)
        data, self.buf = self.buf + data, b""
        return data, how

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


def read_all_until_eof(sock, timeout):
    """Everything the server sends until it closes: (bytes, 'eof' | 'reset' | 'timeout')."""
    deadline = time.monotonic() + timeout
    data = b""
    before = sock.gettimeout()
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return data, "timeout"
            sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except socket.timeout:
                return data, "timeout"
            except (ConnectionResetError, BrokenPipeError):
                return data, "reset"
            if not chunk:
                return data, "eof"
            data += chunk
    finally:
        sock.settimeout(before)


def check_error(what, r, status, etype=None):
    """r is `status` with an error object {"error": {"code", "type", "message"}}."""
    j = r.json() if r else None
    e = j.get("error") if isinstance(j, dict) else None
    ok = r is not None and r.status == status and isinstance(e, dict) and \
        e.get("code") == status and isinstance(e.get("message"), str) and e["message"] and \
        isinstance(e.get("type"), str) and (etype is None or e.get("type") == etype)
    if not ok:
        got = f"{r.status} {r.body[:300]!r}" if r else "no response"
        fail(f"{what}: expected {status} {etype or ''} with an error object, got {got}")
        return None
    return e


def expect_closed(what, conn, timeout=5):
    """After an answer that ends the connection: EOF (or a reset) and nothing more."""
    try:
        data, how = conn.rest_until_eof(timeout)
    except OSError as ex:
        data, how = b"", f"error {ex}"
    if how == "timeout":
        fail(f"{what}: the connection is still open {timeout} s after the answer")
    elif data:
        fail(f"{what}: {len(data)} more bytes after the answer: {data[:200]!r}")
    return how


def one_shot(port, what, data, status, etype=None, timeout=10):
    """Send data on a fresh connection; the answer must be `status` with an error object, and
    then the server closes the connection."""
    c = Conn(port, timeout=timeout)
    try:
        try:
            c.send(data)
        except OSError:
            pass  # the server may answer and close before all was sent: read what arrived
        try:
            r = c.read_response()
        except (OSError, EOFError, ValueError) as ex:
            fail(f"{what}: no response ({type(ex).__name__}: {ex})")
            return None
        e = check_error(what, r, status, etype)
        how = expect_closed(what, c)
        if e:
            print(f"{what}: {status} {e['message']!r}, then {how}")
        return r
    finally:
        c.close()


# ---------------------------------------------------------------------------------------------


def check_pipelining(srv):
    status, want = srv.request("POST", "/tokenize", {"content": "Once upon a time"})
    if status != 200 or not isinstance(want, dict) or not want.get("tokens"):
        fail(f"/tokenize: {status} {want}")
        return
    tokens = want["tokens"]

    # Four requests in one write: four answers, in order, on the same connection, which stays
    # open for a fifth.
    c = Conn(srv.port)
    try:
        c.send(raw_request("GET", "/health") + raw_request("GET", "/v1/models") +
               json_post("/tokenize", {"content": "Once upon a time"}) +
               raw_request("GET", "/health"))
        got = [c.read_response() for _ in range(4)]
        js = [r.json() for r in got]
        if [r.status for r in got] != [200] * 4 or js[0] != {"status": "ok"} or \
                not (isinstance(js[1], dict) and js[1].get("data")) or \
                not (isinstance(js[2], dict) and js[2].get("tokens") == tokens) or \
                js[3] != {"status": "ok"}:
            fail(f"pipelined requests: {[(r.status, r.body[:100]) for r in got]}")
        else:
            c.send(raw_request("GET", "/health"))
            r = c.read_response()
            if r.status != 200:
                fail(f"a fifth request after the pipelined four: {r.status}")
            else:
                print("pipelining: 4 requests in one write answered in order, then a fifth")
    except (OSError, EOFError, ValueError) as ex:
        fail(f"pipelined requests: {type(ex).__name__}: {ex}")
    finally:
        c.close()

    # A chunked body (a chunk size with a hex letter in it), decoded; a request pipelined after
    # it shows the decoder took exactly the chunked bytes.
    body = json.dumps({"content": "Once upon a time"}).encode()
    c = Conn(srv.port)
    try:
        c.send(raw_request("POST", "/tokenize", chunked(body, [3, 26]),
                           [("Content-Type", "application/json"),
                            ("Transfer-Encoding", "chunked")], length=False) +
               raw_request("GET", "/health"))
        r = c.read_response()
        r2 = c.read_response()
        if r.status != 200 or (r.json() or {}).get("tokens") != tokens or r2.status != 200:
            fail(f"a chunked body: {r.status} {r.body[:200]!r}, then {r2.status}")
        else:
            print(f"a chunked body: the same {len(tokens)} tokens, the next request answered")
    except (OSError, EOFError, ValueError) as ex:
        fail(f"a chunked body: {type(ex).__name__}: {ex}")
    finally:
        c.close()

    # Expect: 100-continue: the interim 100 comes before the body is sent.
    c = Conn(srv.port, timeout=5)
    try:
        c.send(raw_request("POST", "/tokenize", b"", [
            ("Content-Type", "application/json"), ("Content-Length", str(len(body))),
            ("Expect", "100-continue")], length=False))
        r = c.read_response()
        if r.status != 100:
            fail(f"Expect: 100-continue: the first answer is {r.status}, not 100 Continue")
        else:
            c.send(body)
            r = c.read_response()
            if r.status != 200 or (r.json() or {}).get("tokens") != tokens:
                fail(f"Expect: 100-continue: then {r.status} {r.body[:200]!r}")
            else:
                print("Expect: 100-continue: 100 Continue, then the answer")
    except (OSError, EOFError, ValueError) as ex:
        fail(f"Expect: 100-continue: {type(ex).__name__}: {ex}")
    finally:
        c.close()


def check_framing(srv):
    # 100 header fields (Host and 99 more) are taken; 101 are not.
    fields = [(f"X-F{i}", str(i)) for i in range(99)]
    c = Conn(srv.port)
    try:
        c.send(raw_request("GET", "/health", b"", fields))
        r = c.read_response()
        if r.status != 200:
            fail(f"100 header fields: {r.status} {r.body[:200]!r}")
        else:
            print("100 header fields: 200")
    except (OSError, EOFError, ValueError) as ex:
        fail(f"100 header fields: {type(ex).__name__}: {ex}")
    finally:
        c.close()
    one_shot(srv.port, "101 header fields",
             raw_request("GET", "/health", b"", fields + [("X-F99", "99")]), 431)
    one_shot(srv.port, "70 KB of head",
             raw_request("GET", "/health", b"", [("X-Big", "a" * 70000)]), 431)
    # The length alone decides: the body is never sent.
    one_shot(srv.port, "a declared body of 64 MiB + 1",
             raw_request("POST", "/tokenize", b"", [("Content-Type", "application/json"),
                                                     ("Content-Length", str((64 << 20) + 1))],
                         length=False), 413)
    body = b'{"content":"a"}'
    for coding in ("gzip", "br", "deflate"):
        one_shot(srv.port, f"Content-Encoding: {coding}",
                 raw_request("POST", "/tokenize", body, [("Content-Type", "application/json"),
                                                         ("Content-Encoding", coding)]), 415)
    # `identity` is no compression at all: noted, not judged.
    c = Conn(srv.port)
    try:
        c.send(raw_request("POST", "/tokenize", body, [("Content-Type", "application/json"),
                                                       ("Content-Encoding", "identity")]))
        print(f"note: Content-Encoding: identity is answered {c.read_response().status}")
    except (OSError, EOFError, ValueError) as ex:
        print(f"note: Content-Encoding: identity: {type(ex).__name__}: {ex}")
    finally:
        c.close()
    one_shot(srv.port, "two different Content-Lengths",
             raw_request("POST", "/tokenize", body, [
                 ("Content-Type", "application/json"), ("Content-Length", str(len(body))),
                 ("Content-Length", str(len(body) + 1))], length=False), 400)
    one_shot(srv.port, "Content-Length and Transfer-Encoding",
             raw_request("POST", "/tokenize", chunked(body, []), [
                 ("Content-Type", "application/json"), ("Content-Length", str(len(body) + 10)),
                 ("Transfer-Encoding", "chunked")], length=False), 400)
    one_shot(srv.port, "Transfer-Encoding: gzip",
             raw_request("POST", "/tokenize", body, [("Content-Type", "application/json"),
                                                     ("Transfer-Encoding", "gzip")],
                         length=False), 400)
    one_shot(srv.port, "a malformed chunk size",
             raw_request("POST", "/tokenize", b"zz\r\n" + body + b"\r\n0\r\n\r\n", [
                 ("Content-Type", "application/json"), ("Transfer-Encoding", "chunked")],
                 length=False), 400)

    # Request smuggling: a body framed both by a length and as chunked, whose chunked reading
    # ends early and leaves a second request behind. One 400, then EOF: the request inside the
    # body is never answered, whichever of the two headers comes first.
    inner = b"0\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    for order in (("Content-Length", "Transfer-Encoding"), ("Transfer-Encoding", "Content-Length")):
        values = {"Content-Length": str(len(inner)), "Transfer-Encoding": "chunked"}
        what = f"smuggling ({order[0]} first)"
        c = Conn(srv.port)
        try:
            c.send(raw_request("POST", "/tokenize", inner, [("Content-Type", "application/json")]
                               + [(h, values[h]) for h in order], length=False))
            r = c.read_response()
            e = check_error(what, r, 400)
            data, how = c.rest_until_eof(5)
            if b"HTTP/1." in data:
                fail(f"{what}: a second response, to the smuggled request: {data[:200]!r}")
            elif data or how == "timeout":
                fail(f"{what}: after the 400: {how}, {data[:200]!r}")
            elif e:
                print(f"{what}: one 400, then {how}")
        except (OSError, EOFError, ValueError) as ex:
            fail(f"{what}: {type(ex).__name__}: {ex}")
        finally:
            c.close()


def flood_431(srv, lines):
    """A head of `lines` padding fields sent from a thread (the server may close before all was
    sent); returns (status line, how it ended) as read, or (None, why)."""
    head = raw_request("GET", "/health", b"", [(f"X-Pad-{i}", "p" * 24) for i in range(lines)])
    c = Conn(srv.port, timeout=10)

    def send():
        try:
            c.sock.sendall(head)
        except OSError:
            pass  # closed by the server: expected
    t = threading.Thread(target=send, daemon=True)
    t.start()
    data, how = read_all_until_eof(c.sock, 10)
    t.join(10)
    c.close()
    if not data.startswith(b"HTTP/1.1 "):
        return None, f"{how} with {data[:100]!r}", len(head)
    return data, how, len(head)


def check_flood(srv):
    before = srv.peak_kib()
    data, how, sent = flood_431(srv, 30000)
    if data is None:
        print(f"a 1 MiB header flood: no status line ({how}); again with 200 KiB")
        data, how, sent = flood_431(srv, 6000)
    grew = srv.peak_kib() - before
    status = data.split(b"\r\n", 1)[0] if data else None
    if not status or b" 431 " not in status + b" ":
        fail(f"a header flood of {sent >> 10} KiB: {status!r} ({how})")
    elif grew >= 16 << 10:
        fail(f"a header flood of {sent >> 10} KiB: the server's peak memory grew by {grew} KiB")
    else:
        print(f"a header flood of {sent >> 10} KiB: {status.decode()} then {how}; peak memory "
              f"grew by {grew} KiB")


def check_latency(srv):
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        c.request("GET", "/v1/models")
        c.getresponse().read()
        times, closed = [], 0
        for _ in range(50):
            t0 = time.perf_counter()
            c.request("GET", "/v1/models")
            r = c.getresponse()
            r.read()
            times.append(time.perf_counter() - t0)
            closed += r.will_close or r.status != 200
        times.sort()
        median = times[len(times) // 2] * 1000
        if closed:
            fail(f"keep-alive: {closed} of 50 answers closed the connection or were not 200")
        elif median >= 20:
            fail(f"keep-alive: median {median:.1f} ms per /v1/models (bound 20 ms)")
        else:
            print(f"keep-alive: 50 x /v1/models on one connection, median {median:.2f} ms")
    except (OSError, http.client.HTTPException) as ex:
        fail(f"keep-alive latency: {type(ex).__name__}: {ex}")
    finally:
        c.close()


def trickler(port, head, interval, stop, out, i):
    """A slow client: one byte of its head every `interval` s until the server answers or
    closes; out[i] = (seconds from the first byte to the answer or close, bytes, how)."""
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError as ex:
        out[i] = (None, b"", f"connect failed: {ex}")
        return
    first = None
    end = None
    try:
        for b in head:
            if stop.is_set() or (first and time.monotonic() - first > 12):
                break
            try:
                s.sendall(bytes([b]))
            except OSError:
                end = time.monotonic()
                break
            if first is None:
                first = time.monotonic()
            readable, _, _ = select.select([s], [], [], interval)
            if readable:
                end = time.monotonic()
                break
        data, how = read_all_until_eof(s, 3)
        if end is None:
            how = "still sending" if how == "timeout" else how
        out[i] = ((end - first) if end and first else None, data, how)
    finally:
        s.close()


def check_timeouts(srv):
    # 40 slow clients, one byte every 0.5 s: their heads would take 40 s.
    head = raw_request("GET", "/health", b"", [("X-Slow", "s" * 60)])
    stop = threading.Event()
    out = [None] * 40
    threads = [threading.Thread(target=trickler, args=(srv.port, head, 0.5, stop, out, i),
                                daemon=True) for i in range(40)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    # Meanwhile a fresh client is served at once (it waited for the slow ones before).
    for what, data in (("GET /health", raw_request("GET", "/health")),
                       ("POST /v1/completions", json_post("/v1/completions",
                                                          {"prompt": "Once", "max_tokens": 4}))):
        c = Conn(srv.port, timeout=10)
        t0 = time.monotonic()
        try:
            c.send(data)
            r = c.read_response()
            dt = time.monotonic() - t0
            if r.status != 200 or dt >= 3:
                fail(f"{what} while 40 clients trickle: {r.status} in {dt:.2f} s (bound 3 s)")
            else:
                print(f"{what} while 40 clients trickle their heads: 200 in {dt:.3f} s")
        except (OSError, EOFError, ValueError) as ex:
            fail(f"{what} while 40 clients trickle: {type(ex).__name__} after "
                 f"{time.monotonic() - t0:.1f} s: {ex}")
        finally:
            c.close()
    for t in threads:
        t.join(20)
    stop.set()
    late = [(i, o) for i, o in enumerate(out) if o is None or o[0] is None or o[0] > 8 or
            not (o[1].startswith(b"HTTP/1.1 408") or (not o[1] and o[2] in ("eof", "reset")))]
    if late:
        fail(f"tricklers: {len(late)} of 40 not answered 408 or closed within 8 s of their "
             f"first byte: {[(i, o[0] if o else None, o[1][:60] if o else b'', o[2] if o else '') for i, o in late[:3]]}")
    else:
        ends = sorted(o[0] for o in out)
        n408 = sum(o[1].startswith(b"HTTP/1.1 408") for o in out)
        print(f"tricklers: {n408} answered 408, {40 - n408} closed without an answer; "
              f"{ends[0]:.1f} to {ends[-1]:.1f} s after their first byte")

    # An incomplete head: 408 timeout_error, then closed.
    t0 = time.monotonic()
    r = one_shot(srv.port, "a head not complete within --header-timeout 3",
                 b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n", 408, "timeout_error")
    dt = time.monotonic() - t0
    if r and dt > 8:
        fail(f"--header-timeout 3: the answer came {dt:.1f} s after the head's first byte")

    # A body not complete within --body-timeout: answered 408 or closed.
    c = Conn(srv.port, timeout=15)
    t0 = time.monotonic()
    try:
        c.send(raw_request("POST", "/tokenize", b"", [("Content-Type", "application/json"),
                                                      ("Content-Length", "100")],
                           length=False) + b'{"content":')
        data, how = c.rest_until_eof(12)
        dt = time.monotonic() - t0
        if how == "timeout" or dt > 8 or not (data.startswith(b"HTTP/1.1 408") or not data):
            fail(f"--body-timeout 3: {how} after {dt:.1f} s with {data[:200]!r}")
        else:
            first = data.split(b"\r\n", 1)[0].decode("latin-1") or "closed"
            print(f"--body-timeout 3: {first} after {dt:.1f} s, then {how}")
    finally:
        c.close()

    # An idle connection between requests: closed silently after --keep-alive 2.
    c = Conn(srv.port, timeout=10)
    try:
        c.send(raw_request("GET", "/health"))
        c.read_response()
        t0 = time.monotonic()
        data, how = c.rest_until_eof(8)
        dt = time.monotonic() - t0
        if how == "timeout" or data or not 1.5 <= dt <= 6:
            fail(f"--keep-alive 2: an idle connection: {how} after {dt:.1f} s with {data[:200]!r}")
        else:
            print(f"--keep-alive 2: an idle connection closed silently after {dt:.1f} s")
    except (OSError, EOFError, ValueError) as ex:
        fail(f"--keep-alive 2: {type(ex).__name__}: {ex}")
    finally:
        c.close()


def still_open(conn, wait=0.3):
    readable, _, _ = select.select([conn.sock], [], [], wait)
    return not readable


def check_caps(srv):
    def refused(what, source, flag):
        c = Conn(srv.port, source=source)
        try:
            r = c.read_response()
        except (OSError, EOFError, ValueError) as ex:
            fail(f"{what}: no 503 ({type(ex).__name__}: {ex})")
            c.close()
            return
        e = check_error(what, r, 503, "unavailable_error")
        if (r.header("Connection") or "").lower() != "close":
            fail(f"{what}: Connection: {r.header('Connection')!r}, not close")
        if e and not re.search(re.escape(flag) + r"(?![-\w])", e["message"]):
            fail(f"{what}: the message does not name {flag}: {e['message']!r}")
        how = expect_closed(what, c)
        c.close()
        if e:
            print(f"{what}: 503 {e['message']!r}, then {how}")

    time.sleep(0.5)  # the start-up /health connections closed
    conns = []
    try:
        for _ in range(4):
            conns.append(Conn(srv.port, source="127.0.0.1"))
        time.sleep(0.3)
        if not all(still_open(c) for c in conns):
            fail("4 idle connections from 127.0.0.1 (the cap): one was answered or closed")
        refused("a 5th connection from 127.0.0.1 (--max-connections-per-client 4)",
                "127.0.0.1", "--max-connections-per-client")
        other = [Conn(srv.port, source="127.0.0.2") for _ in range(2)]
        conns += other
        time.sleep(0.3)
        try:
            other[0].send(raw_request("GET", "/health"))
            r = other[0].read_response()
            if r.status != 200 or not still_open(other[1]):
                fail(f"127.0.0.2 beside 4 from 127.0.0.1: {r.status}")
            else:
                print("2 connections from 127.0.0.2 beside 4 from 127.0.0.1: served")
        except (OSError, EOFError, ValueError) as ex:
            fail(f"127.0.0.2 beside 4 from 127.0.0.1: {type(ex).__name__}: {ex}")
        refused("a 7th connection, from 127.0.0.3 (--max-connections 6)", "127.0.0.3",
                "--max-connections")
        # The idle ones were taken, not merely left in the listen queue.
        try:
            conns[0].send(raw_request("GET", "/health"))
            if conns[0].read_response().status != 200:
                fail("an idle connection from 127.0.0.1 within the cap: not served")
        except (OSError, EOFError, ValueError) as ex:
            fail(f"an idle connection from 127.0.0.1 within the cap: {type(ex).__name__}: {ex}")
    finally:
        for c in conns:
            c.close()
    time.sleep(0.5)
    try:
        status, _ = srv.request("GET", "/health", timeout=10)
        if status != 200:
            fail(f"after the capped connections closed: {status}")
        else:
            print("after the capped connections closed: served again")
    except OSError as ex:
        fail(f"after the capped connections closed: {ex}")


def check_shutdown(b, model):
    env = dict(os.environ, POLYSTACK_TEST_STEP_DELAY_MS="25")
    srv = Server(b, model, ["-np", "2", "-c", "512"], env=env)
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
    stop = threading.Event()
    out = [None]
    t = threading.Thread(target=trickler, args=(srv.port, raw_request("GET", "/health", b"", [
        ("X-Slow", "s" * 60)]), 0.2, stop, out, 0), daemon=True)
    try:
        s.sendall(json_post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 400,
                                                "stream": True}))
        first = s.recv(200)
        if not first.startswith(b"HTTP/1.1 200"):
            fail(f"shutdown: the stream did not start: {first[:100]!r}")
        t.start()
        time.sleep(0.5)
    finally:
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        try:
            rc = srv.proc.wait(timeout=6)
        except subprocess.TimeoutExpired:
            rc = None
        dt = time.monotonic() - t0
        if rc is None:
            fail("SIGTERM during a stream and a trickling client: still running after 6 s")
            srv.proc.kill()
            srv.proc.wait(timeout=30)
        stop.set()
        s.close()
        if t.is_alive():
            t.join(15)
        log = srv.stderr()
    if rc is not None and rc != 0:
        fail(f"SIGTERM during a stream: exit {rc}")
    elif rc == 0:
        print(f"SIGTERM during a stream and a trickling client: exit 0 in {dt:.2f} s")
    line = re.search(r"polystack: request \d+ POST /v1/completions 200 shutdown.*", log)
    if not line:
        fail(f"SIGTERM during a stream: no `200 shutdown` line for it: "
             f"{[l for l in log.splitlines() if l.startswith('polystack: request')]}")
    else:
        print(f"the stream stopped by SIGTERM: {line.group(0)!r}")
    stopped = re.search(r"polystack: stopped in ([0-9.]+) s", log)
    if not stopped or float(stopped.group(1)) > dt + 0.5:
        fail(f"SIGTERM: no `stopped in N s` line within the time it took: {log[-300:]!r}")
    else:
        print(f"the log says {stopped.group(0)!r}")


def check_outcomes(b, model):
    env = dict(os.environ, POLYSTACK_TEST_STEP_DELAY_MS="25")
    srv = Server(b, model, ["-np", "1", "-c", "512", "--metrics"], env=env)
    text = ""
    try:
        status, _ = srv.request("GET", "/v1/models")
        status_r, _ = srv.request("GET", "/v1/models", headers={"Host": "attacker.example"})
        if status != 200 or status_r != 403:
            fail(f"outcomes: /v1/models {status}; with a foreign Host {status_r} (not 403)")
        # A client that leaves a non-streamed completion (400 tokens, 10 s with the hook).
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(json_post("/v1/completions", {"prompt": "Once upon a time",
                                                "max_tokens": 400}))
        time.sleep(0.5)
        s.close()
        time.sleep(1.0)
        deadline = time.monotonic() + 5
        while True:
            status, text = srv.request("GET", "/metrics", timeout=10)
            text = str(text)
            if 'outcome="client_left"' in text or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        ours = [l for l in text.splitlines() if l.startswith("polystack_requests_total")]
        want = ['polystack_requests_total{status="200",outcome="done"}',
                'polystack_requests_total{status="403",outcome="refused"}']
        if status != 200 or any(w not in text for w in want) or \
                not any('outcome="client_left"' in l for l in ours):
            fail(f"/metrics outcomes: {status} {ours or text[:600]}")
        else:
            print("metrics:", ours)
    finally:
        rc, log = srv.stop()
    lines = [l for l in log.splitlines() if l.startswith("polystack: request ")]
    for what, pattern in (("done", r"polystack: request \d+ GET /v1/models 200 done"),
                          ("refused", r"polystack: request \d+ GET /v1/models 403 refused"),
                          ("client left", r"polystack: request \d+ POST /v1/completions \d+ "
                                          r"client left")):
        if not any(re.match(pattern, l) for l in lines):
            fail(f"the log has no `{what}` line: {lines}")
    if rc != 0:
        fail(f"serve exited with {rc} after SIGTERM")
    bad = [l for l in lines if not re.match(
        r"polystack: request \d+ [A-Z]+ \S+ \d{3} (done|client left|shutdown|refused)", l)]
    if bad:
        fail(f"log lines without METHOD PATH STATUS OUTCOME: {bad[:3]}")
    else:
        print("log:", [l for l in lines if "/health" not in l])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    if not os.path.exists(args.model):
        print(f"skipped: {args.model} is absent")
        return SKIP
    b, model = args.bin, args.model

    def basic():
        srv = Server(b, model, ["-np", "2", "-c", "256"])
        try:
            check_pipelining(srv)
            check_framing(srv)
            check_flood(srv)
            check_latency(srv)
        finally:
            rc, _ = srv.stop()
        if rc != 0:
            fail(f"serve exited with {rc} after SIGTERM")

    def timeouts():
        srv = Server(b, model, ["-np", "2", "-c", "256", "--header-timeout", "3",
                                "--body-timeout", "3", "--keep-alive", "2"])
        try:
            check_timeouts(srv)
        finally:
            srv.stop()

    def caps():
        srv = Server(b, model, ["-np", "1", "-c", "128", "--max-connections", "6",
                                "--max-connections-per-client", "4"])
        try:
            check_caps(srv)
        finally:
            srv.stop()

    # Each part on its own server; one that breaks (a server that does not start, a socket
    # error not caught where it arose) is a problem, and the other parts still run.
    for what, part in (("framing, pipelining, limits, latency", basic), ("timeouts", timeouts),
                       ("connection caps", caps), ("shutdown", lambda: check_shutdown(b, model)),
                       ("outcomes", lambda: check_outcomes(b, model))):
        try:
            part()
        except Exception as ex:  # noqa: BLE001 - reported, and the next part runs
            traceback.print_exc()
            fail(f"{what}: {type(ex).__name__}: {ex}")

    if problems:
        print(f"{len(problems)} problem(s)")
        return 1
    print("all transport checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
