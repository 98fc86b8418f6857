#!/usr/bin/env python3
"""Checks `polystack template` against Python's jinja2 on real models' chat templates.

Every `*.jinja` file of the shared chat-templates folder (by default ../shared/chat-templates
beside the repository) is rendered with each of the conversations below, once by jinja2 set up
as Hugging Face transformers sets it up (the oracle) and once by

    polystack template --chat-template-file FILE --messages CONV.json [--bos TEXT] [--eos TEXT]

where CONV.json holds the conversation's variables (`messages`, `add_generation_prompt`,
`tools`, `documents`, `enable_thinking`, ...), the same ones the oracle renders with.

jinja2 is set up as jinja_oracle.py describes, with the variables transformers passes: tools and
documents None when not given, except in one conversation that leaves them undefined instead, as
templates test for both. The clock is pinned: polystack runs with SOURCE_DATE_EPOCH set, and the
oracle's strftime_now formats that same instant in local time.

A render passes as jinja_oracle.compare has it: the same bytes (UTF-8) from both, or
raise_exception's message in polystack's stderr, or jinja2 failing otherwise while polystack
exits 1 with a one-line message ("both raised", counted apart). Anything else fails, and an exit
status other than 0 or 1 (a crash, a signal, a timeout) always does. At least 50 templates must
be found, so a wrong folder cannot pass by testing nothing.

Exit status: 0 pass, 1 fail, 77 skip (no templates folder, or jinja2 is not installed).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from jinja_oracle import (BOTH_RAISED, FAIL, JINJA2_MISSING, Actual, Expected,  # noqa: E402
                          compare, make_environment, oracle_render, run_template, skip)

MIN_TEMPLATES = 50
SOURCE_DATE_EPOCH = 1764892800  # 2025-12-05 00:00:00 UTC

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TEMPLATES = REPO_ROOT.parent / "shared" / "chat-templates"

# --- Conversations -------------------------------------------------------------------------------

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get today's weather in a city.\nReturns JSON.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                         "description": "Temperature unit"},
            },
            "required": ["city"],
        },
    },
}

SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search_web",
        "description": "Search the web — return the top results (« quoted »).",
        "parameters": {
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What to search for"},
                "max_results": {"type": "integer", "description": "How many results",
                                "default": 5},
                "sites": {"type": "array", "items": {"type": "string"},
                          "description": "Only these sites"},
                "min_score": {"type": "number", "description": "Relevance threshold",
                              "minimum": 0.0, "default": 0.5},
                "safe": {"type": "boolean", "description": "Safe search", "default": False},
            },
            "required": ["query"],
        },
    },
}

UNICODE_TEXT = ("Grüße, 東京 — {{ not a var }} {% raw %} 'quotes' \"dq\" \\ back\n"
                "new line")


@dataclass
class Case:
    name: str
    variables: dict  # everything the template sees except bos_token / eos_token
    bos: str = ""
    eos: str = ""
    hf_defaults: bool = True  # tools and documents None when absent, as transformers passes them
    ascii_json: bool = False  # CONV.json with \u escapes (emoji as surrogate pairs), not raw UTF-8


CASES = [
    # functions and datetime: extra variables firefunction-v2 reads.
    Case("system", {
        "messages": [
            {"role": "system", "content": "You are a helpful assistant. Answer briefly."},
            {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "content": "The capital of France is Paris."},
            {"role": "user", "content": "And of Italy?"},
        ],
        "functions": "[]",
        "datetime": "Fri, 05 Dec 2025",
        "add_generation_prompt": True,
    }, bos="<s>", eos="</s>"),
    # tools and documents left undefined (not None) here: templates test both.
    Case("single", {
        "messages": [
            {"role": "user", "content": "Write a haiku about autumn."},
        ],
        "add_generation_prompt": False,
    }, hf_defaults=False),
    Case("unicode", {
        "messages": [
            {"role": "user", "content": UNICODE_TEXT},
            {"role": "assistant",
             "content": "Hallo! 👋 Tokyo is 東京 🗼 — and that's not a template: {{ x }}."},
            {"role": "user", "content": "Danke 🙏 ¿y ahora?\ttab\r\nCRLF"},
        ],
        "tools": [SEARCH_TOOL],  # offered, not called
        "documents": [
            {"doc_id": 1, "title": "Tōkyō", "text": "東京 is the capital of Japan."},
            {"doc_id": 2, "title": "Grüße", "text": "A German greeting: \"Grüße\"."},
        ],
        "add_generation_prompt": True,
    }, bos="<|begin_of_text|>", eos="<|eot_id|>", ascii_json=True),
    Case("tools", {
        "messages": [
            {"role": "user", "content": "What's the weather like in Paris?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "get_weather",
                              "arguments": {"city": "Paris", "unit": "celsius"}}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
             "content": '{"temperature": 21}'},
        ],
        "tools": [WEATHER_TOOL, SEARCH_TOOL],
        "functions": json.dumps([WEATHER_TOOL["function"], SEARCH_TOOL["function"]], indent=2),
        "datetime": "Fri, 05 Dec 2025",
        "add_generation_prompt": True,
    }, bos="<s>"),
    Case("tools-parallel", {
        "messages": [
            {"role": "system", "content": "You can call tools."},
            {"role": "user", "content": "Compare the weather in Paris and Lyon."},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "Ab3dE6gH9", "type": "function",
                 "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {"id": "xY7zQ1wE4", "type": "function",
                 "function": {"name": "get_weather",
                              "arguments": {"city": "Lyon", "unit": "celsius"}}},
            ]},
            {"role": "tool", "tool_call_id": "Ab3dE6gH9", "name": "get_weather",
             "content": '{"temperature": 21, "sky": "clear"}'},
            {"role": "tool", "tool_call_id": "xY7zQ1wE4", "name": "get_weather",
             "content": '{"temperature": 18, "sky": "rain"}'},
            {"role": "assistant",
             "content": "Paris is 21 °C and clear; Lyon is 18 °C with rain."},
            {"role": "user", "content": "Thanks!"},
        ],
        "tools": [WEATHER_TOOL],
        "add_generation_prompt": True,
    }, bos="<|bos|>", eos="<|eos|>"),
    # OpenAI's format: arguments as a JSON string (transformers' is a dict), text beside the call.
    Case("tools-json-args", {
        "messages": [
            {"role": "user", "content": "Find news about the Louvre."},
            {"role": "assistant", "content": "Let me search for that.", "tool_calls": [
                {"id": "Zq8Lm2Np5", "type": "function",
                 "function": {"name": "search_web",
                              "arguments": '{"query": "Louvre news", "max_results": 3}'}},
            ]},
            {"role": "tool", "tool_call_id": "Zq8Lm2Np5", "name": "search_web",
             "content": "1. The Louvre reopens its Denon wing."},
        ],
        "tools": [SEARCH_TOOL],
        "add_generation_prompt": True,
    }, bos="<s>", eos="</s>"),
    Case("reasoning", {
        "messages": [
            {"role": "user", "content": "What is the capital of France?"},
            {"role": "assistant", "reasoning_content": "Let me think.", "content": "Paris."},
            {"role": "user", "content": "And its population?"},
        ],
        "add_generation_prompt": True,
        "enable_thinking": False,
    }, eos="</s>"),
    Case("continue", {
        "messages": [
            {"role": "system", "content": "Complete the user's list."},
            {"role": "user", "content": "List three primary colours."},
            {"role": "assistant", "content": "Red, blue and"},
        ],
        "add_generation_prompt": False,
    }, bos="<s>", eos="</s>"),
]


def conversation(case: Case) -> dict:
    """The variables as CONV.json holds them. tools and documents are None when not given,
    as transformers passes them, unless the case leaves them undefined."""
    variables = copy.deepcopy(case.variables)
    if case.hf_defaults:
        variables.setdefault("tools", None)
        variables.setdefault("documents", None)
    return variables


# --- polystack -----------------------------------------------------------------------------------

def run_polystack(binary: str, template: Path, conv_json: str, case: Case,
                  workdir: Path) -> Actual:
    conv_path = workdir / f"{template.stem}.{case.name}.json"
    conv_path.write_text(conv_json, encoding="utf-8")
    return run_template(binary, template, conv_path, case.bos, case.eos, SOURCE_DATE_EPOCH)


# --- Failing cases -------------------------------------------------------------------------------

def keep_case(keep: Path, template: Path, case: Case, conv_json: str, expected: Expected,
              actual: Actual) -> None:
    base = keep / f"{template.stem}.{case.name}"
    Path(f"{base}.json").write_text(conv_json, encoding="utf-8")
    if expected.text is not None:
        Path(f"{base}.expected").write_bytes(expected.text.encode("utf-8"))
    else:
        msg = (f"raise_exception: {expected.raised}" if expected.raised is not None
               else expected.error)
        Path(f"{base}.expected-error").write_text(msg + "\n", encoding="utf-8")
    Path(f"{base}.actual").write_bytes(actual.stdout)
    Path(f"{base}.stderr").write_bytes(actual.stderr)


# --- Main ----------------------------------------------------------------------------------------

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--polystack", help="the polystack binary")
    ap.add_argument("--templates", type=Path, default=DEFAULT_TEMPLATES,
                    help="folder of *.jinja chat templates (default: %(default)s)")
    ap.add_argument("--only", action="append", default=[], metavar="SUBSTRING",
                    help="only templates whose file name contains SUBSTRING (repeatable)")
    ap.add_argument("--keep", type=Path, metavar="DIR",
                    help="write each failing case's conversation, expected and actual output here")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                    help="polystack runs at a time (default: %(default)s)")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="show every case, and the errors of cases where both raised")
    ap.add_argument("--oracle-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if not args.templates.is_dir():
        skip(f"no chat templates folder at {args.templates}")
    if JINJA2_MISSING is not None:
        skip(f"jinja2 is not importable ({JINJA2_MISSING})")
    if not args.oracle_only and not args.polystack:
        ap.error("--polystack is required")

    templates = sorted(args.templates.glob("*.jinja"))
    if len(templates) < MIN_TEMPLATES:
        print(f"FAIL only {len(templates)} templates in {args.templates}, "
              f"expected at least {MIN_TEMPLATES}")
        return 1
    if args.only:
        templates = [t for t in templates if any(s in t.name for s in args.only)]
        if not templates:
            print(f"FAIL no template name contains any of {args.only}")
            return 1

    env = make_environment(SOURCE_DATE_EPOCH)
    convs = {case.name: json.dumps(conversation(case), ensure_ascii=case.ascii_json, indent=1)
             for case in CASES}
    expected = {}
    for template in templates:
        source = template.read_text(encoding="utf-8")
        for case in CASES:
            variables = json.loads(convs[case.name])  # what CONV.json gives polystack
            expected[template, case.name] = oracle_render(env, source, variables, case.bos,
                                                          case.eos)

    if args.oracle_only:
        return print_oracle_table(templates, expected, args.verbose)

    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="chat-templates-") as tmp:
        with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
            futures = {(t, c.name): pool.submit(run_polystack, args.polystack, t, convs[c.name],
                                                c, Path(tmp))
                       for t in templates for c in CASES}
            actual = {key: f.result() for key, f in futures.items()}

    passed = failed = both = 0
    for template in templates:
        name = template.stem
        outcomes = []
        for case in CASES:
            key = template, case.name
            outcome = compare(expected[key], actual[key])
            outcomes.append((case, outcome))
            if outcome.verdict == FAIL and args.keep:
                keep_case(args.keep, template, case, convs[case.name], expected[key], actual[key])
        n_fail = sum(o.verdict == FAIL for _, o in outcomes)
        n_both = sum(o.verdict == BOTH_RAISED for _, o in outcomes)
        failed += n_fail
        both += n_both
        passed += len(outcomes) - n_fail - n_both
        if n_fail == 0:
            extra = f", {n_both} both raised" if n_both else ""
            print(f"ok  {name}  ({len(outcomes)} cases{extra})")
        for case, outcome in outcomes:
            if outcome.verdict == FAIL:
                print(f"FAIL {name} {case.name}: {outcome.reason}")
                for line in outcome.details:
                    print(f"    {line}")
            elif args.verbose:
                print(f"    {case.name}: {outcome.verdict}")
                for line in outcome.details:
                    print(f"        {line}")

    total = passed + failed + both
    print(f"chat templates: {passed} of {total} renders equal to jinja2 "
          f"({failed} failed, {both} both raised)")
    return 1 if failed else 0


def print_oracle_table(templates: list[Path], expected: dict, verbose: bool) -> int:
    """The oracle alone: per template, how many cases render, call raise_exception, or fail."""
    print(f"{'template':60} render raise error")
    totals = [0, 0, 0]
    for template in templates:
        results = [expected[template, c.name] for c in CASES]
        counts = [sum(r.text is not None for r in results),
                  sum(r.raised is not None for r in results),
                  sum(r.error is not None for r in results)]
        totals = [a + b for a, b in zip(totals, counts)]
        print(f"{template.stem:60} {counts[0]:6} {counts[1]:5} {counts[2]:5}")
        for case, r in zip(CASES, results):
            if r.raised is not None:
                print(f"    {case.name}: raise_exception({r.raised!r})")
            elif r.error is not None:
                print(f"    {case.name}: {r.error}")
            elif verbose:
                print(f"    {case.name}: {len(r.text.encode('utf-8'))} bytes")
    print(f"{'total':60} {totals[0]:6} {totals[1]:5} {totals[2]:5}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
