#!/usr/bin/env python3
"""Structured output from JSON Schemas (`run --json-schema-file`, `-j/--json-schema`).

- For every schema of tests/data/json_schemas, `run` on stories260K at several temperatures and
  seeds: each output that stopped at the end of text parses as JSON and is an instance of the
  schema (Python's jsonschema, Draft 2020-12, with date, time, date-time and uuid checked);
  outputs cut by the token limit are counted, and at least 80% of all must end by themselves.
- `-j`/`--json-schema` take the schema inline; `chat -j` constrains every reply.
- A schema with an unsupported keyword, an unsupported format, or that is not JSON: one stderr
  line naming the flag and what is wrong, exit 2, before the model loads.

Uses the Python standard library and jsonschema only. Exits 77 (skipped) when stories260K or
jsonschema is absent.
"""
import argparse
import concurrent.futures
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

import servertest
from servertest import check, problems

SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data",
                          "json_schemas")
# (temperature, seed) per schema.
RUNS = [("0", "1"), ("0.6", "2"), ("1.0", "3"), ("1.5", "4")]
MIN_ENDED = 0.8


def run(b, args, stdin=None):
    """rc, the generated text (`run` ends its output with one newline of its own), stderr.

    stdout is decoded strictly: bytes that are not UTF-8 are a failure of the grammar."""
    r = subprocess.run([b] + args, capture_output=True, timeout=300,
                       input=stdin.encode() if stdin is not None else None)
    err = r.stderr.decode("utf-8", "replace")
    try:
        out = r.stdout.decode("utf-8")
    except UnicodeDecodeError as e:
        return r.returncode, None, err + f"\n(stdout is not UTF-8: {e}: {r.stdout[:200]!r})"
    if args[0] == "run" and out.endswith("\n"):
        out = out[:-1]
    return r.returncode, out, err


# Formats, checked here when this jsonschema has no checker for them (date-time and time need
# the rfc3339-validator package).
DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
TIME = re.compile(r"([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)")
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def is_date(s):
    if not isinstance(s, str):
        return True
    if not DATE.fullmatch(s):
        return False
    try:
        datetime.date.fromisoformat(s)
        return True
    except ValueError:
        return False


def is_time(s):
    return not isinstance(s, str) or TIME.fullmatch(s) is not None


def is_date_time(s):
    if not isinstance(s, str):
        return True
    date, sep, time = s.partition("T") if "T" in s else s.partition("t")
    return sep != "" and is_date(date) and is_time(time)


def is_uuid(s):
    return not isinstance(s, str) or UUID.fullmatch(s) is not None


def format_checker(jsonschema):
    """Draft 2020-12's format checks (FormatChecker() alone mixes in draft 3's `time`), with
    ours for the formats this jsonschema cannot check."""
    base = getattr(jsonschema.Draft202012Validator, "FORMAT_CHECKER", None)
    if base is None:
        base = getattr(jsonschema, "draft202012_format_checker", jsonschema.FormatChecker())
    checker = jsonschema.FormatChecker(formats=())
    checker.checkers = dict(base.checkers)
    for name, fn in (("date", is_date), ("time", is_time), ("date-time", is_date_time),
                     ("uuid", is_uuid)):
        if name not in checker.checkers:
            checker.checks(name)(fn)
    return checker


def generate(b, model, path, temp, seed):
    with open(path) as f:
        title = json.load(f).get("title", "data")
    return run(b, ["run", "-m", model, "-p", f"Here is the {title} as JSON:",
                   "--json-schema-file", path, "--temp", temp, "-s", seed, "-n", "512"])


