#!/usr/bin/env python3
"""Mixtures of experts through the binary: where the routed experts run and the text that comes
out, and the errors a user meets.

- A qwen3moe model (random weights, decisive routing, 4 layers of 16 experts, 4 per token) is
  written by scripts/make_llama_gguf.py.
- `inspect` names the experts; `run -v` on the CPU generates greedy text.
- On vulkan:0 (lavapipe; skipped without it): with room for everything the experts follow their
  layers; under a POLYSTACK_DEVICE_MEMORY cap that holds the layers without their experts,
  every layer goes to the GPU and the experts of the first layers stay on the CPU, as many as
  the budget requires and no more (checked against `doctor -m --json`'s costs); --cpu-moe and
  --n-cpu-moe 2 under -ngl all put those layers' experts on the CPU, and --strict --cpu-moe
  runs too. The text equals the CPU's every time. Under the cap --strict is refused (non-zero exit):
  auto fit would leave experts on the CPU.
- `doctor -m --json` gives each layer's experts' bytes.
- gpt-oss (attention sinks, router and expert biases): `run -v` names its features; on vulkan:0
  whole, with --cpu-moe and with --n-cpu-moe 1 the text equals the CPU's. Without its sliding
  window, or without a layer's sinks: a one-line error (exit 1).
- --n-cpu-moe -1 / x: usage errors (exit 2). A qwen3moe file without expert_count, and a Mixtral
  converted with one tensor per expert (an older layout): one-line errors naming what is wrong
  (exit 1).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import make_llama_gguf  # noqa: E402

SKIP = 77
problems = []


def fail(msg):
    print("FAIL:", msg)
    problems.append(msg)


def run(args, env=None, timeout=300):
    e = dict(os.environ)
    e.update(env or {})
    r = subprocess.run(args, capture_output=True, env=e, timeout=timeout)
    # stdout stays bytes (a random model's text need not be UTF-8); stderr is our own lines.
    r.stderr = r.stderr.decode("utf-8", errors="replace")
    return r


def plan_lines(r):
    return [l for l in r.stderr.splitlines() if l.startswith("polystack: plan:")
            or l.startswith("polystack:   routed experts")]


def layers_text(first, last):
    return f"layer {first}" if first == last else f"layers {first}-{last}"


def check_vulkan(b, gen, model, cpu_text):
    """The experts' placement on vulkan:0 (lavapipe) and the text, which must be the CPU's."""
    def generate(name, flags, env=None):
        r = run([b] + gen + ["-v", "--device", "vulkan:0"] + flags, env)
        if r.returncode != 0:
            fail(f"{name}: exit {r.returncode}: {r.stderr[-600:]}")
            return []
        plans = plan_lines(r)
        print(f"{name}:", *plans, sep="\n  ")
        if r.stdout != cpu_text:
            fail(f"{name}: text differs from the CPU's:\n{r.stdout!r}\n{cpu_text!r}")
        return plans

    # Room for everything: the experts stay with their layers.
    plans = generate("no cap", [])
    if any("routed experts" in l for l in plans) or not any(
            "everything on vulkan:0" in l for l in plans):
        fail(f"no cap: the experts should follow their layers onto vulkan:0: {plans}")

    # A cap that holds every layer without its experts but not whole: the layers all go to the
    # GPU, the experts of the first layers stay on the CPU, and the GPU could not also take the
    # experts of the last layer left on the CPU (its need plus those bytes exceed its budget,
    # the cap less a tenth).
    cap = 24 << 20
    env = {"POLYSTACK_DEVICE_MEMORY": f"vulkan:0={cap}B"}
    r = run([b, "doctor", "-m", model, "--api", "vulkan", "--json"], env)
    try:
        plan = json.loads(r.stdout.decode())["placement"]["vulkan:0"]
    except (json.JSONDecodeError, KeyError) as e:
        fail(f"doctor --json under the cap: {e}: {r.stderr[-300:]}")
        return
    units = [u for u in plan["units"] if u["layer"] >= 0 and u["unit"].startswith("layer")]
    on_cpu = [u["layer"] for u in units if u.get("experts_device") == "cpu"]
    gpu = plan["devices"][0]
    budget = gpu["free_bytes"] - gpu["headroom_bytes"]
    if any(u["device"] != "vulkan:0" for u in plan["units"]):
        fail(f"capped: not every unit on vulkan:0: {plan['summary']}")
    elif not on_cpu or on_cpu != list(range(len(on_cpu))) or len(on_cpu) == len(units):
        fail(f"capped: the experts on the CPU should be those of the first layers, not all: "
             f"{on_cpu} ({plan['summary']})")
    elif gpu["need_bytes"] + units[on_cpu[-1]]["experts_bytes"] <= budget:
        fail(f"capped: the experts of layer {on_cpu[-1]} would still fit on vulkan:0 "
             f"({gpu['need_bytes']} + {units[on_cpu[-1]]['experts_bytes']} <= {budget})")
    else:
        want = f"the routed experts of {layers_text(on_cpu[0], on_cpu[-1])} on cpu"
        plans = generate("capped", [], env)
        if not any(want in l for l in plans):
            fail(f"capped: run's plan does not say '{want}': {plans}")

    for name, flags, last, note in [
            ("--cpu-moe", ["-ngl", "all", "--cpu-moe"], 3, "--cpu-moe"),
            ("--n-cpu-moe 2", ["-ngl", "all", "--n-cpu-moe", "2"], 1, "--n-cpu-moe 2")]:
        plans = generate(name, flags)
        want = f"the routed experts of {layers_text(0, last)} on cpu"
        if not any(want in l for l in plans) or not any(note in l for l in plans):
            fail(f"{name}: the plan should say '{want}' and '{note}': {plans}")

    # --strict refuses experts that auto fit leaves on the CPU, not those --cpu-moe puts there.
    generate("--strict --cpu-moe", ["--strict", "--cpu-moe"])
    r = run([b] + gen + ["--device", "vulkan:0", "--strict"], env)
    if r.returncode == 0 or "--strict: auto fit leaves the routed experts" not in r.stderr:
        fail(f"--strict under the cap: exit {r.returncode}, {r.stderr.strip()[-300:]}")


def check_gpt_oss(b, tmp, has_vk):
    model = os.path.join(tmp, "gpt-oss.gguf")
    p = make_llama_gguf.ModelParams(n_embd=128, n_layer=4, arch="gpt-oss", head_dim_override=32,
                                    n_expert=8, n_expert_used=2, n_ff_exp=128, sliding_window=6,
                                    seed=9)
    make_llama_gguf.write_model(model, p)
    gen = ["run", "-m", model, "-p", "a b c d", "-n", "24", "--temp", "0", "--no-template", "-v"]
    cpu = run([b] + gen + ["--device", "cpu"])
    if cpu.returncode != 0 or not cpu.stdout:
        fail(f"gpt-oss on the CPU failed ({cpu.returncode}): {cpu.stderr[-600:]}")
        return
    for want in ("attention sinks", "sliding window of 6 positions on the even layers",
                 "softmax over the chosen gating", "clamped SwiGLU"):
        if want not in cpu.stderr:
            fail(f"gpt-oss: run -v does not say '{want}': {cpu.stderr[-800:]}")
    if has_vk:
        for name, flags in [("whole", []), ("--cpu-moe", ["-ngl", "all", "--cpu-moe"]),
                            ("--n-cpu-moe 1", ["-ngl", "all", "--n-cpu-moe", "1"])]:
            r = run([b] + gen + ["--device", "vulkan:0"] + flags)
            if r.returncode != 0 or r.stdout != cpu.stdout:
                fail(f"gpt-oss on vulkan:0 ({name}): exit {r.returncode}, text "
                     f"{r.stdout!r} against the CPU's {cpu.stdout!r}: {r.stderr[-400:]}")
            else:
                print(f"gpt-oss on vulkan:0 ({name}): the CPU's text;",
                      *plan_lines(r), sep="\n  ")

    def broken(name, change):
        path = os.path.join(tmp, name + ".gguf")
        q = make_llama_gguf.ModelParams(arch="gpt-oss", head_dim_override=32, n_expert=4,
                                        n_expert_used=2, sliding_window=4, seed=5)
        change(q)
        make_llama_gguf.write_model(path, q)
        return path

    orig_specs = make_llama_gguf.tensor_specs_new_arch
    make_llama_gguf.tensor_specs_new_arch = lambda q: [
        s for s in orig_specs(q) if s.name != "blk.1.attn_sinks.weight"]
    try:
        no_sinks = broken("no_sinks", lambda q: None)
    finally:
        make_llama_gguf.tensor_specs_new_arch = orig_specs
    orig_meta = make_llama_gguf.write_new_arch_metadata
    def no_window_meta(writer, q):
        window, q.sliding_window = q.sliding_window, 0
        try:
            orig_meta(writer, q)
        finally:
            q.sliding_window = window
    make_llama_gguf.write_new_arch_metadata = no_window_meta
    try:
        no_window = broken("no_window", lambda q: None)
    finally:
        make_llama_gguf.write_new_arch_metadata = orig_meta
    for path, want in [(no_sinks, "blk.1.attn_sinks.weight"), (no_window, "sliding_window")]:
        r = run([b, "run", "-m", path, "-p", "a", "-n", "2", "--no-template"])
        lines = r.stderr.strip().splitlines()
        if r.returncode != 1 or want not in r.stderr or len(lines) != 1:
            fail(f"gpt-oss without {want}: exit {r.returncode}: {r.stderr[-400:]}")
        else:
            print(f"gpt-oss without {want}:", lines[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    a = ap.parse_args()
    b = a.bin
    with tempfile.TemporaryDirectory(prefix="polystack-moe-") as tmp:
        model = os.path.join(tmp, "qwen3moe.gguf")
        p = make_llama_gguf.ModelParams(n_embd=256, n_ff=512, n_layer=4, arch="qwen3moe",
                                        head_dim_override=64, n_expert=16, n_expert_used=4,
                                        n_ff_exp=256, seed=7)
        make_llama_gguf.write_model(model, p)
        gen = ["run", "-m", model, "-p", "a b c d", "-n", "24", "--temp", "0", "--no-template"]

        r = run([b, "inspect", model])
        if b"expert_count" not in r.stdout:
            fail(f"inspect does not show expert_count:\n{r.stdout[-600:]}")

        cpu = run([b] + gen + ["-v", "--device", "cpu"])
        if cpu.returncode != 0 or not cpu.stdout:
            fail(f"run on the CPU failed ({cpu.returncode}): {cpu.stderr[-600:]}")
            return report()
        feature = [l for l in cpu.stderr.splitlines() if "mixture of experts: 4 of 16" in l]
        if not feature:
            fail("run -v does not state the experts (4 of 16)")

        devices = run([b, "devices", "--json"])
        has_vk = devices.returncode == 0 and any(
            d["id"] == "vulkan:0" for d in json.loads(devices.stdout)["devices"])
        if has_vk:
            check_vulkan(b, gen, model, cpu.stdout)
        else:
            print("vulkan:0 absent: the split cases are skipped")

        r = run([b, "doctor", "-m", model, "--json"])
        try:
            doc = json.loads(r.stdout.decode())
            text = json.dumps(doc)
            if "experts_bytes" not in text:
                fail("doctor --json gives no experts_bytes")
        except json.JSONDecodeError:
            fail(f"doctor --json is not JSON: {r.stdout[:300]} {r.stderr[-300:]}")

        check_gpt_oss(b, tmp, has_vk)

        for bad in ("-1", "x"):
            r = run([b] + gen + ["--n-cpu-moe", bad])
            if r.returncode != 2 or "--n-cpu-moe" not in r.stderr:
                fail(f"--n-cpu-moe {bad}: exit {r.returncode}, {r.stderr.strip()[-300:]}")

        no_count = os.path.join(tmp, "no_count.gguf")
        q = make_llama_gguf.ModelParams(arch="qwen3moe", head_dim_override=32, n_expert=4,
                                        n_expert_used=2, seed=3)
        orig = make_llama_gguf.write_expert_metadata
        make_llama_gguf.write_expert_metadata = lambda writer, p: None
        try:
            make_llama_gguf.write_model(no_count, q)
        finally:
            make_llama_gguf.write_expert_metadata = orig
        r = run([b] + gen[:1] + ["-m", no_count] + gen[3:])
        if r.returncode != 1 or "expert_count" not in r.stderr or r.stderr.count("\n") > 2:
            fail(f"qwen3moe without expert_count: exit {r.returncode}: {r.stderr[-400:]}")

        split = os.path.join(tmp, "mixtral_split.gguf")
        m = make_llama_gguf.ModelParams(n_expert=2, n_expert_used=1, seed=4)
        orig_specs = make_llama_gguf.expert_specs

        def per_expert(p, b_, wtype):
            out = []
            for s in orig_specs(p, b_, wtype):
                if s.name.endswith("_exps.weight"):
                    for e in range(p.n_expert):
                        name = s.name.replace("_exps.weight", f".{e}.weight")
                        out.append(make_llama_gguf.TensorSpec(
                            name, s.shape[1:], s.qtype, lambda rng, s=s: s.make(rng)[0]))
                else:
                    out.append(s)
            return out
        make_llama_gguf.expert_specs = per_expert
        try:
            m.routing = "random"
            make_llama_gguf.write_model(split, m)
        finally:
            make_llama_gguf.expert_specs = orig_specs
        r = run([b] + gen[:1] + ["-m", split] + gen[3:])
        if r.returncode != 1 or "one tensor per expert" not in r.stderr:
            fail(f"Mixtral with one tensor per expert: exit {r.returncode}: {r.stderr[-400:]}")
        else:
            print("per-expert layout:", r.stderr.strip().splitlines()[-1])
    return report()


def report():
    if problems:
        print(f"{len(problems)} problem(s)")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
