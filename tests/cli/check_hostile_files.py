#!/usr/bin/env python3
"""Regression files for problems a fuzzing and code-reading pass found, each generated here
(nothing binary is committed) and given to `polystack`:

1. float metadata read as an integer: a gemma3 sliding_window_pattern holding NaN, 1e30 or 0.5
   (a plain cast is undefined behaviour) must be refused with a line naming the element;
2. unchecked hyperparameters: context_length -5 or -1000, a head count of 0, a NaN or negative
   RMS epsilon, a RoPE base of 0: refused naming the key and the value, never sized into a
   buffer;
3. a WordPiece vocabulary with a 200 KB token and an 8,000-character word (took 11 s when the
   search was cubic): `tokenize` must finish within a generous bound;
4. strings that are not valid UTF-8 (and terminal control characters) in metadata: `inspect`
   shows them as \\xNN escapes, and `inspect --json` is valid JSON;
5. memory while parsing: a 20 MB file of 1.67 M nested empty arrays (peaked at 284 MB) is
   refused at once; a 16 MB file of 2 M empty strings parses with a peak resident size within
   a small multiple of the file size (measured with wait4; skipped in a sanitizer build, whose
   allocator keeps freed memory in quarantine).

Every refusal must be a clean failure as check_bad_inputs.py defines it (one error line, a
positive exit status, no sanitizer report). The time and memory bounds are generous (several
times what a correct build needs on a slow machine) so they do not flake.

Usage: check_hostile_files.py --bin build/src/polystack [-v]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gguf

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "scripts"))

import make_llama_gguf  # noqa: E402
from check_bad_inputs import SANITIZER_ENV, Case, run_case  # noqa: E402
from servertest import sanitizer_build  # noqa: E402

problems: list[str] = []


def fail(msg: str) -> None:
    print("FAIL:", msg, flush=True)
    problems.append(msg)


class OverridingWriter(gguf.GGUFWriter):
    """A GGUFWriter that replaces (or, with None, drops) the given keys as they are added."""

    overrides: dict[str, tuple | None] = {}

    def add_key_value(self, key, val, vtype, sub_type=None):
        if key in self.overrides:
            o = self.overrides[key]
            if o is None:
                return
            val, vtype = o[0], o[1]
            sub_type = o[2] if len(o) > 2 else None
        super().add_key_value(key, val, vtype, sub_type)


def model_with(path: str, params: make_llama_gguf.ModelParams, overrides: dict) -> str:
    OverridingWriter.overrides = overrides
    saved = make_llama_gguf.gguf.GGUFWriter
    make_llama_gguf.gguf.GGUFWriter = OverridingWriter
    try:
        make_llama_gguf.write_model(path, params)
    finally:
        make_llama_gguf.gguf.GGUFWriter = saved
    return path


T = gguf.GGUFValueType


def refusal(binary: str, env: dict, name: str, args: list[str], mention: tuple[str, ...],
            timeout: float = 120) -> None:
    case = Case(name, args, must_mention=mention)
    out = run_case(binary, case, timeout, env)
    if out.problems:
        fail(f"{name}: {'; '.join(out.problems)}: {out.stderr.strip()[-300:]}")
    else:
        print(f"ok: {name}: {out.stderr.strip().splitlines()[-1]}")


def check_metadata(binary: str, env: dict, work: str) -> None:
    gemma = make_llama_gguf.ModelParams(
        n_vocab=300, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=96, ctx=64, tied=True,
        seed=12, arch="gemma3", head_dim_override=24, sliding_window=4, swa_pattern=2)
    key = "gemma3.attention.sliding_window_pattern"
    run = ["run", "-p", "hi", "-n", "2", "--temp", "0", "-m"]
    for label, values, said in [("NaN", [math.nan, 1.0], f"'{key}[0]' is NaN; expected 0 or 1"),
                                ("1e30", [1.0, 1e30], f"'{key}[1]' = 1.0000000150474662e+30"),
                                ("0.5", [0.5, 1.0], f"'{key}[0]' = 0.5; expected 0 or 1")]:
        p = model_with(os.path.join(work, f"pattern-{label}.gguf"), gemma,
                       {key: (values, T.ARRAY, T.FLOAT32)})
        refusal(binary, env, f"sliding_window_pattern holding {label}", run + [p], (said,))
    # Whole floats are still read as the flags they hold.
    p = model_with(os.path.join(work, "pattern-whole.gguf"), gemma,
                   {key: ([1.0, 0.0], T.ARRAY, T.FLOAT32)})
    r = subprocess.run([binary] + run + [p], capture_output=True, text=True, env=env, timeout=120)
    if r.returncode != 0:
        fail(f"sliding_window_pattern of whole floats: {r.stderr.strip()[-300:]}")

    llama = make_llama_gguf.ModelParams(n_vocab=300, n_embd=64, n_layer=1, n_head=4,
                                        n_head_kv=2, n_ff=96, ctx=64, seed=11)
    for label, key, value, vtype, said in [
            ("context_length -5", "llama.context_length", -5, T.INT32,
             "'llama.context_length' = -5 is out of range; expected an integer in 1..16777216"),
            ("context_length -1000", "llama.context_length", -1000, T.INT64,
             "'llama.context_length' = -1000 is out of range"),
            ("context_length 2^40", "llama.context_length", 1 << 40, T.UINT64,
             "'llama.context_length' = 1099511627776 is out of range"),
            ("head_count 0", "llama.attention.head_count", 0, T.UINT32,
             "'llama.attention.head_count' = 0 is out of range"),
            ("rms epsilon NaN", "llama.attention.layer_norm_rms_epsilon", math.nan, T.FLOAT32,
             "'llama.attention.layer_norm_rms_epsilon' is NaN; expected a number in [0, 1]"),
            ("rms epsilon -1", "llama.attention.layer_norm_rms_epsilon", -1.0, T.FLOAT32,
             "'llama.attention.layer_norm_rms_epsilon' = -1 is out of range; expected a number in [0, 1]"),
            ("rope base 0", "llama.rope.freq_base", 0.0, T.FLOAT32,
             "'llama.rope.freq_base' = 0 is out of range; expected a number in [1, 1000000000000]"),
            ("rope base inf", "llama.rope.freq_base", math.inf, T.FLOAT32,
             "'llama.rope.freq_base' is inf"),
    ]:
        p = model_with(os.path.join(work, label.replace(" ", "-") + ".gguf"), llama,
                       {key: (value, vtype)})
        refusal(binary, env, label, run + [p], (said,))
        # -c given: the file's context length is still checked, not bypassed.
        if key == "llama.context_length":
            refusal(binary, env, label + " with -c 32", run[:-1] + ["-c", "32", "-m", p], (said,))


def bert_vocab(path: str, tokens: list[str]) -> str:
    w = gguf.GGUFWriter(path, "bert")
    w.add_tokenizer_model("bert")
    w.add_token_list(tokens)
    w.add_token_types([3 if t.startswith("[") else 1 for t in tokens])
    w.add_uint32("tokenizer.ggml.unknown_token_id", 1)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def check_wordpiece(binary: str, env: dict, work: str, sanitized: bool) -> None:
    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + list("abcdefghij") + \
        ["##" + c for c in "abcdefghij"] + ["\u2581" + c for c in "abcdefghij"] + \
        ["a" * 200_000]
    vocab = bert_vocab(os.path.join(work, "wordpiece-huge-token.gguf"), tokens)
    word = "ab" * 4000  # 8,000 characters, one word
    bound = 20.0 if sanitized else 5.0  # cubic search: ~11 s in a release build
    t0 = time.monotonic()
    try:
        r = subprocess.run([binary, "tokenize", "-m", vocab, "-p", word], capture_output=True,
                           text=True, env=env, timeout=120)
    except subprocess.TimeoutExpired:
        fail("WordPiece with a 200 KB token: tokenize did not finish in 120 s")
        return
    dt = time.monotonic() - t0
    if r.returncode != 0:
        fail(f"WordPiece with a 200 KB token: exit {r.returncode}: {r.stderr.strip()[-300:]}")
    elif dt > bound:
        fail(f"WordPiece with a 200 KB token: an 8,000-character word took {dt:.1f} s "
             f"(bound {bound:.0f} s)")
    else:
        print(f"ok: WordPiece with a 200 KB token: an 8,000-character word in {dt:.2f} s")


def raw_gguf(kvs: list[bytes], n_kv: int | None = None) -> bytes:
    """A GGUF v3 image with no tensors and the given raw key/value records."""
    body = b"".join(kvs)
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs) if n_kv is None else n_kv) + body


def kv(key: str | bytes, vtype: int, payload: bytes) -> bytes:
    k = key.encode() if isinstance(key, str) else key
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", vtype) + payload


def check_scores(binary: str, env: dict, work: str) -> None:
    """A SentencePiece vocabulary whose scores (which order its merges) hold NaN."""
    w = gguf.GGUFWriter(os.path.join(work, "spm-nan-score.gguf"), "llama")
    w.add_tokenizer_model("llama")
    tokens = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "ab"]
    w.add_token_list(tokens)
    w.add_token_scores([0.0, 0.0, 0.0, -1.0, -2.0, -2.0, math.nan])
    w.add_token_types([2, 3, 3, 1, 1, 1, 1])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    refusal(binary, env, "a vocabulary score of NaN",
            ["tokenize", "-m", os.path.join(work, "spm-nan-score.gguf"), "-p", "ab"],
            ("tokenizer.ggml.scores", "score nan of token 6 is not a finite number"))
    # 4 M + 1 empty tokens (a 34 MB file): refused before maps of ~100 bytes a token are built.
    n = (1 << 22) + 1
    path = os.path.join(work, "huge-vocab.gguf")
    Path(path).write_bytes(raw_gguf([
        kv("tokenizer.ggml.model", 8, struct.pack("<Q", 5) + b"llama"),
        kv("tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, n) + struct.pack("<Q", 0) * n)]))
    refusal(binary, env, "a vocabulary of 4,194,305 tokens", ["tokenize", "-m", path, "-p", "a"],
            ("4194305 tokens is more than the 4194304 a vocabulary may hold",))


def check_inspect_text(binary: str, env: dict, work: str) -> None:
    bad = [b"\xff\xfe\xfd", b"ok \xe2\x82", b"\x1b[31mred\x1b[0m", "héllo".encode()]
    strings = struct.pack("<IQ", 8, len(bad)) + b"".join(struct.pack("<Q", len(s)) + s
                                                          for s in bad)
    data = raw_gguf([kv("general.architecture", 8, struct.pack("<Q", 5) + b"llama"),
                     kv("t.strings", 9, strings),
                     kv("t.value", 8, struct.pack("<Q", 3) + b"a\xffb"),
                     kv(b"t.bad\xc3key", 8, struct.pack("<Q", 1) + b"x")])
    path = os.path.join(work, "invalid-utf8.gguf")
    Path(path).write_bytes(data)
    r = subprocess.run([binary, "inspect", path], capture_output=True, env=env, timeout=60)
    out = r.stdout.decode("utf-8", errors="strict") if r.returncode == 0 else ""
    if r.returncode != 0:
        fail(f"inspect of invalid UTF-8: exit {r.returncode}: {r.stderr.decode(errors='replace')}")
    elif "\\xff\\xfe\\xfd" not in out or '"a\\xffb"' not in out or "\x1b" in out or \
            "héllo" not in out or "\\xe2\\x82" not in out or "t.bad\\xc3key" not in out:
        fail(f"inspect of invalid UTF-8: escapes missing or raw bytes shown: {out[-600:]!r}")
    else:
        print("ok: inspect shows invalid UTF-8 and controls as escapes")
    r = subprocess.run([binary, "inspect", "--json", path], capture_output=True, env=env,
                       timeout=60)
    try:
        j = json.loads(r.stdout.decode("utf-8", errors="strict"))
        md = j["metadata"]
        if md["t.strings"][0] != "\\xff\\xfe\\xfd" or md["t.strings"][3] != "héllo" or \
                md["t.value"] != "a\\xffb" or md["t.strings"][2] != "\x1b[31mred\x1b[0m" or \
                md.get("t.bad\\xc3key") != "x":
            fail(f"inspect --json of invalid UTF-8: {md}")
        else:
            print("ok: inspect --json of invalid UTF-8 is valid JSON with escapes")
    except (ValueError, KeyError, UnicodeDecodeError) as e:
        fail(f"inspect --json of invalid UTF-8: not valid JSON ({e}): exit {r.returncode} "
             f"{r.stderr.decode(errors='replace')[-300:]}")


def peak_rss(args: list[str], env: dict) -> tuple[int, int, float]:
    """(exit status, peak resident bytes, seconds) of one run. A child's peak counts the
    process it was forked from, so the run is started by a fresh, small Python rather than by
    this one, which holds the test files."""
    t0 = time.monotonic()
    probe = ("import os, subprocess, sys\n"
             "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL, "
             "stderr=subprocess.DEVNULL)\n"
             "_, status, usage = os.wait4(p.pid, 0)\n"
             "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss * 1024)\n")
    r = subprocess.run([sys.executable, "-c", probe] + args, capture_output=True, text=True,
                       env=env, timeout=120)
    rc, peak = (int(x) for x in r.stdout.split())
    return rc, peak, time.monotonic() - t0


def check_memory(binary: str, env: dict, work: str, sanitized: bool) -> None:
    n = 1_670_000
    nested = struct.pack("<IQ", 9, n) + struct.pack("<IQ", 0, 0) * n  # arrays of empty u8 arrays
    path = os.path.join(work, "nested-arrays.gguf")
    Path(path).write_bytes(raw_gguf([kv("t.nested", 9, nested)]))
    refusal(binary, env, "1.67 M nested arrays (20 MB)", ["inspect", path],
            ("arrays of arrays are not supported",), timeout=60)

    small = os.path.join(work, "small.gguf")
    Path(small).write_bytes(raw_gguf([kv("t.s", 8, struct.pack("<Q", 1) + b"x")]))
    n = 2_000_000
    strings = struct.pack("<IQ", 8, n) + struct.pack("<Q", 0) * n
    big = os.path.join(work, "empty-strings.gguf")
    Path(big).write_bytes(raw_gguf([kv("t.strings", 9, strings)]))
    size = os.path.getsize(big)
    if sanitized:
        print("note: a sanitizer build: peak memory not measured (its allocator quarantines "
              "freed memory)")
        return
    rc0, base, _ = peak_rss([binary, "inspect", small], env)
    rc, peak, dt = peak_rss([binary, "inspect", big], env)
    ratio = (peak - base) / size
    print(f"inspect of {size / 2**20:.1f} MB of 2 M empty strings: exit {rc}, peak "
          f"{peak / 2**20:.0f} MiB ({base / 2**20:.0f} MiB for a tiny file): {ratio:.2f}x the "
          f"file, {dt:.2f} s")
    if rc0 != 0 or rc != 0:
        fail(f"inspect of the empty-strings file: exit {rc0} / {rc}")
    elif ratio > 4.0:  # views: 16 bytes per 8-byte record, and the file mapped in: ~3x
        fail(f"inspect of {size} bytes of empty strings peaked at {ratio:.2f}x the file size "
             "(bound 4x)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="the polystack executable")
    ap.add_argument("--keep", help="write the files into this folder and keep them")
    args = ap.parse_args()
    binary = os.path.abspath(args.bin)
    sanitized = sanitizer_build(binary)
    env = {k: v for k, v in os.environ.items() if k != "POLYSTACK_MODEL"}
    env.update(SANITIZER_ENV)
    env["POLYSTACK_DEVICE"] = "cpu"
    with tempfile.TemporaryDirectory(prefix="polystack-hostile-") as tmp:
        work = args.keep or tmp
        os.makedirs(work, exist_ok=True)
        check_metadata(binary, env, work)
        check_wordpiece(binary, env, work, sanitized)
        check_scores(binary, env, work)
        check_inspect_text(binary, env, work)
        check_memory(binary, env, work, sanitized)
    if problems:
        print(f"{len(problems)} problem(s)")
        return 1
    print("every hostile file handled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
