#!/usr/bin/env python3
"""One model across vulkan:0 (lavapipe) and the CPU through the binary: auto fit under
POLYSTACK_DEVICE_MEMORY caps, the plan line, per-op fallback, --strict, bench -ngl lists and the
flags' errors.

- Auto fit: the unit costs come from `doctor -m --json`; for caps that hold everything, the
  output and k of the last layers (every k), and not even the output, the plan `run` prints is
  the one this script derives from the costs by the stated rule (a tenth of the free memory as
  headroom, at most 512 MiB; the output first, then the layers from the last), and the logits
  of each run agree with the CPU's; greedy text is identical.
- A model that fits nowhere, -ngl all beyond the cap, and --strict with layers left on the CPU
  are one-line errors naming the sizes.
- POLYSTACK_TEST_FAULT=refuse:rms_norm makes vulkan:0 refuse one op: the model still runs,
  with rms_norm on the CPU, the same text, and a fallback line naming the op and the reason;
  with --strict it is an error naming the op.
- `run -v` prints the placement per device and the bytes copied per decode step.
- `bench -ngl 0,2,all` prints a row per -ngl with the split in the device column.
- Malformed -ngl, --split-mode, --tensor-split, --main-gpu on the CPU (--strict; a note
  without) and a malformed
  POLYSTACK_DEVICE_MEMORY fail in one line.

Exits 77 (skipped) without the Vulkan plugin or its device.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

SKIP = 77
MiB = 1 << 20
problems = []


def fail(msg):
    print("FAIL:", msg)
    problems.append(msg)


def run(args, env, timeout=300):
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)


def lines(r, prefix):
    return [l[len(prefix):] for l in r.stderr.splitlines() if l.startswith(prefix)]


def one_line_error(r, what, contains=()):
    errs = lines(r, "polystack: error: ")
    if r.returncode == 0 or len(errs) != 1:
        fail(f"{what}: expected one error line and a non-zero exit, got rc={r.returncode}: "
             f"{r.stderr.strip()[-400:]}")
        return ""
    for c in contains:
        if c not in errs[0]:
            fail(f"{what}: the error does not say '{c}': {errs[0]}")
    print(f"{what}: {errs[0]}")
    return errs[0]


def human(n):
    """human_bytes as the plan prints it."""
    if n >= 1 << 30:
        return f"{n / (1 << 30):.1f} GiB"
    if n >= MiB:
        return f"{n / MiB:.1f} MiB"
    if n >= 1024:
        return f"{n / 1024:.0f} KiB"
    return f"{n} B"


def units_text(where, dev):
    """'input + layers 0-2 + output' for the units placed on dev; 'everything' for all."""
    n = len(where)
    if all(w == dev for w in where):
        return "everything"
    parts = []
    if where[0] == dev:
        parts.append("input")
    u = 1
    while u < n - 1:
        if where[u] != dev:
            u += 1
            continue
        v = u
        while v + 1 < n - 1 and where[v + 1] == dev:
            v += 1
        parts.append(f"layer {u - 1}" if u == v else f"layers {u - 1}-{v - 1}")
        u = v + 1
    if where[-1] == dev:
        parts.append("output")
    return " + ".join(parts)


def expected_plan(units, compute, cap):
    """The auto fit rule, derived here from the costs: (devices per unit, gpu need)."""
    n = len(units)
    cost = [u["weights_bytes"] + u["kv_bytes"] for u in units]
    budget = cap - min(cap // 10, 512 * MiB)
    where = ["cpu"] * n
    need = 0
    for u in [n - 1] + list(range(n - 2, 0, -1)) + [0]:
        extra = cost[u] - (units[0]["shared_with_output_bytes"] if u == 0 and where[-1] != "cpu"
                           else 0)
        trial = need + extra + (compute if need == 0 else 0)
        if trial > budget:
            break
        where[u] = "vulkan:0"
        need = trial
    return where, need


def logits(binary, model, tokens, out, env, extra):
    # The default context and batch, as doctor -m plans for.
    r = run([binary, "logits", "-m", model, "--tokens", " ".join(map(str, tokens)), "-o", out]
            + extra, env)
    if r.returncode != 0:
        return r, None
    return r, np.fromfile(out, dtype="<f4").astype(np.float64)


def rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    if not os.path.exists(args.model):
        print(f"skipped: {args.model} is absent")
        return SKIP
    b, model = args.bin, args.model
    tmp = tempfile.mkdtemp()
    env = dict(os.environ, XDG_CACHE_HOME=os.path.join(tmp, "cache"))
    env.pop("POLYSTACK_DEVICE_MEMORY", None)
    env.pop("POLYSTACK_TEST_FAULT", None)
    env.pop("POLYSTACK_DEVICE", None)
    d = run([b, "devices", "--json"], env)
    if d.returncode != 0 or '"vulkan:0"' not in d.stdout:
        print("skipped: no vulkan:0 here")
        return SKIP
    vk = ["--device", "vulkan:0", "--no-self-check"]

    # The costs, as doctor -m reports them (the default context and batch, as run uses).
    r = run([b, "doctor", "-m", model, "--api", "vulkan", "--json"], env)
    try:
        plan0 = json.loads(r.stdout)["placement"]["vulkan:0"]
    except (ValueError, KeyError) as e:
        fail(f"doctor -m --json has no placement for vulkan:0 ({e}): {r.stdout[-300:]}")
        return 1
    units, compute = plan0["units"], plan0["compute_bytes"]
    n_layer = len(units) - 2
    whole = plan0["whole_model_bytes"]
    if whole != sum(u["weights_bytes"] + u["kv_bytes"] for u in units) + compute - \
            units[0]["shared_with_output_bytes"]:
        fail(f"whole_model_bytes {whole} is not the sum of the units and the compute buffer")
    print(f"{n_layer} layers, unit costs {[u['weights_bytes'] + u['kv_bytes'] for u in units]}, "
          f"compute {compute}, whole {whole}")

    tokens = [1, 403, 407, 261, 378, 432, 383, 286, 261]
    _, want = logits(b, model, tokens, os.path.join(tmp, "cpu.f32"), env, ["--device", "cpu"])
    prompt = ["-p", "Once upon a time", "-n", "24", "--temp", "0"]
    text_cpu = run([b, "run", "-m", model, "--device", "cpu"] + prompt, env).stdout

    # Caps: everything, the output plus k layers for each k, not even the output.
    def cap_for(gpu_bytes):
        return gpu_bytes * 10 // 9 + 16  # budget = cap - cap // 10 >= gpu_bytes
    cost = [u["weights_bytes"] + u["kv_bytes"] for u in units]
    caps = [2 * whole]
    for k in range(n_layer + 1):
        caps.append(cap_for(compute + cost[-1] + sum(cost[len(units) - 1 - k:len(units) - 1])))
    caps.append(cap_for(compute + cost[-1]) - 64 * 1024)
    seen = set()
    for cap in caps:
        where, need = expected_plan(units, compute, cap)
        gpu_part = units_text(where, "vulkan:0") if "vulkan:0" in where else ""
        seen.add(gpu_part)
        cenv = dict(env, POLYSTACK_DEVICE_MEMORY=f"vulkan:0={cap}")
        r, got = logits(b, model, tokens, os.path.join(tmp, f"cap{cap}.f32"), cenv, vk)
        plan = lines(r, "polystack: plan: ")
        if r.returncode != 0 or len(plan) != 1:
            fail(f"cap {cap}: rc={r.returncode}, plan lines {plan}: {r.stderr.strip()[-300:]}")
            continue
        plan = plan[0]
        if gpu_part:
            want_text = f"{gpu_part} on vulkan:0 ({human(need)} of {human(cap)} free by " \
                        f"POLYSTACK_DEVICE_MEMORY)"
        else:
            want_text = "everything on cpu"
        if not plan.startswith(want_text) or not plan.endswith(
                f"the whole model needs {human(whole)} (-ngl auto)"):
            fail(f"cap {cap}: plan '{plan}', expected it to start with '{want_text}'")
        cpu_part = units_text(where, "cpu") if "cpu" in where else ""
        if gpu_part and cpu_part and f", {cpu_part} on cpu (" not in plan:
            fail(f"cap {cap}: plan '{plan}' does not put {cpu_part} on cpu")
        err = rel(got, want)
        print(f"cap {human(cap)}: {plan}; logits vs cpu {err:.2e}")
        if not err < 5e-4:
            fail(f"cap {cap}: logits differ from the CPU's by {err:.2e}")
        if cap == caps[3]:  # a real split: greedy text as on the CPU
            t = run([b, "run", "-m", model] + vk + prompt, cenv)
            if t.returncode != 0 or t.stdout != text_cpu:
                fail(f"cap {cap}: greedy text differs: {t.stdout!r} vs {text_cpu!r}")
    if len(seen) < n_layer + 2:
        fail(f"the caps reached only {len(seen)} different plans: {sorted(seen)}")

    # Errors that name the sizes.
    tiny = dict(env, POLYSTACK_DEVICE_MEMORY="vulkan:0=100KiB,cpu=1MiB")
    one_line_error(run([b, "run", "-m", model] + vk + prompt, tiny), "fits nowhere",
                   ["the model does not fit", human(whole), "1.0 MiB free on cpu"])
    part = dict(env, POLYSTACK_DEVICE_MEMORY=f"vulkan:0={caps[2]}")
    one_line_error(run([b, "run", "-m", model] + vk + prompt + ["--strict"], part),
                   "--strict with layers left on the CPU", ["--strict: auto fit leaves", "on cpu"])
    one_line_error(run([b, "run", "-m", model] + vk + prompt + ["-ngl", "all"], part),
                   "-ngl all beyond the cap", ["-ngl all puts", "lower -ngl"])
    one_line_error(run([b, "run", "-m", model] + prompt, dict(env, POLYSTACK_DEVICE_MEMORY="cpu")),
                   "malformed POLYSTACK_DEVICE_MEMORY", ["POLYSTACK_DEVICE_MEMORY"])

    # One op refused by the device: it runs on the CPU, named with the device's reason.
    fenv = dict(env, POLYSTACK_TEST_FAULT="refuse:rms_norm")
    r = run([b, "run", "-m", model] + vk + prompt, fenv)
    fb = lines(r, "polystack: fallback: ")
    if r.returncode != 0 or r.stdout != text_cpu:
        fail(f"refused rms_norm: rc={r.returncode}, text {r.stdout!r}: {r.stderr[-300:]}")
    if fb != ["rms_norm ran on cpu instead of vulkan:0: refused for a test "
              "(POLYSTACK_TEST_FAULT=refuse:rms_norm)"]:
        fail(f"refused rms_norm: fallback lines {fb}")
    else:
        print("refused rms_norm:", fb[0])
    one_line_error(run([b, "run", "-m", model] + vk + prompt + ["--strict"], fenv),
                   "refused rms_norm under --strict", ["rms_norm", "vulkan:0", "--strict"])

    # run -v: the placement per device and the copies per decode step.
    r = run([b, "run", "-m", model] + vk + prompt + ["-ngl", "2", "-v"], env)
    detail = lines(r, "polystack: ")
    if r.returncode != 0 or not any(l.startswith("placement (-ngl 2)") for l in detail) or \
            not any(l.strip().startswith("vulkan:0") and f"layers {n_layer - 2}-{n_layer - 1}" in l
                    for l in detail) or \
            not any(l.startswith("copies between devices: ") for l in detail):
        fail(f"run -v -ngl 2: no placement table or copy line: {r.stderr[-600:]}")
    if r.stdout != text_cpu:
        fail(f"run -ngl 2: text differs: {r.stdout!r}")

    # bench -ngl list: one row per value, the split in the device column.
    r = run([b, "bench", "-m", model, "--device", "vulkan:0", "--no-self-check", "-ngl", "0,2,all",
             "-p", "8", "-n", "4", "-r", "1", "--json"], env)
    try:
        rows = json.loads(r.stdout)
        got = sorted({(x["n_gpu_layers"], x["device"]) for x in rows})
        want_rows = [("0", "cpu"), ("2", "vulkan:0+cpu"), ("all", "vulkan:0")]
        if got != want_rows:
            fail(f"bench -ngl 0,2,all: rows {got}, expected {want_rows}")
        else:
            print("bench -ngl 0,2,all:", got)
    except ValueError:
        fail(f"bench -ngl: no JSON: rc={r.returncode} {r.stderr[-300:]}")
    r = run([b, "bench", "-m", model, "--device", "vulkan:0", "--no-self-check", "-ngl", "0,all",
             "-p", "8", "-n", "0", "-r", "1"], env)
    table = [l for l in r.stdout.splitlines() if "pp8" in l]
    if r.returncode != 0 or len(table) != 2 or "| cpu " not in table[0] or \
            "| vulkan:0 " not in table[1] or "ngl" not in r.stdout:
        fail(f"bench -ngl table: {r.stdout[-600:]} {r.stderr[-300:]}")

    # Flags.
    for bad, what in ((["-ngl", "foo"], "auto, all or a count"), (["-ngl", "-1"], ""),
                      (["--split-mode", "row"], "not supported"), (["--split-mode", "x"], ""),
                      (["--tensor-split", "3,x"], "proportions"),
                      (["--device", "cpu", "--main-gpu", "0", "--strict"], "needs a GPU"),
                      (["--device", "cpu", "--tensor-split", "1,1", "--strict"], "needs a GPU")):
        r = run([b, "run", "-m", model] + prompt + bad, env)
        errs = [l for l in r.stderr.splitlines() if l.strip()]
        if r.returncode == 0 or (what and what not in r.stderr) or len(errs) > 3:
            fail(f"run {' '.join(bad)}: rc={r.returncode}: {r.stderr.strip()[-300:]}")
        else:
            print(f"run {' '.join(bad)}: {errs[-1] if errs else ''}")

    # Without --strict, GPU flags on a run that lands on the CPU are no-ops with a note.
    for flags, name in ((["--main-gpu", "0"], "--main-gpu"), (["--tensor-split", "1,1"],
                                                              "--tensor-split")):
        r = run([b, "run", "-m", model, "--device", "cpu"] + prompt + flags, env)
        if r.returncode != 0 or f"note: {name} has no effect: the model runs on the CPU" \
                not in r.stderr:
            fail(f"run --device cpu {' '.join(flags)}: rc={r.returncode}: {r.stderr[-300:]}")

    # doctor -m under a cap: a warning with the plan as its summary.
    r = run([b, "doctor", "-m", model, "--api", "vulkan", "--json"],
            dict(env, POLYSTACK_DEVICE_MEMORY=f"vulkan:0={caps[2]}"))
    try:
        mem = [c for c in json.loads(r.stdout)["checks"] if c["id"] == "vulkan.memory"]
        if len(mem) != 1 or mem[0]["status"] != "warn" or "on cpu" not in mem[0]["summary"]:
            fail(f"doctor -m under a cap: {mem}")
    except ValueError:
        fail(f"doctor -m --json under a cap: {r.stdout[-300:]}")

    if problems:
        print(f"{len(problems)} problem(s)")
        return 1
    print("all split checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
