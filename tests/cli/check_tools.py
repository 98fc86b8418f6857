#!/usr/bin/env python3
"""Tool calls through `serve` with the official openai client, on the default chat model
(SmolLM2-135M-Instruct, whose template has no tool syntax: the generic JSON form) when installed,
else on stories260K with the chatml template.

- tool_choice "required" at several seeds: finish_reason "tool_calls", content null, each call
  an offered function with an id, its arguments JSON that validates against the function's
  parameters (jsonschema); the same request streamed gives the same calls, assembled from
  tool_calls deltas as OpenAI's clients do (a head with id and name, then the arguments).
- A named function with parallel_tool_calls false: exactly one call, of that function.
- The call and its result sent back (role "tool") reach the template (/apply-template shows
  them) and the conversation goes on; tool_choice "none": text, no calls; "auto": either.
- Mistakes are 400s naming the field: a named function not offered, a tool's schema with an
  unsupported keyword.

A sanitizer build takes stories260K even when the chat model is installed
(servertest.chat_model_for). Exits 77 (skipped) when neither model is present.
"""
import argparse
import json
import os
import sys

import servertest
from servertest import check

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The current weather in a city",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 30},
            "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "add", "description": "Adds two whole numbers",
        "parameters": {"$defs": {"n": {"type": "integer", "minimum": 0, "maximum": 1000}},
                       "type": "object",
                       "properties": {"a": {"$ref": "#/$defs/n"}, "b": {"$ref": "#/$defs/n"}},
                       "required": ["a", "b"], "additionalProperties": False}}},
]
PARAMS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def valid_call(name, arguments):
    import jsonschema
    if name not in PARAMS:
        return False
    try:
        jsonschema.validate(json.loads(arguments), PARAMS[name])
        return True
    except (ValueError, jsonschema.ValidationError):
        return False


