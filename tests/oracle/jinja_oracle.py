"""The jinja2 oracle that the chat template checks share.

It holds jinja2 set up as Hugging Face transformers sets it up (make_environment), what that
environment renders or raises for a template and its variables (oracle_render, Expected), a run
of `polystack template` on the same template and variables (run_template, Actual), and the
verdict on the two (compare, Outcome). check_chat_templates.py and check_jinja_constructs.py in
this folder use all of it; ../cli/check_chat_server.py uses the environment.

Hugging Face's set-up (transformers' `_compile_jinja_template` and `render_jinja_template`):
  * `jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
    extensions=[AssistantTracker, jinja2.ext.loopcontrols])`, where AssistantTracker adds the
    block tag `{% generation %}...{% endgeneration %}`, which renders its body unchanged (it only
    records where assistant text lies);
  * the `tojson` filter replaced by `json.dumps(x, ensure_ascii=False, indent=indent,
    separators=separators, sort_keys=sort_keys)` (no HTML escaping, unlike jinja2's own);
  * globals `raise_exception(message)`, which raises `jinja2.exceptions.TemplateError(message)`,
    and `strftime_now(format)`, which is `datetime.now().strftime(format)`;
  * the variables `messages`, `tools` and `documents` (both None when not given),
    `add_generation_prompt`, the special tokens (`bos_token`, `eos_token`) and any other keyword
    arguments (`enable_thinking`, ...).
The checks pin the clock: polystack runs with SOURCE_DATE_EPOCH set, and strftime_now formats
that same instant in local time.

jinja2 is imported when it can be: JINJA2_MISSING is None then, or else says why not, and a
check skips (exit status SKIP).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

try:
    import jinja2
    import jinja2.ext
    import jinja2.nodes
    import jinja2.sandbox
    JINJA2_MISSING = None
except ImportError as e:  # the checks skip, see skip()
    JINJA2_MISSING = str(e)

SKIP = 77  # exit status of a skipped check
TIMEOUT_S = 20  # for one polystack run
CONTEXT = 60  # bytes shown either side of the first difference


def skip(reason: str) -> None:
    print(f"skipped: {reason}")
    sys.exit(SKIP)


# --- The oracle ----------------------------------------------------------------------------------

class RaisedByTemplate(Exception):
    """The template called raise_exception(message)."""


def make_environment(epoch: int | None = None):
    """A jinja2 environment set up as transformers sets it up. strftime_now formats the instant
    `epoch` (seconds since 1970, as SOURCE_DATE_EPOCH) in local time, or the current time when
    it is None, as transformers does."""

    class GenerationBlock(jinja2.ext.Extension):
        """`{% generation %}...{% endgeneration %}`: renders its body unchanged, as
        transformers' AssistantTracker does when it is not tracking."""
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [],
                                          body).set_lineno(lineno)

        def _generation_support(self, caller):
            return caller()

    class TemplateRaised(jinja2.exceptions.TemplateError, RaisedByTemplate):
        pass

    def raise_exception(message):
        raise TemplateRaised(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        now = datetime.now() if epoch is None else datetime.fromtimestamp(epoch)
        return now.strftime(format)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True,
        extensions=[GenerationBlock, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


@dataclass
class Expected:
    text: str | None = None  # the rendered text, or None when jinja2 raised
    raised: str | None = None  # raise_exception's message
    error: str | None = None  # any other failure: "TypeName: message"


def oracle_render(env, source: str, variables: dict, bos: str = "", eos: str = "") -> Expected:
    """What `env` renders from the template text `source` with bos_token, eos_token and
    `variables`, or what it raises."""
    try:
        template = env.from_string(source)
        return Expected(text=template.render(bos_token=bos, eos_token=eos, **variables))
    except RaisedByTemplate as e:
        return Expected(raised=str(e.args[0]) if e.args else "")
    except Exception as e:  # noqa: BLE001 - every other failure is "jinja2 raised"
        return Expected(error=f"{type(e).__name__}: {e}")


# --- polystack -----------------------------------------------------------------------------------

@dataclass
class Actual:
    returncode: int | None  # None: timed out
    stdout: bytes = b""
    stderr: bytes = b""


def run_template(binary: str, template: Path, variables: Path, bos: str, eos: str,
                 epoch: int) -> Actual:
    """`polystack template --chat-template-file TEMPLATE --messages VARIABLES [--bos B]
    [--eos E]` with SOURCE_DATE_EPOCH set to `epoch`, stopped after TIMEOUT_S seconds."""
    cmd = [binary, "template", "--chat-template-file", str(template), "--messages", str(variables)]
    if bos:
        cmd += ["--bos", bos]
    if eos:
        cmd += ["--eos", eos]
    env = dict(os.environ, SOURCE_DATE_EPOCH=str(epoch))
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired as e:
        return Actual(None, e.stdout or b"", e.stderr or b"")
    return Actual(proc.returncode, proc.stdout, proc.stderr)


# --- Comparison ----------------------------------------------------------------------------------

PASS, BOTH_RAISED, FAIL = "pass", "both raised", "fail"


@dataclass
class Outcome:
    verdict: str
    reason: str = ""
    details: list[str] = field(default_factory=list)


def first_difference(expected: bytes, actual: bytes) -> list[str]:
    n = min(len(expected), len(actual))
    offset = next((i for i in range(n) if expected[i] != actual[i]), n)
    lo = max(0, offset - CONTEXT)
    return [
        f"first difference at byte {offset} (expected {len(expected)} bytes, got {len(actual)})",
        f"  expected: {expected[lo:offset + CONTEXT]!r}",
        f"  actual:   {actual[lo:offset + CONTEXT]!r}",
    ]


def stderr_line(actual: Actual) -> str:
    text = actual.stderr.decode("utf-8", "replace").strip()
    if not text:
        return "(empty)"
    return text if len(text) <= 300 else text[:300] + "..."


def compare(expected: Expected, actual: Actual, show_text: bool = False) -> Outcome:
    """PASS when
      * jinja2 rendered text and polystack exited 0 printing exactly the same bytes (UTF-8), or
      * the template called raise_exception(msg) and polystack exited 1 with msg in its stderr;
    BOTH_RAISED when jinja2 failed otherwise (syntax error, undefined value, type error, sandbox
    refusal) and polystack exited 1 with a one-line message on stderr; FAIL for anything else,
    and always for an exit status other than 0 or 1 (a crash, a signal, a timeout).
    show_text: where jinja2 rendered and polystack exited 1, show the start of jinja2's text."""
    rc = actual.returncode
    if rc is None:
        return Outcome(FAIL, f"polystack timed out after {TIMEOUT_S} s")
    if rc < 0:
        return Outcome(FAIL, f"polystack killed by signal {-rc}",
                       [f"stderr: {stderr_line(actual)}"])
    if rc not in (0, 1):
        return Outcome(FAIL, f"polystack exited with {rc}", [f"stderr: {stderr_line(actual)}"])

    if expected.text is not None:
        if rc != 0:
            shown = [f"jinja2: {expected.text[:2 * CONTEXT]!r}"] if show_text else []
            return Outcome(FAIL, "jinja2 rendered, polystack exited 1",
                           shown + [f"stderr: {stderr_line(actual)}"])
        want = expected.text.encode("utf-8")
        if actual.stdout == want:
            return Outcome(PASS)
        return Outcome(FAIL, "text differs", first_difference(want, actual.stdout))

    what = (f"raise_exception({expected.raised!r})" if expected.raised is not None
            else expected.error)
    if rc == 0:
        return Outcome(FAIL, "jinja2 raised, polystack exited 0",
                       [f"jinja2: {what}", f"stdout: {actual.stdout[:2 * CONTEXT]!r}"])
    err = actual.stderr.decode("utf-8", "replace")
    if expected.raised is not None:
        if expected.raised in err:
            return Outcome(PASS)
        return Outcome(FAIL, "raise_exception message not in polystack's stderr",
                       [f"jinja2: {what}", f"stderr: {stderr_line(actual)}"])
    lines = err.strip().splitlines()
    if len(lines) == 1:
        return Outcome(BOTH_RAISED, details=[f"jinja2: {what}", f"polystack: {lines[0]}"])
    return Outcome(FAIL, "jinja2 raised, polystack's stderr is not one line",
                   [f"jinja2: {what}", f"stderr: {stderr_line(actual)}"])
