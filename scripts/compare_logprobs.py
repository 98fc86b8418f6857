#!/usr/bin/env python3
"""Next-token log-probabilities of polystack and llama-server against a reference.

Starts `polystack serve` and `llama-server` on MODEL and on REFERENCE (the same weights as F32,
scripts/dequantize_gguf.py), asks /v1/completions for the top 5 log-probabilities after each
prefix of a text (greedy, one token), and prints, for each engine and file, the largest and the
median difference from polystack's on REFERENCE over the tokens both list.

    python3 scripts/compare_logprobs.py --bin build/release/bin/polystack \\
        --llama-server PATH/llama-server -m model.Q4_1.gguf --reference model.f32.gguf
"""
import argparse
import statistics
import sys

from bench_embeddings import free_port, post, start

TEXT = ("The quick brown fox jumps over the lazy dog. Once upon a time, in a small village by "
        "the sea, there lived an old fisherman who")


def top(r):
    lp = r["choices"][0]["logprobs"]
    if "top_logprobs" in lp:  # the legacy form
        return lp["top_logprobs"][0]
    return {t["token"]: t["logprob"] for t in lp["content"][0]["top_logprobs"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--reference", required=True)
    a = ap.parse_args()
    runs = {"polystack, reference": [a.bin, "serve", "-m", a.reference],
            "polystack": [a.bin, "serve", "-m", a.model],
            "llama-server": [a.llama_server, "-m", a.model],
            "llama-server, reference": [a.llama_server, "-m", a.reference]}
    ports, procs = {}, []
    try:
        for name, cmd in runs.items():
            port = free_port()
            procs.append(start(cmd + ["-np", "1", "-c", "2048", "--port", str(port)], port))
            ports[name] = port
        diffs = {name: [] for name in runs if name != "polystack, reference"}
        words = TEXT.split()
        for k in range(3, len(words)):
            body = {"prompt": " ".join(words[:k]), "max_tokens": 1, "temperature": 0,
                    "logprobs": 5}
            got = {name: top(post(port, "/v1/completions", body)) for name, port in ports.items()}
            for name, d in diffs.items():
                for tok, lp in got["polystack, reference"].items():
                    if tok in got[name]:
                        d.append(abs(lp - got[name][tok]))
        print("| engine, file | against polystack on the reference: max | median | entries |")
        print("|---|---|---|---|")
        for name, d in diffs.items():
            print(f"| {name} | {max(d):.4f} | {statistics.median(d):.4f} | {len(d)} |")
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
