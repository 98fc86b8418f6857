#!/usr/bin/env python3
"""`polystack quantize` at the command line, beyond the logits round trips in check_logits.py.

- Bad requests end in one "polystack: error:" line naming the problem and a non-zero exit:
  an unknown type, the input named as output, a missing input.
- stories260K (rows of 64, which no k-quant block of 256 holds) quantized to Q4_K_M: every
  weight matrix falls back to a type that can hold it, each fallback is reported, the output
  keeps every metadata key (tokenizer included) with general.file_type set to 15, and the file
  runs.

Exits 77 (skipped) when ../shared's stories260K is absent.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import gguf

SKIP = 77


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300)


def expect_error(binary: str, args: list[str], words: str) -> bool:
    r = run([binary, "quantize", *args])
    lines = r.stderr.strip().splitlines()
    ok = (r.returncode != 0 and len(lines) == 1 and lines[0].startswith("polystack: error:")
          and words in lines[0])
    print(f"{'ok' if ok else 'FAIL'}: quantize {' '.join(args)} -> exit {r.returncode}: "
          f"{r.stderr.strip()}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True, help="stories260K.gguf")
    a = ap.parse_args()
    if not os.path.exists(a.model):
        print(f"SKIP: {a.model} is absent")
        return SKIP
    ok = True
    with tempfile.TemporaryDirectory(prefix="polystack-quantize-") as tmp:
        out = os.path.join(tmp, "q.gguf")
        ok &= expect_error(a.bin, [a.model, out, "Q4_K_X"], "unknown quantization type 'Q4_K_X'")
        ok &= expect_error(a.bin, [a.model, a.model, "Q8_0"], "must differ from the input")
        ok &= expect_error(a.bin, [os.path.join(tmp, "absent.gguf"), out, "Q8_0"], "absent.gguf")

        r = run([a.bin, "quantize", a.model, out, "q4_k_m"])
        print(r.stderr.strip())
        if r.returncode != 0:
            print(f"FAIL: quantize exited {r.returncode}")
            return 1
        src, dst = gguf.GGUFReader(a.model), gguf.GGUFReader(out)
        matrices = [t.name for t in src.tensors if len(t.shape) >= 2]
        fallbacks = [line for line in r.stderr.splitlines() if "do not fit" in line]
        if len(fallbacks) != len(matrices):
            print(f"FAIL: {len(fallbacks)} fallbacks reported for {len(matrices)} matrices")
            ok = False
        types = {t.name: t.tensor_type.name for t in dst.tensors}
        for name in matrices:
            if types[name] not in ("Q5_0", "Q8_0", "Q4_0", "F16"):
                print(f"FAIL: {name} is {types[name]}, not a type that holds rows of 64")
                ok = False
        missing = set(src.fields) - set(dst.fields)
        if missing:
            print(f"FAIL: metadata lost: {sorted(missing)}")
            ok = False
        file_type = int(dst.fields["general.file_type"].parts[-1][0])
        if file_type != 15:
            print(f"FAIL: general.file_type is {file_type}, not 15 (Q4_K_M)")
            ok = False
        g = run([a.bin, "run", "-m", out, "-p", "Once upon a time", "-n", "8", "--temp", "0"])
        print(f"run: exit {g.returncode}: {g.stdout.strip()!r}")
        if g.returncode != 0 or not g.stdout.strip():
            print(f"FAIL: the quantized model does not run: {g.stderr.strip()}")
            ok = False
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
