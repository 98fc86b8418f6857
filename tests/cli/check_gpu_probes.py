#!/usr/bin/env python3
"""The CUDA and HIP plugins' probes through `polystack devices` and `run --device`.

- The CUDA plugin links the CUDA runtime statically and never libcuda: it loads on any machine.
  Without an NVIDIA driver its report says exactly that (libcuda.so.1 not found); with one, it
  lists each GPU with its architecture and whether this build holds code for it.
- The HIP plugin links the ROCm runtime. Without an AMD GPU (no /dev/kfd) its report says so.
  A copy of the plugin whose runtime library is missing (its DT_NEEDED entry renamed) is
  reported as needing that library, named, with where it comes from.
- `run --device cuda:0` / `hip:0` on a machine without the device fails with one error line
  naming the reason; it never runs elsewhere silently.
- With a stand-in libcuda.so.1 (--fake-driver-dir) the probe lists its GPU with the facts the
  driver API gives (compute capability, memory, UUID, PCI bus id), whether this build holds
  code for it, and the precise reason when it cannot be used: a card older than any code in
  the build, a driver older than the runtime, no GPU at all. Opening it (the runtime finds no
  real driver behind the stand-in) fails with one error line.

The probes' words are advice only where the hardware is there (backend/hardware.h), so the
checks run on a fake machine (POLYSTACK_SYSROOT) whose PCI bus holds an NVIDIA and an AMD GPU;
tests/cli/check_cli.py covers the machine without them.

Exits 77 (skipped) when neither plugin was built next to the binary.
"""
import argparse
import ctypes
import json
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77


def devices(binary: str, env: dict = None) -> dict:
    out = subprocess.run([binary, "devices", "--json"], capture_output=True, text=True, timeout=120,
                         env=env)
    if out.returncode != 0:
        raise SystemExit(f"devices --json failed ({out.returncode}): {out.stderr.strip()}")
    return json.loads(out.stdout)


def api_report(report: dict, api: str) -> dict:
    return next(a for a in report["apis"] if a["api"] == api)


def needed_libraries(path: str) -> list:
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True)
    return [line.split("[", 1)[1].rstrip("]") for line in out.stdout.splitlines()
            if "(NEEDED)" in line]


def loadable(lib: str) -> bool:
    try:
        ctypes.CDLL(lib)
        return True
    except OSError:
        return False


def run_on(binary: str, device: str, model: str, env: dict = None) -> subprocess.CompletedProcess:
    return subprocess.run([binary, "run", "-m", model, "--device", device, "-p", "Once", "-n", "4"],
                          capture_output=True, text=True, timeout=300, env=env)


