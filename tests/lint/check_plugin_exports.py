#!/usr/bin/env python3
"""Each backend plugin exports its two entry points and nothing else, and carries only the
backend API: no part of the CPU backend, the graph builder or the runtime is linked into it.

A plugin is loaded into a process that already holds the runtime; a symbol it exported could
stand in for the runtime's own (or another plugin's) at load time, and a copy of the runtime's
code inside it would be a second, disagreeing copy of its state.

Usage: check_plugin_exports.py PLUGIN.so...  (exit 0 when every plugin passes)
"""
import re
import subprocess
import sys

ENTRY_POINTS = {"polystack_backend_create", "polystack_backend_abi"}
# Namespaces and classes of the layers above the backend API (src/CMakeLists.txt).
FORBIDDEN = re.compile(
    r"\bps::(?:cpu::|make_cpu_backend|register_builtin_backends|Graph::|Registry::|Scheduler::"
    r"|Engine::|Model::|ModelContext::|Session::|gguf::|ThreadPool::|Sampler::|server::)")


def nm(args, path):
    out = subprocess.run(["nm", *args, path], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"nm {' '.join(args)} {path} failed: {out.stderr.strip()}")
    return out.stdout.splitlines()


def check(path):
    problems = []
    exported = {line.split()[-1] for line in nm(["-D", "--defined-only"], path) if line.strip()}
    if exported != ENTRY_POINTS:
        extra = sorted(exported - ENTRY_POINTS)
        missing = sorted(ENTRY_POINTS - exported)
        if extra:
            problems.append(f"exports {len(extra)} symbols beyond its entry points, e.g. "
                            + ", ".join(extra[:5]))
        if missing:
            problems.append("does not export " + ", ".join(missing))
    symbols = nm(["-C"], path)
    ours = [s for s in symbols if " ps::" in s]
    if not ours:
        # A stripped plugin hides what it carries: the check below would prove nothing.
        problems.append("has no ps:: symbols in its symbol table (stripped?): cannot tell what "
                        "it links")
    carried = sorted({m.group(0) for s in ours if (m := FORBIDDEN.search(s))})
    if carried:
        problems.append("carries code above the backend API: " + ", ".join(carried))
    print(f"{path}: {len(exported)} exports, {len(ours)} ps:: symbols"
          + ("" if problems else ", ok"))
    for p in problems:
        print(f"  {p}")
    return not problems


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    results = [check(p) for p in sys.argv[1:]]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
