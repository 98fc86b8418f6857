#!/usr/bin/env python3
"""The Vulkan plugin's probe through `polystack devices`, on the machine's real loader.

- With the drivers installed (lavapipe at least), every Vulkan device is listed with the facts
  the backend decides on, and the default device stays the CPU backend.
- With the loader pointed at a driver manifest that does not exist, the report says that no
  driver (ICD) was found, and where the loader was told to look.
- A Vulkan device is never the default (its kernels are checked on lavapipe only) and says why;
  `run --device vulkan:0` runs there and says so (or, where the device cannot run models, fails
  with one line naming it, never running silently elsewhere).
- With no driver, `run` still works on the CPU and says so.

Exits 77 (skipped) when the plugin was not built next to the binary.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77


def devices(binary: str, env: dict) -> dict:
    out = subprocess.run([binary, "devices", "--json"], capture_output=True, text=True, env=env,
                         timeout=60)
    if out.returncode != 0:
        raise SystemExit(f"devices --json failed ({out.returncode}): {out.stderr.strip()}")
    return json.loads(out.stdout)


def vulkan_api(report: dict) -> dict:
    return next(a for a in report["apis"] if a["api"] == "vulkan")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True, help="a valid model for the run case (skipped if absent)")
    args = ap.parse_args()
    plugin = os.path.join(os.path.dirname(args.bin), "libpolystack-backend-vulkan.so")
    if not os.path.exists(plugin):
        print(f"skipped: {plugin} was not built (no Vulkan headers or glslc)")
        return SKIP

    problems = []
    env = dict(os.environ)
    report = devices(args.bin, env)
    api = vulkan_api(report)
    vk_devices = [d for d in report["devices"] if d["api"] == "vulkan"]
    print(f"vulkan: built={api['built']} devices={api['devices']} reason={api['reason']!r}")
    for d in vk_devices:
        print(f"  {d['id']}: {d['name']} ({d['kind']}, {d['vendor']}) driver {d.get('driver_version')!r}")
    if not api["built"]:
        problems.append("the plugin exists but the vulkan API is not reported as built")
    if not vk_devices:
        if not api["reason"]:
            problems.append("no Vulkan device and no reason given")
        print("note: no Vulkan device on this machine (install mesa-vulkan-drivers for lavapipe)")
    for d in vk_devices:
        for fact in ("Vulkan API used", "subgroup size", "fp16 arithmetic", "int8 arithmetic",
                     "16-bit storage", "8-bit storage", "cooperative matrix", "memory budget"):
            if fact not in d["facts"]:
                problems.append(f"{d['id']}: fact '{fact}' missing")
        if not d.get("uuid"):
            problems.append(f"{d['id']}: no UUID")
        if not d.get("memory_total"):
            problems.append(f"{d['id']}: no memory size")
        if "llvmpipe" in d["name"] and d["kind"] != "cpu":
            problems.append(f"{d['id']}: lavapipe reported as {d['kind']}, not cpu")
    if report["default"]["device"] != "cpu" and not any(
            d["kind"] in ("discrete gpu", "integrated gpu") for d in vk_devices):
        problems.append(f"default device {report['default']['device']} is not the CPU backend "
                        "although no GPU was found")

    # No driver: the loader is told to read a manifest that does not exist.
    with tempfile.TemporaryDirectory() as tmp:
        missing = os.path.join(tmp, "no-such-icd.json")
        env_none = dict(env, VK_DRIVER_FILES=missing, VK_ICD_FILENAMES=missing)
        none = vulkan_api(devices(args.bin, env_none))
        print(f"with no driver: devices={none['devices']} reason={none['reason']!r}")
        if none["devices"] != 0:
            problems.append("devices reported with no driver manifest")
        if "no driver" not in none["reason"] or missing not in none["reason"]:
            problems.append(f"no-driver reason does not say so or where: {none['reason']!r}")

    # A CPU driver (lavapipe) is never the default, and the default says why it passed it over.
    for d in vk_devices:
        if d["kind"] != "cpu" or not d.get("usable"):
            continue
        if report["default"]["device"] == d["id"]:
            problems.append(f"{d['id']} is a CPU driver but was chosen by default")
        why = [l for l in report["default"]["passed_over"] if l.startswith(d["id"] + " ")]
        if not why or "a CPU driver of vulkan" not in why[0]:
            problems.append(f"{d['id']}: the default does not say why it passed it over: {why}")

    if not os.path.exists(args.model):
        print(f"note: {args.model} is absent, so the run cases are not checked")
        return report_problems(problems)

    # No driver: `run` still works, on the CPU, and says so.
    with tempfile.TemporaryDirectory() as tmp:
        missing = os.path.join(tmp, "no-such-icd.json")
        env_none = dict(env, VK_DRIVER_FILES=missing, VK_ICD_FILENAMES=missing)
        run = subprocess.run([args.bin, "run", "-m", args.model, "-p", "Once", "-n", "4",
                              "--temp", "0"], capture_output=True, text=True, env=env_none,
                             timeout=120)
        print(f"run with no driver: exit {run.returncode}, stdout {run.stdout!r}")
        if run.returncode != 0 or not run.stdout.strip():
            problems.append(f"run with no Vulkan driver failed: {run.stderr.strip()[-200:]}")
        if "running on cpu" not in run.stderr:
            problems.append("run with no Vulkan driver does not say it runs on the CPU")

    # --device vulkan:0: runs there when usable, and says so; otherwise one error line naming it.
    run = subprocess.run([args.bin, "run", "-m", args.model, "-p", "hi", "-n", "1",
                          "--device", "vulkan:0"], capture_output=True, text=True, env=env,
                         timeout=120)
    usable = any(d["id"] == "vulkan:0" and d.get("usable") for d in vk_devices)
    if usable:
        print(f"run --device vulkan:0: exit {run.returncode}, stdout {run.stdout!r}")
        if run.returncode != 0 or not run.stdout.strip():
            problems.append(f"run --device vulkan:0 failed: {run.stderr.strip()[-300:]}")
        if "running on vulkan:0" not in run.stderr:
            problems.append("run --device vulkan:0 does not say it runs on vulkan:0")
    else:
        lines = [l for l in run.stderr.splitlines() if l.strip()]
        print(f"run --device vulkan:0: exit {run.returncode}, stderr {lines[-1:]!r}")
        if run.returncode == 0:
            problems.append("run --device vulkan:0 succeeded on an unusable device")
        if not lines or "vulkan:0" not in lines[-1]:
            problems.append("run --device vulkan:0: the error line does not name vulkan:0")
        if run.stdout:
            problems.append("run --device vulkan:0 printed generated text")

    return report_problems(problems)


def report_problems(problems: list) -> int:
    for p in problems:
        print(f"FAIL: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