def streamed_calls(stream):
    """(calls as [(id, name, arguments)], finish_reason, content) assembled from the deltas."""
    calls, finish, content = {}, None, ""
    for ch in stream:
        if not ch.choices:
            continue
        c = ch.choices[0]
        content += c.delta.content or ""
        for d in c.delta.tool_calls or []:
            cur = calls.setdefault(d.index, ["", "", ""])
            if d.id:
                cur[0] = d.id
            if d.function and d.function.name:
                cur[1] = d.function.name
            if d.function and d.function.arguments:
                cur[2] += d.function.arguments
        finish = c.finish_reason or finish
    return [tuple(calls[i]) for i in sorted(calls)], finish, content


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True, help="stories260K, when no chat model is installed")
    ap.add_argument("--chat-model", default=servertest.default_chat_model())
    a = ap.parse_args()
    a.chat_model = servertest.chat_model_for(a.bin, a.chat_model)
    try:
        import jsonschema  # noqa: F401
        import openai
    except ImportError as e:
        print(f"skipped: {e.name} is not installed (pip install openai jsonschema)")
        return 77
    if a.chat_model and os.path.exists(a.chat_model):
        model, args = a.chat_model, []
    elif os.path.exists(a.model):
        print("no chat model to take: stories260K with chatml")
        model, args = a.model, ["--chat-template", "chatml"]
    else:
        print(f"skipped: {a.model} is absent")
        return 77
    server = servertest.Server(a.bin, model, args + ["-np", "2", "-c", "2048"], on_fail=check)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="none",
                               max_retries=0)
        ask = [{"role": "user", "content": "What is the weather in Paris, and what is 2 + 3?"}]
        first = None
        for seed in (1, 2, 3):
            kw = dict(model="x", messages=ask, tools=TOOLS, tool_choice="required",
                      max_tokens=200, temperature=0.8, seed=seed)
            r = client.chat.completions.create(**kw)
            m = r.choices[0].message
            calls = [(c.id, c.function.name, c.function.arguments) for c in m.tool_calls or []]
            check(r.choices[0].finish_reason == "tool_calls" and m.content is None and calls and
                  all(i.startswith("call_") and valid_call(n, args) for i, n, args in calls),
                  f"required, seed {seed}: {[(n, args) for _, n, args in calls]}",
                  f"{r.choices[0].finish_reason} {m.content!r}")
            got, finish, content = streamed_calls(client.chat.completions.create(**kw,
                                                                                  stream=True))
            check([(n, args) for _, n, args in got] == [(n, args) for _, n, args in calls] and
                  finish == "tool_calls" and all(i.startswith("call_") for i, _, _ in got) and
                  content == "",
                  f"required, seed {seed}, streamed: the same calls from tool_calls deltas",
                  f"{got} {finish} {content!r}")
            if calls and first is None:
                first = (r, m)
        r = client.chat.completions.create(
            model="x", messages=ask, tools=TOOLS, max_tokens=100, temperature=0, seed=1,
            tool_choice={"type": "function", "function": {"name": "add"}},
            parallel_tool_calls=False)
        m = r.choices[0].message
        check(len(m.tool_calls or []) == 1 and m.tool_calls[0].function.name == "add" and
              valid_call("add", m.tool_calls[0].function.arguments),
              f"a named function, one call: {m.tool_calls and m.tool_calls[0].function}")
        if first is None:
            print("no call to send back: the rest skipped")
            return 1
        # The call and its result back through the template.
        _, m = first
        call = m.tool_calls[0]
        history = ask + [
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": call.id, "type": "function",
                 "function": {"name": call.function.name,
                              "arguments": call.function.arguments}}]},
            {"role": "tool", "tool_call_id": call.id, "content": "sunny, 21 C"}]
        status, shown = server.request("POST", "/apply-template",
                                       {"messages": history, "tools": TOOLS})
        prompt = shown.get("prompt", "") if isinstance(shown, dict) else ""
        check(status == 200 and "sunny, 21 C" in prompt and call.id in prompt and
              f'"name":"{call.function.name}"' in prompt,
              "the call and its result reach the template", prompt[-400:])
        r = client.chat.completions.create(model="x", messages=history, tools=TOOLS,
                                           max_tokens=40, temperature=0)
        c = r.choices[0]
        check(c.finish_reason in ("stop", "length", "tool_calls") and
              (c.message.content or c.message.tool_calls),
              f"the conversation goes on after a tool result: {c.finish_reason}",
              f"{c.message}")
        r = client.chat.completions.create(model="x", messages=ask, tools=TOOLS,
                                           tool_choice="none", max_tokens=30, temperature=0)
        check(r.choices[0].message.tool_calls is None and
              isinstance(r.choices[0].message.content, str) and
              r.choices[0].finish_reason in ("stop", "length"),
              "tool_choice none: text, no calls", f"{r.choices[0]}")
        r = client.chat.completions.create(model="x", messages=ask, tools=TOOLS,
                                           max_tokens=120, temperature=0)
        m = r.choices[0].message
        check((m.tool_calls and all(valid_call(c.function.name, c.function.arguments)
                                    for c in m.tool_calls) and
               r.choices[0].finish_reason == "tool_calls") or
              (not m.tool_calls and isinstance(m.content, str)),
              f"auto: valid calls or text ({'calls' if m.tool_calls else 'text'})", f"{m}")
        for what, kw, want in (
                ("a named function not offered",
                 dict(tools=TOOLS, tool_choice={"type": "function",
                                                "function": {"name": "nope"}}),
                 "'tool_choice' names 'nope', which is not in 'tools'"),
                ("a schema keyword it cannot compile",
                 dict(tools=[{"type": "function", "function": {
                     "name": "f", "parameters": {"type": "object", "properties": {
                         "x": {"type": "string", "not": {"const": "y"}}}}}}],
                      tool_choice="required"),
                 "'tools': tool 'f': its parameters: json_schema: 'not' at /properties/x")):
            try:
                client.chat.completions.create(model="x", messages=ask, max_tokens=5, **kw)
                check(False, f"{what}: a 400")
            except openai.BadRequestError as e:
                check(want in str(e), f"{what}: a 400 naming it", str(e))
    finally:
        rc, err = server.stop()
        check(rc == 0, "serve stops with 0", err[-500:])
        check("tool calls read as generic JSON (the template has no tool syntax" in err,
              "the log names the tool call syntax", err[:600])
    print("all tool-call checks passed" if not servertest.problems
          else f"{len(servertest.problems)} problem(s)")
    return 1 if servertest.problems else 0


if __name__ == "__main__":
    sys.exit(main())
