#!/usr/bin/env python3
"""Embeddings next to llama.cpp: agreement and speed.

Starts `polystack serve` (and, with --llama-server PATH, llama.cpp's server with --embedding)
with mean pooling and the same slots, then:
- agreement: three texts in one /v1/embeddings request; each vector's cosine with the vector
  llama-server gives for the text alone, and each server's vector for a text in the batch
  against its own for the text alone;
- speed: --inputs texts (default 64) of a few sentences each in one request, --rounds times;
  inputs per second (median).
Prints a Markdown table.

  python3 scripts/bench_embeddings.py --bin build/release/bin/polystack -m model.gguf \\
      [--llama-server PATH] [-np 2] [--inputs 64] [--rounds 3]
"""
import argparse
import http.client
import json
import math
import socket
import statistics
import subprocess
import sys
import time

TEXTS = ["The cat sat on the mat and watched the birds outside.",
         "Interest rates rose again this quarter, and markets fell.",
         "A recipe for bread: flour, water, salt and a little yeast."]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, path, body, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    if r.status != 200:
        raise RuntimeError(f"{path}: {r.status} {data[:300]!r}")
    return json.loads(data)


def start(cmd, port):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return p
        except OSError:
            time.sleep(0.2)
    p.kill()
    raise RuntimeError(f"{cmd[0]} did not start")


def vectors(port, inputs):
    d = post(port, "/v1/embeddings", {"input": inputs, "model": "x"})["data"]
    return [e["embedding"] for e in sorted(d, key=lambda e: e["index"])]


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) *
                                                         sum(y * y for y in b))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--llama-server")
    ap.add_argument("-np", type=int, default=2)
    ap.add_argument("--inputs", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    servers = {}
    port = free_port()
    servers["polystack"] = (start([a.bin, "serve", "-m", a.model, "--port", str(port), "-np",
                                   str(a.np), "-c", "4096", "--pooling", "mean"], port), port)
    if a.llama_server:
        port = free_port()
        servers["llama-server"] = (start([a.llama_server, "-m", a.model, "--port", str(port),
                                          "-np", str(a.np), "-c", "4096", "--embedding",
                                          "--pooling", "mean"], port), port)
    try:
        batch, alone = {}, {}
        for name, (_, port) in servers.items():
            batch[name] = vectors(port, TEXTS)
            alone[name] = [vectors(port, [t])[0] for t in TEXTS]
        print("| server | text | cosine with llama-server's (text alone) | in a batch vs alone |")
        print("|---|---|---|---|")
        for name in servers:
            for i in range(len(TEXTS)):
                ref = (f"{cosine(batch[name][i], alone['llama-server'][i]):.6f}"
                       if "llama-server" in alone else "-")
                print(f"| {name} | {i} | {ref} | {cosine(batch[name][i], alone[name][i]):.6f} |")
        words = " ".join(TEXTS)
        inputs = [f"{i}: {words[(7 * i) % 40:]}" for i in range(a.inputs)]
        print()
        print(f"| server | {a.inputs} inputs per request: inputs/s (median of {a.rounds}) |")
        print("|---|---|")
        for name, (_, port) in servers.items():
            vectors(port, inputs[:4])  # warm
            rates = []
            for _ in range(a.rounds):
                t0 = time.perf_counter()
                got = vectors(port, inputs)
                rates.append(len(got) / (time.perf_counter() - t0))
            print(f"| {name} | {statistics.median(rates):.1f} |")
    finally:
        for p, _ in servers.values():
            p.terminate()
            p.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
