#!/usr/bin/env python3
"""What constrained decoding costs per token: generation speed with and without a JSON schema.

Starts `polystack serve` (and, with --llama-server PATH, llama.cpp's server the same way), and
for each case streams a chat completion (at temperature 0 unless --temperature) and measures the generation rate from
the first streamed token to the last (the prompt apart): free text, `response_format`
json_object, and json_schema with the schema below (or --schema FILE). Prints a Markdown table.

  python3 scripts/bench_grammar.py --bin build/release/bin/polystack -m model.gguf \\
      [--llama-server PATH] [--max-tokens 128] [--rounds 3]
"""
import argparse
import http.client
import json
import socket
import statistics
import subprocess
import sys
import time

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "maxLength": 40},
        "tags": {"type": "array", "items": {"type": "string"}},
        "address": {"type": "object", "properties": {
            "street": {"type": "string"}, "city": {"type": "string"},
            "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["street", "city", "zip"], "additionalProperties": False},
    },
    "required": ["name", "age", "email", "tags", "address"],
    "additionalProperties": False,
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(cmd, port):
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(1200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return p
        except OSError:
            pass
        time.sleep(0.1)
    p.kill()
    raise RuntimeError(f"{cmd[0]} did not come up")


def rate(port, fmt, max_tokens, temperature):
    """Tokens per second between the first and the last streamed token, and the tokens."""
    body = {"messages": [{"role": "user", "content":
                          "Write a JSON record of a fictional person with an address."}],
            "max_tokens": max_tokens, "temperature": temperature, "seed": 1, "stream": True}
    if fmt is not None:
        body["response_format"] = fmt
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/chat/completions", json.dumps(body),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    times = []
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: ") or line == b"data: [DONE]":
            continue
        j = json.loads(line[6:])
        if j.get("choices") and j["choices"][0].get("delta", {}).get("content"):
            times.append(time.monotonic())
    c.close()
    if len(times) < 2:
        return 0.0, len(times)
    return (len(times) - 1) / (times[-1] - times[0]), len(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--llama-server")
    ap.add_argument("--schema")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.0,
                    help="0: greedy; above, sampled with the servers' default top_k (40)")
    a = ap.parse_args()
    schema = json.load(open(a.schema)) if a.schema else SCHEMA
    cases = [("free text", None), ("json_object", {"type": "json_object"}),
             ("json_schema", {"type": "json_schema",
                              "json_schema": {"name": "record", "schema": schema}})]
    servers = [("polystack", lambda port: [a.bin, "serve", "-m", a.model, "--port", str(port),
                                           "-np", "1", "-t", str(a.threads)])]
    if a.llama_server:
        servers.append(("llama-server", lambda port: [
            a.llama_server, "-m", a.model, "--port", str(port), "-np", "1", "-t",
            str(a.threads), "--host", "127.0.0.1", "--jinja"]))
    rows = []
    for name, cmd in servers:
        port = free_port()
        p = start(cmd(port), port)
        try:
            rate(port, None, 8, 0)  # warm-up
            base = None
            for case, fmt in cases:
                got = [rate(port, fmt, a.max_tokens, a.temperature) for _ in range(a.rounds)]
                tps = statistics.median(g[0] for g in got)
                base = base or tps
                rows.append((name, case, got[0][1], tps, tps / base if base else 0))
        finally:
            p.terminate()
            p.wait()
    print("| server | output | tokens | tokens/s (median of rounds) | vs free text |")
    print("|---|---|---|---|---|")
    for name, case, n, tps, ratio in rows:
        print(f"| {name} | {case} | {n} | {tps:.1f} | {ratio:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
