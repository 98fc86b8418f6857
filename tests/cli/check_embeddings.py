#!/usr/bin/env python3
"""Embeddings through `serve` with the official openai client, on stories260K and on the default
chat model (SmolLM2-135M-Instruct) when installed.

- Three texts in one request: each vector's cosine with llama.cpp's for that text
  (tests/data/llama_server_embeddings.json: llama-server --embedding --pooling mean, each text
  alone) is at least 0.999; each has L2 norm 1; a text in a batch of three on -np 2 gives the
  same vector as alone (llama-server -np 2 does not); token ids give the string's vector;
  encoding_format base64 decodes to the same floats; usage counts the tokens.
- --pooling none: /embeddings gives one vector per token whose mean, normalized, is the mean
  pooling's vector, and /v1/embeddings is a 400; --pooling last: the last token's vector,
  normalized; --pooling with another name is one line, exit 2.
- A bert GGUF (../shared/tokenizer-tests) is refused at load, naming its architecture.
- Mistakes are 400s naming them: an empty input, a wrong type, token ids outside the vocabulary,
  `dimensions` other than the model's, a text longer than a slot (exceed_context_size_error).

Exits 77 (skipped) when stories260K is absent.
"""
import argparse
import base64
import json
import math
import os
import struct
import subprocess
import sys

import servertest
from servertest import check

HERE = os.path.dirname(os.path.abspath(__file__))


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b)) / math.sqrt(sum(x * x for x in a) *
                                                         sum(y * y for y in b))


def norm(v):
    return math.sqrt(sum(x * x for x in v))


def check_model(binary, model, reference):
    import openai
    name = os.path.basename(model)
    texts = reference["texts"]
    server = servertest.Server(binary, model, ["-np", "2", "-c", "1024", "--ctx-per-seq", "256"],
                               on_fail=lambda m: check(False, m))
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="none",
                               max_retries=0)
        r = client.embeddings.create(model="x", input=texts)
        batch = [d.embedding for d in sorted(r.data, key=lambda d: d.index)]
        alone = [client.embeddings.create(model="x", input=t).data[0].embedding for t in texts]
        want = reference["models"].get(name)
        if want:
            cos = [cosine(a, b) for a, b in zip(batch, want)]
            check(all(c >= 0.999 for c in cos),
                  f"{name}: cosine with llama.cpp's vectors {[round(c, 6) for c in cos]}")
        else:
            print(f"no llama.cpp vectors recorded for {name}")
        check(all(abs(norm(v) - 1) < 1e-5 for v in batch), f"{name}: L2 norm 1")
        check(all(cosine(a, b) > 0.999999 for a, b in zip(batch, alone)),
              f"{name}: a text in a batch of three gives its vector alone",
              [cosine(a, b) for a, b in zip(batch, alone)])
        status, toks = server.request("POST", "/tokenize", {"content": texts[1],
                                                            "add_special": True})
        ids = client.embeddings.create(model="x", input=toks["tokens"]).data[0].embedding
        check(cosine(ids, alone[1]) > 0.999999, f"{name}: token ids give the string's vector")
        counts = [len(server.request("POST", "/tokenize", {"content": t, "add_special": True})
                      [1]["tokens"]) for t in texts]
        check(r.usage.prompt_tokens == sum(counts) == r.usage.total_tokens,
              f"{name}: usage counts the tokens ({sum(counts)})", r.usage)
        status, raw = server.request("POST", "/v1/embeddings",
                                     {"input": texts[0], "encoding_format": "base64"})
        b64 = raw["data"][0]["embedding"] if status == 200 else ""
        floats = list(struct.unpack(f"<{len(alone[0])}f", base64.b64decode(b64))) if b64 else []
        check(len(floats) == len(alone[0]) and
              all(abs(x - y) < 1e-6 for x, y in zip(floats, alone[0])),
              f"{name}: base64 is the same floats")
        for what, body, want_msg in (
                ("an empty input", {"input": ""}, "'input' is empty"),
                ("a number", {"input": 3.5}, "'input' must be a string"),
                ("ids outside the vocabulary", {"input": [[1, 2], [10 ** 7]]},
                 "input[1] must hold token ids of this vocabulary"),
                ("other dimensions", {"input": "a", "dimensions": 3}, "'dimensions' must be"),
                ("a text longer than a slot", {"input": ["a", "word " * 400]},
                 "input[1] has"),
                ("encoding_format", {"input": "a", "encoding_format": "int8"},
                 "'encoding_format' must be")):
            status, err = server.request("POST", "/v1/embeddings", body)
            msg = err.get("error", {}).get("message", "") if isinstance(err, dict) else ""
            check(status == 400 and want_msg in msg, f"{name}: {what} is a 400 naming it",
                  f"{status} {err}")
    finally:
        rc, err = server.stop()
        check(rc == 0, f"{name}: serve stops with 0", err[-300:])
        check("embeddings pooled by mean (the default; --pooling picks another)" in err,
              f"{name}: the log says how embeddings are pooled", err[:800])
    return alone