def check_fake_driver(binary: str, fake_dir: str, model: str, problems: list):
    """The probe's report of the stand-in driver's GPU, and its reasons when unusable."""
    def report(**fake) -> tuple:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = fake_dir + os.pathsep + env.get("LD_LIBRARY_PATH", "")
        env.update({k: str(v) for k, v in fake.items()})
        r = devices(binary, env)
        api = api_report(r, "cuda")
        return api, [d for d in r["devices"] if d["api"] == "cuda"], r, env

    api, gpus, r, env = report()
    print(f"fake driver: cuda reason={api['reason']!r} devices={[d['id'] for d in gpus]}")
    if len(gpus) != 1:
        problems.append(f"fake driver: expected one cuda device, got {gpus} ({api['reason']!r})")
        return
    d = gpus[0]
    print(f"  {json.dumps(d, sort_keys=True)}")
    want = {"id": "cuda:0", "name": "Fake NVIDIA H200", "vendor": "NVIDIA", "kind": "discrete gpu",
            "architecture": "sm_90", "memory_total": 141 << 30, "memory_free": 140 << 30,
            "uuid": "GPU-00102030-4050-6070-8090-a0b0c0d0e0f0"}
    for k, v in want.items():
        if d.get(k) != v:
            problems.append(f"fake driver: {k} is {d.get(k)!r}, expected {v!r}")
    facts = d.get("facts", {})
    if d.get("pci_bus_id") != "0000:4E:00.0":
        problems.append(f"fake driver: pci_bus_id is {d.get('pci_bus_id')!r}")
    for k, v in {"compute capability": "9.0", "multiprocessors": "132"}.items():
        if facts.get(k) != v:
            problems.append(f"fake driver: fact {k!r} is {facts.get(k)!r}, expected {v!r}")
    if not d.get("driver_version", "").startswith("CUDA 13.0"):
        problems.append(f"fake driver: driver_version {d.get('driver_version')!r}")
    if not d.get("runtime_version", "").startswith("CUDA "):
        problems.append(f"fake driver: runtime_version {d.get('runtime_version')!r}")
    if "driver needed" not in facts:
        problems.append("fake driver: the report does not say which driver the runtime needs")
    kernels = facts.get("kernels in this build", "")
    if d["usable"]:
        if not (kernels.startswith("machine code for sm_90") or kernels.startswith("PTX")):
            problems.append(f"fake driver: usable, but kernels in this build: {kernels!r}")
        # The stand-in's runtime cannot run kernels: its self-check fails, and the default
        # policy passes it over with that reason.
        if r["default"]["device"] == "cuda:0":
            problems.append("fake driver: cuda:0 became the default device")
        why = [l for l in r["default"]["passed_over"] if l.startswith("cuda:0 ")]
        if not why or "self-check failed" not in why[0] or "cannot select the device" not in why[0]:
            problems.append(f"fake driver: the default does not say why cuda:0 was passed over: "
                            f"{why}")
    elif not d.get("unusable_reason", "").startswith("this card is sm_90"):
        problems.append(f"fake driver: unusable for another reason: {d.get('unusable_reason')!r}")

    # A Volta card: no CUDA 13 build holds code for it.
    _, gpus, _, _ = report(FAKE_CUDA_CC=70)
    why = gpus[0].get("unusable_reason", "") if gpus else ""
    print(f"fake driver, sm_70: {why!r}")
    if not (why.startswith("this card is sm_70 but this build has ") and "CUDA 12" in why):
        problems.append(f"fake driver, sm_70: {why!r}")
    # A driver for CUDA 12.4 under this build's CUDA 13 runtime.
    _, gpus, _, _ = report(FAKE_CUDA_DRIVER=12040)
    why = gpus[0].get("unusable_reason", "") if gpus else ""
    print(f"fake driver, CUDA 12.4: {why!r}")
    if not why.startswith("the NVIDIA driver supports CUDA 12.4, older than this build's CUDA 13"):
        problems.append(f"fake driver, CUDA 12.4: {why!r}")
    # A driver that sees no GPU.
    api, gpus, _, _ = report(FAKE_CUDA_DEVICES=0)
    print(f"fake driver, no GPU: {api['reason']!r}")
    if gpus or api["reason"] != "the NVIDIA driver reports no GPU":
        problems.append(f"fake driver, no GPU: {api['reason']!r}")

    # Opening the device: the runtime behind the probe finds no real driver.
    if os.path.exists(model):
        rr = run_on(binary, "cuda:0", model, env)
        lines = rr.stderr.strip().splitlines()
        print(f"fake driver, run --device cuda:0: rc={rr.returncode} stderr={rr.stderr.strip()!r}")
        if rr.returncode <= 0 or rr.stdout.strip() or len(lines) != 1 or \
                not lines[0].startswith("polystack: error: cuda:0 (Fake NVIDIA H200) failed its "
                                        "self-check: cannot select the device: "):
            problems.append("fake driver: run --device cuda:0 did not fail with one error line "
                            "naming the device")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--fake-driver-dir", help="folder holding a stand-in libcuda.so.1")
    args = ap.parse_args()
    bindir = os.path.dirname(os.path.abspath(args.bin))
    cuda_plugin = os.path.join(bindir, "libpolystack-backend-cuda.so")
    hip_plugin = os.path.join(bindir, "libpolystack-backend-hip.so")
    if not os.path.exists(cuda_plugin) and not os.path.exists(hip_plugin):
        print("skipped: neither the CUDA nor the HIP plugin was built")
        return SKIP
    have_model = os.path.exists(args.model)
    problems = []
    sysroot = tempfile.mkdtemp(prefix="gpu-probes-sysroot-")
    for address, vendor, device in (("0000:41:00.0", "0x10de", "0x2335"),
                                    ("0000:03:00.0", "0x1002", "0x73ff")):
        d = os.path.join(sysroot, "sys/bus/pci/devices", address)
        os.makedirs(d)
        for name, value in (("vendor", vendor), ("device", device), ("class", "0x030000")):
            with open(os.path.join(d, name), "w") as f:
                f.write(value + "\n")
    os.environ["POLYSTACK_SYSROOT"] = sysroot
    report = devices(args.bin)
    listed = report["devices"]

    def expect_run_refused(device: str, reason: str):
        if not have_model:
            print(f"note: {args.model} absent, `run --device {device}` not checked")
            return
        r = run_on(args.bin, device, args.model)
        lines = r.stderr.strip().splitlines()
        print(f"run --device {device}: rc={r.returncode} stderr={r.stderr.strip()!r}")
        if r.returncode == 0 or r.stdout.strip():
            problems.append(f"run --device {device} ran without the device")
        want = f"polystack: error: device '{device}' is not available: {reason}"
        if lines != [want]:
            problems.append(f"run --device {device}: expected one line {want!r}, got {lines!r}")

    if os.path.exists(cuda_plugin):
        needed = needed_libraries(cuda_plugin)
        print(f"cuda plugin needs: {needed}")
        for lib in needed:
            if lib.startswith("libcuda.so") or lib.startswith("libcudart"):
                problems.append(f"the CUDA plugin links {lib}: it must load without a driver")
        api = api_report(report, "cuda")
        print(f"cuda: built={api['built']} devices={api['devices']} reason={api['reason']!r}")
        if not api["built"]:
            problems.append("the CUDA plugin exists but is not reported as built")
        if not loadable("libcuda.so.1"):
            want = ("no NVIDIA driver: libcuda.so.1 not found (the CUDA toolkit does not provide "
                    "it; install the NVIDIA driver)")
            if api["reason"] != want or api["devices"] != 0:
                problems.append(f"cuda without a driver: expected {want!r}, got {api['reason']!r}")
            expect_run_refused("cuda:0", want)
            if args.fake_driver_dir:
                check_fake_driver(args.bin, args.fake_driver_dir, args.model, problems)
        else:
            cuda_devices = [d for d in listed if d["api"] == "cuda"]
            if not cuda_devices and not api["reason"]:
                problems.append("a driver is present but neither a device nor a reason is reported")
            for d in cuda_devices:
                print(f"  {d['id']}: {d['name']} {d.get('architecture')} {d.get('facts')}")
                facts = dict(d.get("facts") or [])
                if not d.get("architecture", "").startswith("sm_"):
                    problems.append(f"{d['id']}: no sm_ architecture")
                if "kernels in this build" not in facts:
                    problems.append(f"{d['id']}: the report does not say whether it has kernels")

    if os.path.exists(hip_plugin):
        api = api_report(report, "hip")
        print(f"hip: built={api['built']} devices={api['devices']} reason={api['reason']!r}")
        runtime = next((lib for lib in needed_libraries(hip_plugin) if lib.startswith("libamdhip64")),
                       None)
        if runtime is None:
            problems.append("the HIP plugin does not link the ROCm runtime (libamdhip64)")
        elif not os.path.exists("/dev/kfd") and api["built"]:
            want = "no AMD GPU: /dev/kfd is missing (the amdgpu kernel driver is not loaded here)"
            if api["reason"] != want:
                problems.append(f"hip without /dev/kfd: expected {want!r}, got {api['reason']!r}")
            expect_run_refused("hip:0", want)
        if runtime is not None:
            # The plugin beside a copy of the binary, its runtime library renamed to one that
            # exists nowhere (same length, so the ELF file stays valid).
            missing = runtime[:-1] + ("9" if runtime[-1] != "9" else "8")
            with tempfile.TemporaryDirectory() as tmp:
                binary = os.path.join(tmp, "polystack")
                shutil.copy2(args.bin, binary)
                data = open(hip_plugin, "rb").read()
                old = runtime.encode() + b"\0"
                if data.count(old) < 1:
                    problems.append(f"cannot find {runtime} in the plugin's strings")
                else:
                    with open(os.path.join(tmp, "libpolystack-backend-hip.so"), "wb") as f:
                        f.write(data.replace(old, missing.encode() + b"\0"))
                    api = api_report(devices(binary), "hip")
                    print(f"hip without its runtime: built={api['built']} reason={api['reason']!r}")
                    want = (f"plugin libpolystack-backend-hip.so needs {missing}, which is not "
                            "installed (the ROCm HIP runtime; Debian and Ubuntu: libamdhip64-5, "
                            "or AMD's ROCm)")
                    if api["built"] or api["reason"] != want:
                        problems.append(f"hip without its runtime: expected {want!r}, "
                                        f"got {api['reason']!r}")

    for p in problems:
        print("FAIL:", p)
    shutil.rmtree(sysroot, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
