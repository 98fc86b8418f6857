#!/usr/bin/env python3
"""Times repeated requests on one keep-alive connection to `polystack serve`.

Usage: scripts/keepalive_latency.py BIN MODEL [-n 40] [--rate SECONDS --clients 1,4]

Starts the server on a free port of 127.0.0.1, sends GET /v1/models and a one-token
completion N times each over one HTTP/1.1 connection, and prints the median time per request
(the first, which opens the connection, apart). A server that leaves Nagle's algorithm on shows
about 40 ms per request here: the reply's last segment waits for the client's delayed ACK.
With --rate, then for each count of --clients: that many client processes, each on one
keep-alive connection, send GET /v1/models for SECONDS, and the requests per second of all of
them together are printed.
"""
import multiprocessing
import argparse
import http.client
import json
import socket
import statistics
import subprocess
import time


def hammer(port, seconds, out):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        c.request("GET", "/v1/models")
        r = c.getresponse()
        r.read()
        n += 1
    out.put(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin")
    ap.add_argument("model")
    ap.add_argument("-n", type=int, default=40)
    ap.add_argument("--rate", type=float, default=0)
    ap.add_argument("--clients", default="1,4")
    a = ap.parse_args()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    proc = subprocess.Popen([a.bin, "serve", "-m", a.model, "--port", str(port), "-np", "1"],
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
                c.request("GET", "/health")
                r = c.getresponse()
                r.read()
                if r.status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.1)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for path, body in (("/v1/models", None),
                           ("/v1/completions", {"prompt": "Once", "max_tokens": 1,
                                                "temperature": 0})):
            times = []
            for _ in range(a.n):
                t0 = time.perf_counter()
                if body is None:
                    c.request("GET", path)
                else:
                    c.request("POST", path, body=json.dumps(body),
                              headers={"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                times.append((time.perf_counter() - t0) * 1e3)
            print(f"{path}: median {statistics.median(times[1:]):.2f} ms per request "
                  f"(first {times[0]:.2f} ms), {a.n} requests on one connection")
        c.close()
        for k in [int(x) for x in a.clients.split(",")] if a.rate > 0 else []:
            q = multiprocessing.Queue()
            procs = [multiprocessing.Process(target=hammer, args=(port, a.rate, q))
                     for _ in range(k)]
            for p in procs:
                p.start()
            total = sum(q.get() for _ in procs)
            for p in procs:
                p.join()
            print(f"GET /v1/models, {k} keep-alive connection(s) at once: "
                  f"{total / a.rate:.0f} requests/s")
    finally:
        proc.terminate()
        proc.wait()


if __name__ == "__main__":
    main()
