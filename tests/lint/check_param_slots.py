#!/usr/bin/env python3
"""Ops' parameters are read and written only through graph/ops.h's typed structs: no source
outside graph/ (the builder that owns Tensor's parameter slots) names the slots, so no backend
reads a numbered slot, and the GPU kernels take their operation codes from
backend/kernel_codes.h rather than numbers of their own.

Usage: check_param_slots.py SOURCE_DIR (the repository's src/)
"""
import re
import sys
from pathlib import Path

SLOTS = re.compile(r"\b[if]params\b")
ALLOWED = {"graph/graph.cpp", "graph/ops.cpp", "graph/tensor.h"}
KERNEL_SUFFIXES = {".cpp", ".h", ".cu", ".cuh", ".comp", ".glsl", ".cl"}
# Numbers a kernel used to define for itself instead of taking the shared list.
OWN_CODES = re.compile(r"\b(?:const\s+uint|#define)\s+OP_[A-Z_]+\b|0x100u")


def main() -> int:
    src = Path(sys.argv[1])
    problems = []
    checked = 0
    for path in sorted(src.rglob("*")):
        if path.suffix not in KERNEL_SUFFIXES or not path.is_file():
            continue
        rel = path.relative_to(src).as_posix()
        text = path.read_text(encoding="utf-8", errors="replace")
        checked += 1
        for n, line in enumerate(text.splitlines(), 1):
            if rel not in ALLOWED and SLOTS.search(line):
                problems.append(f"{rel}:{n}: names a parameter slot: {line.strip()}")
            if rel.startswith("backends/") and OWN_CODES.search(line):
                problems.append(f"{rel}:{n}: an operation code of its own: {line.strip()}")
    for p in problems:
        print(p)
    print(f"{checked} sources checked, {len(problems)} problems")
    return 1 if problems or checked < 50 else 0


if __name__ == "__main__":
    sys.exit(main())