def stop_reason(err):
    lines = err.strip().splitlines()
    last = lines[-1] if lines else ""
    if "stopped at end of text" in last:
        return "end"
    if "stopped at token limit" in last:
        return "limit"
    return "other: " + last


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("-j", "--jobs", type=int, default=2)
    a = ap.parse_args()
    if not os.path.exists(a.model):
        print(f"skipped: {a.model} is absent")
        return 77
    try:
        import jsonschema
    except ImportError:
        print("skipped: the Python package jsonschema is absent (scripts/install-deps)")
        return 77
    b = a.bin
    checker = format_checker(jsonschema)
    files = sorted(f for f in os.listdir(SCHEMA_DIR) if f.endswith(".json"))
    check(len(files) >= 10, f"{len(files)} schemas in {SCHEMA_DIR}")

    jobs = []
    for name in files:
        path = os.path.join(SCHEMA_DIR, name)
        with open(path) as f:
            schema = json.load(f)
        jsonschema.Draft202012Validator.check_schema(schema)
        for temp, seed in RUNS:
            jobs.append((name, schema, path, temp, seed))
    ended = limited = valid = 0
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(lambda j: generate(b, a.model, j[2], j[3], j[4]), jobs))
    for (name, schema, path, temp, seed), (rc, out, err) in zip(jobs, results):
        what = f"{name} --temp {temp} -s {seed}"
        if rc != 0 or out is None:
            check(False, f"{what}: runs", f"rc={rc} {err[-400:]}")
            continue
        reason = stop_reason(err)
        if reason == "limit":
            limited += 1
            print(f"note: {what}: stopped at the token limit ({len(out)} characters)")
            continue
        check(reason == "end", f"{what}: stops at the end of text or the token limit", reason)
        ended += 1
        try:
            doc = json.loads(out)
        except ValueError as e:
            check(False, f"{what}: the output is JSON", f"{e}: {out!r}")
            continue
        errors = list(jsonschema.Draft202012Validator(schema, format_checker=checker)
                      .iter_errors(doc))
        if errors:
            check(False, f"{what}: the output is an instance of the schema",
                  f"{errors[0].message} at {list(errors[0].absolute_path)}: {out!r}")
            continue
        valid += 1
    total = len(jobs)
    print(f"{total} outputs: {valid} valid instances, {ended} ended by themselves, "
          f"{limited} stopped at the token limit")
    check(valid == ended, "every output that ended is a valid instance",
          f"{valid} of {ended}")
    check(ended >= MIN_ENDED * total, f"at least {MIN_ENDED:.0%} of the outputs end by themselves",
          f"{ended} of {total}")

    # Inline schemas, -j and --json-schema.
    inline = {"type": "object",
              "properties": {"ok": {"type": "boolean"},
                             "n": {"type": "integer", "minimum": -5, "maximum": 5}},
              "required": ["ok", "n"], "additionalProperties": False}
    for flag in ("-j", "--json-schema"):
        rc, out, err = run(b, ["run", "-m", a.model, "-p", "Say", flag, json.dumps(inline),
                               "--temp", "0.8", "-s", "5", "-n", "64"])
        ok = rc == 0 and out is not None
        if ok:
            try:
                doc = json.loads(out)
                ok = not list(jsonschema.Draft202012Validator(inline).iter_errors(doc))
            except ValueError:
                ok = False
        check(ok and "stopped at end of text" in err, f"run {flag} SCHEMA: a valid instance",
              f"rc={rc} out={out!r} {err[-300:]}")
    rc, out, err = run(b, ["chat", "-m", a.model, "--chat-template", "chatml", "-n", "32",
                           "-j", '{"enum": ["yes", "no"]}'], stdin="hello\nagain\n")
    replies = [l for l in (out or "").splitlines() if l.strip()]
    check(rc == 0 and len(replies) >= 2 and all(r in ('"yes"', '"no"') for r in replies[:2]),
          "chat -j: every reply an instance", f"rc={rc} {out!r} {err[-300:]}")

    # What is refused: one line naming the flag and the keyword, exit 2.
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"type": "object", "properties": {"mail": {"type": "string",
                                                            "format": "email"}}}, f)
    try:
        for args, wants in (
                (["--json-schema", '{"type": "object", "properties": {"x": {"not": {}}}}'],
                 ["--json-schema", "'not' at /properties/x is not supported"]),
                (["-j", '{"type": "string", "pattern": "(?=a)b"}'],
                 ["--json-schema", "lookahead"]),
                (["--json-schema-file", f.name],
                 ["--json-schema-file", "format 'email' at /properties/mail"]),
                (["-j", '{"type": "object",'], ["--json-schema", "not JSON"]),
        ):
            rc, out, err = run(b, ["run", "-m", a.model, "-p", "x"] + args)
            lines = err.strip().splitlines()
            check(rc == 2 and len(lines) == 1 and all(w in lines[0] for w in wants),
                  f"{' '.join(args)[:60]}: one line naming it, exit 2", f"rc={rc} {err!r}")
    finally:
        os.unlink(f.name)
    rc, out, err = run(b, ["run", "-m", a.model, "-p", "x", "-j", "{}", "--grammar",
                           'root ::= "a"'])
    check(rc == 2 and "excludes" in err, "--json-schema and --grammar exclude each other",
          f"rc={rc} {err!r}")

    print(f"summary: {valid} schema outputs validated, {limited} hit the token limit, "
          f"{total} in all")
    print("all JSON Schema checks passed" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
