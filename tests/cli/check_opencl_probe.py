#!/usr/bin/env python3
"""The OpenCL plugin's probe through `polystack devices`, on the machine's ICD loader.

- With a driver installed (PoCL in CI), every OpenCL device is listed with the facts the issue
  names: platform, device and OpenCL C versions, compute units, subgroups, fp16, integer dot
  products, and the UUID and PCI address extensions (reported, or "not reported").
- A CPU driver is never the default device, and `run -v` says why.
- The three reasons for no device, each precise: a loader that cannot be loaded (a broken
  libOpenCL.so.1 first on the library path), a loader without any driver (OCL_ICD_VENDORS at an
  empty folder), and a driver without devices (PoCL with POCL_DEVICES=none).
- `run --device opencl:0` with no driver fails with one line naming the device and the reason,
  never running elsewhere.
- Program binaries: the first run on opencl:0 keeps them under $XDG_CACHE_HOME/polystack/opencl;
  a second run gives the same text from them; entries overwritten with garbage are rebuilt (the
  same text again, the entries valid binaries once more), never a crash, and an older source's
  entry for the same program and device is removed when a new one is written.

Exits 77 (skipped) when the plugin was not built next to the binary.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77


def devices(binary, env):
    out = subprocess.run([binary, "devices", "--json"], capture_output=True, text=True, env=env,
                         timeout=60)
    if out.returncode != 0:
        raise SystemExit(f"devices --json failed ({out.returncode}): {out.stderr.strip()}")
    return json.loads(out.stdout)


def opencl(report):
    return next(a for a in report["apis"] if a["api"] == "opencl")


FACTS = ["platform", "device version", "OpenCL C", "compute units", "largest buffer",
         "subgroups", "fp16 arithmetic", "integer dot product", "UUID (cl_khr_device_uuid)",
         "PCI bus (cl_khr_pci_bus_info)"]


def program_cache(args, env):
    problems = []
    with tempfile.TemporaryDirectory() as tmp:
        cache_env = dict(env, XDG_CACHE_HOME=tmp)
        folder = os.path.join(tmp, "polystack", "opencl")
        cmd = [args.bin, "run", "-m", args.model, "-p", "Once upon a time", "-n", "12",
               "--temp", "0", "--device", "opencl:0", "--no-self-check"]
        texts = []
        for step in ("cold", "from the cache", "after corruption"):
            if step == "after corruption":
                for f in entries:
                    with open(os.path.join(folder, f), "wb") as out:
                        out.write(b"\x7fELF not a program binary")
                    # An entry an older source left for the same program and device: replaced.
                    stale = f.rsplit("-", 1)[0] + "-0000000000000000.bin"
                    with open(os.path.join(folder, stale), "wb") as out:
                        out.write(b"an older build")
            out = subprocess.run(cmd, capture_output=True, text=True, env=cache_env, timeout=300)
            entries = sorted(f for f in os.listdir(folder) if f.endswith(".bin")) \
                if os.path.isdir(folder) else []
            print(f"program cache, {step}: rc={out.returncode} entries={entries}")
            if out.returncode != 0:
                problems.append(f"run on opencl:0 ({step}) failed: {out.stderr[-400:]}")
                return problems
            texts.append(out.stdout)
            if not any(e.startswith("ops-") for e in entries) or \
                    not any(e.startswith("weights_") for e in entries):
                problems.append(f"{step}: no program binaries kept in {folder}: {entries}")
            if any(e.endswith("-0000000000000000.bin") for e in entries):
                problems.append(f"{step}: an older source's entry was kept: {entries}")
            for e in entries:
                if os.path.getsize(os.path.join(folder, e)) < 64:
                    problems.append(f"{step}: {e} is not a program binary")
        if len(set(texts)) != 1:
            problems.append(f"the text differs between the runs: {texts}")
    return problems


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    plugin = os.path.join(os.path.dirname(args.bin), "libpolystack-backend-opencl.so")
    if not os.path.exists(plugin):
        print(f"skipped: {plugin} was not built (no OpenCL headers or ICD loader)")
        return SKIP
    problems = []
    env = dict(os.environ)
    report = devices(args.bin, env)
    api = opencl(report)
    cl_devices = [d for d in report["devices"] if d["api"] == "opencl"]
    print(f"opencl: built={api['built']} devices={api['devices']} reason={api['reason']!r}")
    if not api["built"]:
        problems.append("the plugin exists but the opencl API is not reported as built")
    if not cl_devices:
        print("skipped: no OpenCL device here (install pocl-opencl-icd)")
        return SKIP
    for d in cl_devices:
        facts = dict(d.get("facts", []))
        print(f"  {d['id']}: {d['name']} ({d['kind']}, {d['vendor']}) {d.get('runtime_version')!r}")
        for f in FACTS:
            if not facts.get(f):
                problems.append(f"{d['id']} lacks the fact {f!r}: {facts}")
        if not d.get("driver_version") or not d.get("runtime_version", "").startswith("OpenCL "):
            problems.append(f"{d['id']}: no driver or OpenCL version: {d}")

    model_ok = os.path.exists(args.model)
    if model_ok and any(d["kind"] == "cpu" for d in cl_devices):
        out = subprocess.run([args.bin, "run", "-m", args.model, "-p", "Once", "-n", "2", "-v"],
                             capture_output=True, text=True, env=env, timeout=120)
        line = next((l for l in out.stderr.splitlines() if "not chosen: opencl:0" in l), "")
        print(f"default run: rc={out.returncode}; {line}")
        if out.returncode != 0 or "running on cpu" not in out.stderr or \
                "a CPU driver of opencl" not in line:
            problems.append(f"a CPU driver of opencl is not passed over with its reason: "
                            f"{out.stderr[-600:]}")

    with tempfile.TemporaryDirectory() as tmp:
        # A broken loader first on the library path.
        broken = os.path.join(tmp, "lib")
        os.makedirs(broken)
        with open(os.path.join(broken, "libOpenCL.so.1"), "w") as f:
            f.write("not a library\n")
        cases = [
            ("a broken loader", dict(env, LD_LIBRARY_PATH=broken),
             "the OpenCL ICD loader libOpenCL.so.1 could not be loaded"),
            ("no driver", dict(env, OCL_ICD_VENDORS=os.path.join(tmp, "empty")),
             "the OpenCL loader found no driver (ICD) (OCL_ICD_VENDORS is set to"),
            ("a driver without devices", dict(env, POCL_DEVICES="none"),
             "OpenCL platform(s) (Portable Computing Language) but no devices"),
        ]
        os.makedirs(os.path.join(tmp, "empty"))
        for what, case_env, want in cases:
            a = opencl(devices(args.bin, case_env))
            detail = a.get("probe_detail") or a["reason"]
            print(f"{what}: devices={a['devices']} reason={detail!r}")
            if a["devices"] != 0 or want not in detail:
                problems.append(f"{what}: expected a reason with {want!r}, got {detail!r}")
        if model_ok:
            run_env = dict(env, OCL_ICD_VENDORS=os.path.join(tmp, "empty"))
            out = subprocess.run([args.bin, "run", "-m", args.model, "-p", "Once", "-n", "2",
                                  "--device", "opencl:0"], capture_output=True, text=True,
                                 env=run_env, timeout=120)
            err = out.stderr.strip().splitlines()
            print(f"run --device opencl:0 without a driver: rc={out.returncode}: {err[-1:]}")
            if out.returncode == 0 or not err or "opencl" not in err[-1] or \
                    "no driver (ICD)" not in err[-1] or out.stdout.strip():
                problems.append(f"run --device opencl:0 without a driver did not refuse in one "
                                f"line: rc={out.returncode} {out.stderr[-400:]!r}")

    if model_ok:
        problems += program_cache(args, env)

    for p in problems:
        print(f"FAIL: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
