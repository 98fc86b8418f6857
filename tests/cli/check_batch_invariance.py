#!/usr/bin/env python3
"""A greedy answer is the same alone as in company, through `polystack serve`.

- 12 different prompts, each asked alone, then all 12 at once with -np 4: every answer equals
  its answer alone (on the CPU with --deterministic; on another device with --device, where the
  flag is not needed: see README).
- On the CPU, `logits --deterministic` writes the same bytes with -b 1 as with -b 7 (without
  the flag they differ), `bench` takes the flag, and `run` gives the server's answer.
- With --long: 16 prompts asked alone for 500 tokens, then 64 concurrent streams of them (each
  prompt four times) with -np 64: every answer is its answer alone, byte for byte. A sanitizer
  build, several times slower, takes 150 tokens (three KV blocks of 64 rather than eight).

Without --deterministic the long check differs on the CPU at the AVX2 and AVX-512 levels
(kernels that round one column differently from several); the unit test
ModelContext.DeterministicLogitsDoNotDependOnTheBatch shows the same per level. Exits 77
(skipped) when the model or the device is absent.
"""
import argparse
import concurrent.futures as cf
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

import servertest

SKIP = 77

PROMPTS = ["Lily had a red ball. One day", "Once upon a time", "The little dog",
           "Lily and Ben went", "One day, a big", "Tom was sad because", "The sun was",
           "Sue liked to", "A cat sat", "Mom said", "The bird flew", "They played in the park",
           "Tim found a box", "It was a rainy day", "Max the frog", "The girl"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, model, args):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "serve", "-m", model, "--port", str(self.port)] + args,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}")
            try:
                if self.complete_status("GET", "/health") == 200:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("serve did not answer /health within 120 s")

    def complete_status(self, method, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        c.request(method, path)
        r = c.getresponse()
        r.read()
        c.close()
        return r.status

    def text(self, prompt, n):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        c.request("POST", "/v1/completions",
                  json.dumps({"prompt": prompt, "max_tokens": n, "temperature": 0}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        body = r.read().decode("utf-8", "replace")
        c.close()
        if r.status != 200:
            raise RuntimeError(f"{prompt!r}: HTTP {r.status} {body[:200]}")
        return json.loads(body)["choices"][0]["text"]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -1


def compare(srv, prompts, n, streams):
    """Answers alone, then `streams` requests at once; the requests whose text differs."""
    alone = {p: srv.text(p, n) for p in prompts}
    t0 = time.monotonic()
    with cf.ThreadPoolExecutor(streams) as ex:
        got = list(ex.map(lambda i: (prompts[i % len(prompts)],
                                     srv.text(prompts[i % len(prompts)], n)), range(streams)))
    dt = time.monotonic() - t0
    differ = []
    for p, t in got:
        if t != alone[p]:
            a = alone[p]
            at = next((i for i in range(min(len(a), len(t))) if a[i] != t[i]), min(len(a), len(t)))
            differ.append(f"{p!r} differs at character {at}")
    return differ, dt, sum(len(t) for _, t in got)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", help="serve on this device (skipped when absent)")
    ap.add_argument("--long", action="store_true", help="also 64 streams of 500 tokens")
    args = ap.parse_args()
    if not os.path.exists(args.model):
        print(f"skipped: {args.model} is absent")
        return SKIP
    dev = []
    if args.device:
        d = subprocess.run([args.bin, "devices", "--json"], capture_output=True, text=True,
                           timeout=300)
        if f'"{args.device}"' not in d.stdout:
            print(f"skipped: no {args.device} here")
            return SKIP
        dev = ["--device", args.device, "--no-self-check"]
    else:
        dev = ["--device", "cpu", "--deterministic"]
    problems = []

    # A pool with room for the 4 running requests (2 blocks each) and some cached ones.
    if not args.device:
        # `logits` with --deterministic: the same bytes whether the tokens go one per pass or
        # all in one; `bench` takes the flag too.
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            outs = []
            for b in ("1", "7"):
                out = os.path.join(tmp, f"b{b}.f32")
                r = subprocess.run([args.bin, "logits", "-m", args.model, "--tokens",
                                    "1 403 407 261 378 432 383", "-b", b, "-o", out] + dev,
                                   capture_output=True, timeout=300)
                outs.append(open(out, "rb").read() if r.returncode == 0 else b"")
            if not outs[0] or outs[0] != outs[1]:
                problems.append("logits --deterministic: -b 1 and -b 7 differ (or failed)")
            else:
                print(f"logits {' '.join(dev)}: -b 1 and -b 7 give the same {len(outs[0])} bytes")
        r = subprocess.run([args.bin, "bench", "-m", args.model, "-p", "8", "-n", "4", "-r", "1"]
                           + dev, capture_output=True, text=True, timeout=300)
        if r.returncode != 0 or "tg4" not in r.stdout:
            problems.append(f"bench {' '.join(dev)} exited {r.returncode}: {r.stderr[-300:]}")
        else:
            print(f"bench {' '.join(dev)}: ran")

    srv = Server(args.bin, args.model, dev + ["-np", "4", "-c", "1024", "--ctx-per-seq", "256"])
    try:
        differ, dt, _ = compare(srv, PROMPTS[:12], 100, 12)
        # `run` with the same flags is one sequence on the same engine: the same text.
        want = srv.text(PROMPTS[0], 100)
        r = subprocess.run([args.bin, "run", "-m", args.model, "-p", PROMPTS[0], "-n", "100",
                            "--temp", "0", "-c", "1024"] + dev, capture_output=True, timeout=300)
        if r.returncode != 0 or r.stdout.decode("utf-8", "replace") != want + "\n":
            problems.append(f"run {' '.join(dev)} exited {r.returncode} with "
                            f"{r.stdout[:80]!r}, not the server's {want[:80]!r}")
        else:
            print(f"run {' '.join(dev)}: the server's answer")
    finally:
        rc = srv.stop()
    if differ or rc != 0:
        problems.append(f"12 prompts at once with -np 4: {len(differ)} differ {differ[:2]}; "
                        f"serve exited {rc}")
    else:
        print(f"12 prompts at once with -np 4 ({' '.join(dev)}): every answer equals its "
              f"answer alone ({dt:.1f} s)")

    if args.long:
        # 64 requests of up to 520 positions (9 blocks each) at once.
        n_long = 150 if servertest.sanitizer_build(args.bin) else 500
        srv = Server(args.bin, args.model,
                     dev + ["-np", "64", "-c", str(64 * 9 * 64), "--ctx-per-seq", "640",
                            "--queue", "0"])
        try:
            differ, dt, chars = compare(srv, PROMPTS, n_long, 64)
        finally:
            rc = srv.stop()
        if rc != 0:
            problems.append(f"serve exited {rc}")
        if differ:
            problems.append(f"64 streams of {n_long} tokens: {len(differ)} differ {differ[:3]}")
        else:
            print(f"64 streams of {n_long} tokens ({' '.join(dev)}): all {chars} characters equal "
                  f"the answers alone ({dt:.1f} s)")

    for p in problems:
        print("FAIL:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