def check_pooling(binary, model, mean_vectors, texts):
    name = os.path.basename(model)
    rows_of = {}
    for pooling in ("none", "last"):
        server = servertest.Server(binary, model, ["--pooling", pooling],
                                   on_fail=lambda m: check(False, m))
        try:
            status, got = server.request("POST", "/embeddings", {"input": texts[0]})
            rows_of[pooling] = got[0]["embedding"] if status == 200 else []
            if pooling == "none":
                status, err = server.request("POST", "/v1/embeddings", {"input": texts[0]})
                check(status == 400 and "/embeddings" in err["error"]["message"],
                      f"{name}: --pooling none: /v1/embeddings is a 400", err)
                n = len(server.request("POST", "/tokenize", {"content": texts[0],
                                                             "add_special": True})[1]["tokens"])
        finally:
            server.stop()
    rows = rows_of["none"]
    check(len(rows) == n, f"{name}: --pooling none gives a vector per token ({n})", len(rows))
    if rows:
        mean = [sum(r[j] for r in rows) / len(rows) for j in range(len(rows[0]))]
        check(cosine(mean, mean_vectors[0]) > 0.999999 and abs(norm(mean_vectors[0]) - 1) < 1e-5,
              f"{name}: the tokens' mean, normalized, is the mean pooling's vector")
        last = rows_of["last"][0] if rows_of["last"] else []
        check(len(last) == len(rows[-1]) and cosine(last, rows[-1]) > 0.999999 and
              abs(norm(last) - 1) < 1e-5,
              f"{name}: --pooling last is the last token's vector, normalized")
    r = subprocess.run([binary, "serve", "-m", model, "--pooling", "max"], capture_output=True,
                       text=True, timeout=60)
    lines = r.stderr.strip().splitlines()
    check(r.returncode == 2 and len(lines) == 1 and "--pooling" in lines[0],
          "--pooling max: one line, exit 2", r.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--chat-model", default=servertest.default_chat_model())
    a = ap.parse_args()
    try:
        import openai  # noqa: F401
    except ImportError:
        print("skipped: the openai package is not installed")
        return 77
    if not os.path.exists(a.model):
        print(f"skipped: {a.model} is absent")
        return 77
    with open(os.path.join(HERE, "..", "data", "llama_server_embeddings.json")) as f:
        reference = json.load(f)
    models = [a.model] + ([a.chat_model] if a.chat_model and os.path.exists(a.chat_model)
                          else [])
    if len(models) == 1:
        print("the default chat model is not installed: its checks skipped")
    for model in models:
        alone = check_model(a.bin, model, reference)
    check_pooling(a.bin, models[-1], alone, reference["texts"])
    bert = os.path.join(os.path.dirname(a.model), "..", "tokenizer-tests",
                        "ggml-vocab-bert-bge.gguf")
    if os.path.exists(bert):
        r = subprocess.run([a.bin, "serve", "-m", bert], capture_output=True, text=True,
                           timeout=60)
        check(r.returncode != 0 and "architecture 'bert' is not supported" in r.stderr,
              "an embedding model of an architecture not run (bert) is refused naming it",
              r.stderr[-300:])
    print("all embedding checks passed" if not servertest.problems
          else f"{len(servertest.problems)} problem(s)")
    return 1 if servertest.problems else 0


if __name__ == "__main__":
    sys.exit(main())
