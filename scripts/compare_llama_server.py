#!/usr/bin/env python3
"""Sends the same /v1/chat/completions requests to `polystack serve` and to llama.cpp's
`llama-server --jinja` on one model and compares the prompt token counts and greedy replies.

    python3 scripts/compare_llama_server.py --polystack build/release/bin/polystack \\
        --llama-server PATH/llama-server --model MODEL.gguf

Both servers listen on 127.0.0.1 only. Exits 1 when any request differs.
"""
import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.request

REQUESTS = [
    {"messages": [{"role": "user", "content": "What is the capital of Japan?"}]},
    {"messages": [{"role": "system", "content": "You answer in one short sentence."},
                  {"role": "user", "content": "Why is the sky blue?"}]},
    {"messages": [{"role": "user", "content": "Name three fruits."},
                  {"role": "assistant", "content": "Apple, banana and cherry."},
                  {"role": "user", "content": "And three vegetables?"}]},
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions",
                                 data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())


def start(argv, port):
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return p
        except OSError:
            time.sleep(0.3)
    p.kill()
    raise RuntimeError(f"{argv[0]} did not start")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--polystack", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--max-tokens", type=int, default=48)
    a = ap.parse_args()
    pp, lp = free_port(), free_port()
    ps = start([a.polystack, "serve", "-m", a.model, "--port", str(pp), "-np", "1", "-c", "2048"],
               pp)
    ls = start([a.llama_server, "-m", a.model, "--port", str(lp), "--host", "127.0.0.1",
                "--jinja", "-np", "1", "-c", "2048"], lp)
    differ = 0
    try:
        for body in REQUESTS:
            body = dict(body, temperature=0, max_tokens=a.max_tokens)
            x, y = post(pp, body), post(lp, body)
            xt, yt = x["choices"][0]["message"]["content"], y["choices"][0]["message"]["content"]
            xn, yn = x["usage"]["prompt_tokens"], y["usage"]["prompt_tokens"]
            same = xn == yn and xt == yt
            differ += not same
            print(f"{'same' if same else 'DIFFERENT'}: prompt tokens {xn} / {yn}; "
                  f"polystack {xt!r}" + ("" if xt == yt else f"; llama.cpp {yt!r}"))
    finally:
        ps.kill()
        ls.kill()
    print(f"{len(REQUESTS) - differ} of {len(REQUESTS)} requests the same")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
