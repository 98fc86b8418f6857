#!/usr/bin/env python3
"""Runs one model on two devices and compares them: the logits of every position of a token
sequence (largest difference relative to the largest logit of the reference device), and the
text of a greedy generation. Exits 1 when the logits differ by more than --max-rel-err or the
greedy texts differ in their first --same-chars characters.

  scripts/compare_devices.py --bin build/release/bin/polystack --model M.gguf \
      --device cuda:0 --reference cpu --tokens "1 403 407 261" --prompt "Once upon a time"
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np


def logits(binary: str, model: str, device: str, tokens: str, batch: str,
           extra: list[str]) -> np.ndarray:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "logits.f32")
        cmd = [binary, "logits", "-m", model, "--device", device, "--tokens", tokens, "-o", out,
               "--strict"] + extra
        if batch:
            cmd += ["-b", batch]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
        return np.fromfile(out, dtype=np.float32).reshape(len(tokens.split()), -1)


def greedy(binary: str, model: str, device: str, prompt: str, n: int, extra: list[str]) -> bytes:
    # Bytes: a model with random weights emits pieces that are not UTF-8 on their own.
    cmd = [binary, "run", "-m", model, "--device", device, "-p", prompt, "-n", str(n), "--temp",
           "0", "--ignore-eos", "--strict"] + extra
    r = subprocess.run(cmd, capture_output=True, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr.decode(errors='replace').strip()}")
    return r.stdout


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", required=True)
    ap.add_argument("--reference", default="cpu")
    ap.add_argument("--tokens", required=True, help="token ids for the logits comparison")
    ap.add_argument("--batch", default="", help="prompt tokens per forward pass (default: all)")
    ap.add_argument("--prompt", required=True, help="text for the greedy comparison")
    ap.add_argument("-n", type=int, default=32, help="greedy tokens")
    ap.add_argument("--args", default="",
                    help="more flags for both devices' runs, e.g. \"-c 512\" (write --args=...)")
    ap.add_argument("--device-args", default="",
                    help="more flags for the device's runs, e.g. \"-ngl 1\" or \"--cpu-moe\" "
                         "(write --device-args=...)")
    ap.add_argument("--max-rel-err", type=float, default=1e-3)
    ap.add_argument("--same-chars", type=int, default=0,
                    help="bytes of greedy output that must agree (0: all of it; -1: shown, not "
                         "compared, for quantized weights where the devices round activations "
                         "differently and random weights leave near-ties)")
    args = ap.parse_args()

    both = args.args.split()
    extra = both + args.device_args.split()
    want = logits(args.bin, args.model, args.reference, args.tokens, args.batch, both)
    got = logits(args.bin, args.model, args.device, args.tokens, args.batch, extra)
    rel = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-12))
    same_argmax = int(np.sum(np.argmax(got, axis=1) == np.argmax(want, axis=1)))
    name = os.path.basename(args.model)
    if extra or args.batch:
        name += f" ({' '.join(extra + (['-b', args.batch] if args.batch else []))})"
    print(f"{name}: logits of {want.shape[0]} positions, {args.device} vs {args.reference}: "
          f"max rel err {rel:.2e} (limit {args.max_rel_err:.0e}); same argmax at "
          f"{same_argmax}/{want.shape[0]} positions")
    text_ref = greedy(args.bin, args.model, args.reference, args.prompt, args.n, both)
    text_dev = greedy(args.bin, args.model, args.device, args.prompt, args.n, extra)
    k = args.same_chars or max(len(text_ref), len(text_dev))
    same = k < 0 or text_ref[:k] == text_dev[:k]
    print(f"{name}: greedy {args.n} tokens from {args.prompt!r}:\n  {args.reference}: "
          f"{text_ref!r}\n  {args.device}: {text_dev!r}\n  "
          + ("not compared" if k < 0 else f"{'same' if same else 'DIFFERENT'} (first {k} bytes compared)"))
    ok = rel <= args.max_rel_err and same
    print(f"{name}: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
