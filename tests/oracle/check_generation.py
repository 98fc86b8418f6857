#!/usr/bin/env python3
"""Checks the text `polystack run` generates on stories260K against the numpy reference.

Greedy (--temp 0): the reference (llama_ref.py, float64, K and V rounded to fp16 like our KV
cache) decodes 64 tokens after BOS + "Once upon a time"; the ids are turned into text the way
SentencePiece does it (pieces joined, U+2581 -> space, <0xXX> byte tokens -> raw bytes, control
tokens dropped, and only the first piece's leading space removed, as llama.cpp detokenizes).
`run` prints the generated text alone, without the prompt, then one newline, so
    "Once upon a time" + stdout == reference text + "\\n"
must hold for every run: -t 1, 2 and 3, each twice (so a race between threads, or state that
leaks from one step to the next, shows as a difference), and -b 1, 2 and 3 (the prompt in
several batches). The text must also read like TinyStories, which a wrong detokenizer or a
broken model would not. `-c 10` stops at a full context after the reference's first tokens,
and a prompt of more than 512 tokens (one default batch) continues as the reference does.

Sampling (--temp 0.8): the same --seed gives the same text twice; different seeds give
different text (for at least one of a few pairs: two seeds may happen to agree).

Exit status: 0 pass, 1 fail, 77 skip (the shared model is absent).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import llama_ref  # noqa: E402
from check_logits import device_usable  # noqa: E402

SKIP = 77
PROMPT = "Once upon a time"
N_PREDICT = 64
LONG_PREDICT = 12  # tokens generated after the long prompt
# Words a TinyStories continuation of this prompt uses; a few must appear.
STORY_WORDS = ("little", "girl", "boy", "named", "play", "day", "loved", "happy", "big", "mom",
               "she", "he", "saw", "friend", "park", "ball")


def sentencepiece_decode(tokens: list[str], types: list[int], ids: list[int]) -> str:
    """llama.cpp's SPM detokenizer: normal and user-defined pieces with U+2581 as a space,
    byte tokens as raw bytes, control and unknown tokens dropped, and the leading space of
    the first piece removed."""
    out = bytearray()
    for i in ids:
        t = types[i]
        if t == 6:  # BYTE: <0xAB>
            out.append(int(tokens[i][3:5], 16))
        elif t in (1, 4):  # NORMAL, USER_DEFINED
            piece = tokens[i].replace("\u2581", " ")
            if not out and piece.startswith(" "):
                piece = piece[1:]
            out += piece.encode("utf-8")
    return out.decode("utf-8")


def greedy_reference(model: llama_ref.RefModel, prompt_ids: list[int]) -> tuple[list[int], float]:
    """Greedy continuation and the smallest gap between the two best logits on the way."""
    ids = list(prompt_ids)
    min_gap = np.inf
    for _ in range(N_PREDICT):
        last = llama_ref.logits(model, ids, kv_cache="f16")[-1]
        top2 = np.sort(last)[-2:]
        min_gap = min(min_gap, float(top2[1] - top2[0]))
        ids.append(int(np.argmax(last)))
    return ids[len(prompt_ids):], min_gap


def run(binary: str, model: str, extra: list[str], timeout: float) -> str:
    cmd = [binary, "run", "-m", model, "-p", PROMPT, "-n", str(N_PREDICT)] + extra
    proc = subprocess.run(cmd, capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n"
                           f"{proc.stderr.decode(errors='replace')}")
    return proc.stdout.decode("utf-8")


class Checker:
    def __init__(self) -> None:
        self.passed = 0
        self.failed = 0

    def check(self, ok: bool, what: str, detail: str = "") -> None:
        if ok:
            self.passed += 1
            print(f"ok: {what}")
        else:
            self.failed += 1
            print(f"FAIL: {what}" + (f"\n  {detail}" if detail else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", required=True, help="the polystack executable")
    ap.add_argument("--model", help="stories260K.gguf (default: under $POLYSTACK_SHARED_DIR)")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--device", help="run on this device (skip when it is absent or unusable)")
    args = ap.parse_args()
    if args.device and not device_usable(args.bin, args.device):
        print(f"SKIP: device {args.device} is absent or unusable here")
        return SKIP
    device_flags = ["--device", args.device] if args.device else []

    model_path = args.model
    if not model_path:
        shared = os.environ.get("POLYSTACK_SHARED_DIR")
        if not shared:
            print("SKIP: POLYSTACK_SHARED_DIR is not set")
            return SKIP
        model_path = os.path.join(shared, "models", "stories260K.gguf")
    if not os.path.exists(model_path):
        print(f"SKIP: {model_path} is absent")
        return SKIP

    model = llama_ref.RefModel(model_path)
    tokens, _, types = llama_ref.vocab(model)
    prompt_ids = llama_ref.spm_encode(model, PROMPT)
    generated, min_gap = greedy_reference(model, prompt_ids)
    reference = sentencepiece_decode(tokens, types, prompt_ids + generated)
    print(f"prompt ids: {' '.join(map(str, prompt_ids))}")
    print(f"reference ids: {' '.join(map(str, generated))}")
    print(f"reference text: {reference!r} (smallest top-2 logit gap {min_gap:.3g})")

    c = Checker()
    c.check(reference.startswith(PROMPT), "the reference text starts with the prompt",
            repr(reference[:40]))
    expected_stdout = reference[len(PROMPT):] + "\n"

    tok = subprocess.run([args.bin, "tokenize", "-m", model_path, "-p", PROMPT, "--ids"],
                         capture_output=True, text=True, timeout=args.timeout)
    c.check(tok.returncode == 0 and tok.stdout.split() == [str(i) for i in prompt_ids],
            "polystack tokenizes the prompt like the reference",
            f"got {tok.stdout.strip()!r}, exit {tok.returncode}")

    outputs = {}
    for threads in (1, 2, 3):
        for attempt in (1, 2):
            text = run(args.bin, model_path, ["--temp", "0", "-t", str(threads)] + device_flags,
                       args.timeout)
            outputs[(threads, attempt)] = text
            c.check(text == expected_stdout,
                    f"greedy -t {threads} (run {attempt}) prints the reference continuation",
                    f"got      {text!r}\n  expected {expected_stdout!r}")
    c.check(len(set(outputs.values())) == 1, "all greedy runs print the same text",
            "; ".join(f"-t {t} run {a}: {v[:50]!r}" for (t, a), v in outputs.items()))
    # The prompt in batches of 1, 2 and 3 tokens: the logits kept must be the last batch's.
    for batch in (1, 2, 3):
        text = run(args.bin, model_path, ["--temp", "0", "-b", str(batch)] + device_flags,
                   args.timeout)
        c.check(text == expected_stdout, f"greedy -b {batch} prints the reference continuation",
                f"got      {text!r}\n  expected {expected_stdout!r}")

    # A context filled exactly: -c 10 after a prompt of P tokens leaves room for 10 - P
    # decode steps, so 11 - P tokens are printed (the last one's position would be the 11th),
    # then `run` stops at "context full" and exits 0.
    n_fit = 11 - len(prompt_ids)
    proc = subprocess.run([args.bin, "run", "-m", model_path, "-p", PROMPT, "-n", "20", "-c", "10",
                           "--temp", "0"] + device_flags, capture_output=True,
                          timeout=args.timeout)
    want = sentencepiece_decode(tokens, types, prompt_ids + generated[:n_fit])[len(PROMPT):] + "\n"
    got = proc.stdout.decode("utf-8", errors="replace")
    c.check(proc.returncode == 0 and got == want and b"stopped at context full" in proc.stderr,
            f"-c 10 prints the reference's first {n_fit} tokens and stops at a full context",
            f"exit {proc.returncode}, got {got!r}, expected {want!r}, "
            f"stderr {proc.stderr.decode(errors='replace')[-200:]!r}")

    # A prompt longer than one batch of the default 512: the reference's text repeated.
    long_prompt = (reference + " ") * 9
    long_ids = llama_ref.spm_encode(model, long_prompt)
    ids = list(long_ids)
    for _ in range(LONG_PREDICT):
        ids.append(int(np.argmax(llama_ref.logits(model, ids, kv_cache="f16")[-1])))
    long_want = sentencepiece_decode(tokens, types, ids)[len(long_prompt):] + "\n"
    with tempfile.NamedTemporaryFile("w", suffix=".txt", encoding="utf-8") as f:
        f.write(long_prompt)
        f.flush()
        proc = subprocess.run([args.bin, "run", "-m", model_path, "-f", f.name, "-n",
                               str(LONG_PREDICT), "--temp", "0"] + device_flags,
                              capture_output=True, timeout=args.timeout)
    got = proc.stdout.decode("utf-8", errors="replace")
    c.check(len(long_ids) > 512 and proc.returncode == 0 and got == long_want,
            f"a prompt of {len(long_ids)} tokens (more than one batch of 512) continues as the "
            "reference does", f"exit {proc.returncode}, got {got!r}, expected {long_want!r}")

    greedy = outputs[(1, 1)]
    words = set(greedy.lower().replace(".", " ").replace(",", " ").split())
    hits = sorted(words.intersection(STORY_WORDS))
    c.check(len(hits) >= 4, f"greedy text reads like TinyStories ({', '.join(hits)})",
            repr(greedy))

    sampled = {}
    for seed in (5, 6, 7, 8, 9, 10):
        sampled[seed] = run(args.bin, model_path,
                            ["--temp", "0.8", "--seed", str(seed)] + device_flags, args.timeout)
    for seed in (5, 8):
        again = run(args.bin, model_path, ["--temp", "0.8", "--seed", str(seed)] + device_flags,
                    args.timeout)
        c.check(again == sampled[seed], f"--seed {seed} --temp 0.8 gives the same text twice",
                f"{sampled[seed][:60]!r} vs {again[:60]!r}")
    for seed, text in sampled.items():
        c.check(text.endswith("\n") and len(text.strip()) > 20,
                f"--seed {seed} --temp 0.8 prints a continuation", repr(text))
    differing = [(a, b) for a, b in ((5, 6), (7, 8), (9, 10)) if sampled[a] != sampled[b]]
    c.check(bool(differing), f"different seeds give different text ({differing})",
            "; ".join(f"{s}: {t[:50]!r}" for s, t in sampled.items()))
    c.check(any(sampled[s] != greedy for s in sampled), "sampling at 0.8 is not greedy")

    print(f"{c.passed} passed, {c.failed} failed")
    return 1 if c.failed else 0


if __name__ == "__main__":
    sys.exit(main())
