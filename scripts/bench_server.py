#!/usr/bin/env python3
"""Aggregate generation throughput of an OpenAI-compatible server at several concurrencies.

For each N in --streams it starts `polystack serve -np N`, sends N streaming
completions at once (different prompts, temperature 0, --max-tokens each), and reports the
generated tokens per second over the wall time of the round, with the time to first token.
--ttft-prompt additionally measures the time to first token of a prompt of that many tokens
while the other N - 1 streams generate. --llama-server PATH measures llama.cpp's server the same
way instead. Both get -np N and -c N x --ctx (one KV pool shared by the slots) and --threads.
Prints a Markdown table.

  python3 scripts/bench_server.py --bin build/release/bin/polystack -m model.gguf \\
      --streams 1,2,4,8 --max-tokens 64 --ttft-prompt 512
"""
import argparse
import concurrent.futures as cf
import json
import http.client
import os
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stream_one(host, port, prompt, max_tokens):
    """(seconds to first token, seconds in all, tokens generated)."""
    c = http.client.HTTPConnection(host, port, timeout=600)
    body = json.dumps({"prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                       "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    first, tokens = None, 0
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        j = json.loads(line[6:])
        if j.get("choices") and j["choices"][0].get("text") and first is None:
            first = time.monotonic() - t0
        if j.get("usage"):
            tokens = j["usage"]["completion_tokens"]
    c.close()
    return first or 0.0, time.monotonic() - t0, tokens


def start(args, n):
    port = free_port()
    if args.llama_server:
        cmd = [args.llama_server, "-m", args.model, "--port", str(port), "-np", str(n), "-c",
               str(n * args.ctx), "-t", str(args.threads), "--host", "127.0.0.1"]
    else:
        # -c is polystack's KV pool, shared by the N slots, as llama-server's -c.
        cmd = [args.bin, "serve", "-m", args.model, "--port", str(port), "-np", str(n), "-c",
               str(n * args.ctx), "-t", str(args.threads)]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    for _ in range(1200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return p, port
        except OSError:
            pass
        time.sleep(0.1)  # not listening yet, or 503 while loading
    p.kill()
    raise RuntimeError("the server did not come up")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", help="polystack")
    ap.add_argument("--llama-server", help="measure this llama-server instead")
    ap.add_argument("--ctx", type=int, default=1024, help="context per stream")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--ttft-prompt", type=int, default=0)
    args = ap.parse_args()
    prompts = ["Once upon a time", "The capital of France is", "In the beginning",
               "My favourite food is", "The weather today", "A long time ago",
               "Here is a recipe", "The quick brown fox"]
    rows = []
    base = None
    for n in [int(x) for x in args.streams.split(",")]:
        p, port = start(args, n)
        try:
            stream_one("127.0.0.1", port, "Warming up", 4)  # not one of the prompts
            t0 = time.monotonic()
            with cf.ThreadPoolExecutor(n) as ex:
                res = list(ex.map(lambda i: stream_one("127.0.0.1", port, prompts[i % len(prompts)],
                                                       args.max_tokens), range(n)))
            wall = time.monotonic() - t0
            tokens = sum(r[2] for r in res)
            tps = tokens / wall
            base = base or tps
            ttft = ""
            if args.ttft_prompt and n > 1:
                long_prompt = " ".join(["word"] * args.ttft_prompt)
                with cf.ThreadPoolExecutor(n) as ex:
                    others = [ex.submit(stream_one, "127.0.0.1", port, prompts[i], 4 * args.max_tokens)
                              for i in range(n - 1)]
                    time.sleep(0.5)
                    first, _, _ = stream_one("127.0.0.1", port, long_prompt, 1)
                    for f in others:
                        f.result()
                ttft = f"{first * 1e3:.0f} ms"
            rows.append((n, tokens, wall, tps, tps / base,
                         sum(r[0] for r in res) / len(res) * 1e3, ttft))
        finally:
            p.terminate()
            p.wait()
    print("| streams | tokens | seconds | tokens/s (all streams) | vs 1 stream | mean TTFT | "
          f"TTFT of a {args.ttft_prompt}-token prompt beside the others |")
    print("|---|---|---|---|---|---|---|")
    for n, tokens, wall, tps, ratio, ttft_mean, ttft in rows:
        print(f"| {n} | {tokens} | {wall:.2f} | {tps:.1f} | {ratio:.2f}x | {ttft_mean:.0f} ms | "
              f"{ttft} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
