#!/usr/bin/env python3
"""`polystack doctor` on fake machines and on this one.

Each case lays out a machine under a temporary POLYSTACK_SYSROOT (PCI devices as folders with
vendor/device/class files and a driver symlink, modules, device nodes as plain files with their
mode and group, libraries as files and symlinks, ICD manifests), runs `doctor --json` there, and
checks the status of the checks it names, that the first failure is the cause (with its evidence
and fix), and the exit code (1 when a GPU is present but no API can use it). Then `doctor` on
this machine for real, and bad input.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

problems = []
passed = 0


def check(ok, what, detail=""):
    global passed
    if ok:
        passed += 1
    else:
        problems.append(what)
        print(f"FAIL: {what}" + (f"\n  {detail}" if detail else ""))


class Machine:
    """A fake Linux machine in a folder."""

    def __init__(self, root):
        self.root = root
        self.file("/proc/sys/kernel/osrelease", "6.1.0-28-amd64\n")
        self.file("/etc/group", "root:x:0:\nvideo:x:44:\nrender:x:105:\n")
        os.makedirs(self.path("/sys/bus/pci/devices"), exist_ok=True)
        os.makedirs(self.path("/dev"), exist_ok=True)

    def path(self, p):
        return os.path.join(self.root, p.lstrip("/"))

    def file(self, p, text="", mode=0o644, gid=0):
        full = self.path(p)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(text.encode() if isinstance(text, str) else text)
        os.chmod(full, mode)
        os.chown(full, 0, gid)
        return self

    def link(self, p, target):
        full = self.path(p)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        os.symlink(target, full)
        return self

    def gpu(self, address, vendor, device, cls=0x030000, driver=None):
        d = f"/sys/bus/pci/devices/{address}"
        self.file(d + "/vendor", f"0x{vendor:04x}\n").file(d + "/device", f"0x{device:04x}\n")
        self.file(d + "/class", f"0x{cls:06x}\n")
        if driver:
            os.makedirs(self.path(f"/sys/bus/pci/drivers/{driver}"), exist_ok=True)
            self.link(d + "/driver", f"../../../bus/pci/drivers/{driver}")
        return self

    def library(self, name, real_name, folder="/usr/lib/x86_64-linux-gnu"):
        self.file(f"{folder}/{real_name}", "\x7fELF")
        if name != real_name:
            self.link(f"{folder}/{name}", real_name)
        return self

    def nvidia(self, version="580.65.06", nodes=True, uvm=True, lib=True, driver="nvidia"):
        self.gpu("0000:41:00.0", 0x10de, 0x2335, 0x030200, driver)
        if driver == "nvidia":
            self.file("/sys/module/nvidia/version", version + "\n")
            if uvm:
                os.makedirs(self.path("/sys/module/nvidia_uvm"), exist_ok=True)
        if nodes:
            for n in ("nvidiactl", "nvidia0") + (("nvidia-uvm",) if uvm else ()):
                self.file(f"/dev/{n}", mode=0o666)
        if lib:
            self.library("libcuda.so.1", f"libcuda.so.{version}")
        return self

    def amd(self, target="100302", driver="amdgpu", kfd=True, lib=True):
        self.gpu("0000:03:00.0", 0x1002, 0x73ff, 0x030000, driver)
        if kfd:
            self.file("/dev/kfd", mode=0o666, gid=105)
        self.file("/dev/dri/renderD128", mode=0o666, gid=105)
        self.file("/sys/class/kfd/kfd/topology/nodes/0/properties", "cpu_cores_count 16\n"
                  "gfx_target_version 0\n")
        self.file("/sys/class/kfd/kfd/topology/nodes/1/properties", "simd_count 64\n"
                  f"gfx_target_version {target}\n")
        if lib:
            self.library("libamdhip64.so.5", "libamdhip64.so.5.2.0")
        return self

    def vulkan(self, *drivers):
        self.library("libvulkan.so.1", "libvulkan.so.1.3.239")
        for name in drivers:
            lib = f"/usr/lib/x86_64-linux-gnu/libvulkan_{name}.so"
            self.file(lib, "\x7fELF")
            self.file(f"/usr/share/vulkan/icd.d/{name}_icd.x86_64.json",
                      json.dumps({"file_format_version": "1.0.0",
                                  "ICD": {"library_path": lib, "api_version": "1.3.230"}}))
        return self


def doctor(binary, root, env_extra=None, args=(), user=None):
    env = dict(os.environ, POLYSTACK_SYSROOT=root)
    for k in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
              "GPU_DEVICE_ORDINAL", "HSA_OVERRIDE_GFX_VERSION", "VK_ICD_FILENAMES",
              "VK_DRIVER_FILES"):
        env.pop(k, None)
    env.update(env_extra or {})
    cmd = [binary, "doctor", "--json", *args]
    if user:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    try:
        return r.returncode, json.loads(r.stdout), r.stderr
    except json.JSONDecodeError:
        return r.returncode, None, r.stderr + r.stdout


def case(binary, name, build, expect, rc, first=None, fix=None, evidence=None, env=None,
         user=None, summary=None, says=None):
    """expect: {check id: status}; first: the id of the first failure; fix, evidence, summary:
    text the first failure's fix / evidence / summary must contain."""
    with tempfile.TemporaryDirectory() as tmp:
        os.chmod(tmp, 0o755)
        m = Machine(tmp)
        build(m)
        code, out, err = doctor(binary, tmp, env, user=user)
        if out is None:
            check(False, f"{name}: doctor --json printed no JSON (rc {code})", err[-300:])
            return
        by_id = {}
        for c in out["checks"]:
            by_id.setdefault(c["id"], c)
        statuses = {c["id"]: c["status"] for c in out["checks"]}
        for cid, want in expect.items():
            got = by_id.get(cid, {}).get("status")
            check(got == want, f"{name}: {cid} is {got}, expected {want}",
                  json.dumps(by_id.get(cid), indent=1))
        check(code == rc, f"{name}: exit {code}, expected {rc}", err[-300:])
        for cid, text in (says or {}).items():
            got = by_id.get(cid, {}).get("summary", "")
            check(text in got, f"{name}: {cid} says {got!r}, not {text!r}")
        fails = [c for c in out["checks"] if c["status"] == "fail"]
        if first:
            check(out["verdict"]["first_failure"] == first and fails and fails[0]["id"] == first,
                  f"{name}: the first failure is {out['verdict']['first_failure']!r}, expected "
                  f"{first!r}", str(statuses))
            f0 = fails[0] if fails else {}
            if fix:
                check(fix in f0.get("fix", ""), f"{name}: the fix {f0.get('fix')!r} lacks {fix!r}")
            if evidence:
                check(any(evidence in e for e in f0.get("evidence", [])),
                      f"{name}: the evidence {f0.get('evidence')} lacks {evidence!r}")
            if summary:
                check(summary in f0.get("summary", ""),
                      f"{name}: the summary {f0.get('summary')!r} lacks {summary!r}")
            # Every later layer of that API is skipped, "because" of it.
            api = first.split(".")[0]
            later = [c for c in out["checks"] if c["api"] == api][
                [c["id"] for c in out["checks"] if c["api"] == api].index(first) + 1:]
            check(all(c["status"] == "skip" and c["summary"].startswith("because ")
                      for c in later if c["id"] != f"{api}.api" or c["status"] != "skip"),
                  f"{name}: layers after the failure are not skipped: {later}")
        else:
            check(not fails, f"{name}: unexpected failures {[f['id'] for f in fails]}")
        print(f"{name}: rc {code}, first failure {out['verdict']['first_failure']!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    args = ap.parse_args()
    b = args.bin

    case(b, "no GPU", lambda m: m.vulkan("lvp"),
         {"cuda.hardware": "info", "hip.hardware": "info", "vulkan.drivers": "info"}, 0)
    case(b, "NVIDIA held by nouveau",
         lambda m: m.nvidia(driver="nouveau", nodes=False).vulkan("nouveau"),
         {"cuda.hardware": "ok", "cuda.kernel-driver": "fail", "cuda.device-nodes": "skip"}, 0,
         first="cuda.kernel-driver", fix="nvidia-driver", evidence="driver -> nouveau")
    case(b, "NVIDIA held by nouveau, no Vulkan driver",
         lambda m: m.nvidia(driver="nouveau", nodes=False).vulkan("lvp"),
         {"cuda.kernel-driver": "fail", "vulkan.drivers": "fail"}, 1,
         first="cuda.kernel-driver")
    case(b, "an NVIDIA GPU named from pci.ids",
         lambda m: m.nvidia().vulkan("nvidia").file(
             "/usr/share/misc/pci.ids", "10de  NVIDIA Corporation\n\t2335  GH100 [H200 SXM 141GB]\n"),
         {"cuda.hardware": "ok"}, 0,
         says={"cuda.hardware": "NVIDIA GH100 [H200 SXM 141GB] at 0000:41:00.0"})
    case(b, "NVIDIA with no driver", lambda m: m.nvidia(driver=None, nodes=False, lib=False),
         {"cuda.kernel-driver": "fail"}, 1, first="cuda.kernel-driver",
         summary="no nvidia module is installed", fix="nvidia-driver")

    def secure_boot(m):
        m.nvidia(driver=None, nodes=False)
        m.file("/lib/modules/6.1.0-28-amd64/updates/dkms/nvidia.ko.xz", "x")
        m.file("/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c",
               b"\x06\x00\x00\x00\x01")
    case(b, "module on disk, Secure Boot on", secure_boot, {"cuda.kernel-driver": "fail"}, 1,
         first="cuda.kernel-driver", summary="Secure Boot is on", fix="mokutil",
         evidence="nvidia.ko.xz")

    def mismatch(m):
        m.nvidia(version="580.65.06", lib=False).library("libcuda.so.1", "libcuda.so.580.82.07")
    case(b, "module/library version mismatch", mismatch, {"cuda.compatibility": "fail"}, 1,
         first="cuda.compatibility", fix="reboot", evidence="libcuda version 580.82.07")
    case(b, "/dev/nvidia-uvm missing", lambda m: m.nvidia(uvm=False),
         {"cuda.kernel-driver": "warn", "cuda.device-nodes": "fail"}, 1,
         first="cuda.device-nodes", fix="nvidia-uvm")

    def not_openable(m):
        m.nvidia(nodes=False)
        for n in ("nvidiactl", "nvidia0", "nvidia-uvm"):
            m.file(f"/dev/{n}", mode=0o660, gid=44)
    if os.geteuid() == 0 and shutil.which("setpriv"):
        case(b, "device node not openable by this user", not_openable,
             {"cuda.device-nodes": "fail"}, 1, first="cuda.device-nodes",
             fix="sudo usermod -aG video $USER", user="65534")
    else:
        print("note: not root or no setpriv: the unprivileged case is left to "
              "Doctor.WhoMayOpenADeviceNode")
    case(b, "device node openable by root", lambda m: (not_openable(m), m.vulkan("nvidia")),
         {"cuda.device-nodes": "ok"}, 0)

    def stub(m):
        m.nvidia(lib=False)
        m.file("/usr/local/cuda-13.0/targets/x86_64-linux/lib/stubs/libcuda.so", "\x7fELF")
        m.link("/usr/lib/x86_64-linux-gnu/libcuda.so.1",
               "/usr/local/cuda-13.0/targets/x86_64-linux/lib/stubs/libcuda.so")
    case(b, "libcuda only as the toolkit's stub", stub, {"cuda.runtime-library": "fail"}, 1,
         first="cuda.runtime-library", summary="stub")

    def wsl(m):
        m.file("/proc/sys/kernel/osrelease", "5.15.167.4-microsoft-standard-WSL2\n")
        m.file("/dev/dxg", mode=0o666)
        m.library("libcuda.so.1", "libcuda.so.1", folder="/usr/lib/wsl/lib")
        m.library("libcuda.so.1", "libcuda.so.580.65.06")
    case(b, "WSL: a Linux libcuda shadows the Windows driver's", wsl,
         {"cuda.hardware": "ok", "cuda.runtime-library": "fail"}, 1,
         first="cuda.runtime-library", summary="shadows", fix="sudo rm")
    case(b, "driver too old for the runtime", lambda m: m.nvidia(version="535.183.01"),
         {"cuda.compatibility": "fail"}, 1, first="cuda.compatibility", fix="580 or newer")
    case(b, "AMD gfx1032 not in the build", lambda m: m.amd(target="100302").vulkan("lvp"),
         {"hip.kernel-driver": "ok", "hip.compatibility": "fail"}, 1, first="hip.compatibility",
         fix="HSA_OVERRIDE_GFX_VERSION=10.3.0", evidence="gfx_target_version 100302 (gfx1032)")
    case(b, "AMD gfx1032 with HSA_OVERRIDE_GFX_VERSION",
         lambda m: m.amd(target="100302").vulkan("radeon"),
         {"hip.compatibility": "warn"}, 0, env={"HSA_OVERRIDE_GFX_VERSION": "10.3.0"})
    case(b, "AMD gfx1030", lambda m: m.amd(target="100300").vulkan("radeon"),
         {"hip.compatibility": "ok", "vulkan.drivers": "ok", "vulkan.device-nodes": "ok"}, 0)
    case(b, "/dev/kfd missing", lambda m: m.amd(kfd=False).vulkan("radeon"),
         {"hip.device-nodes": "fail", "vulkan.drivers": "ok"}, 0, first="hip.device-nodes",
         fix="amdgpu")
    for value, what in (("", "empty"), ("-1", "-1"), ("3", "out of range")):
        case(b, f"CUDA_VISIBLE_DEVICES {what}", lambda m: m.nvidia(),
             {"cuda.environment": "fail"}, 1, first="cuda.environment",
             fix="unset CUDA_VISIBLE_DEVICES", env={"CUDA_VISIBLE_DEVICES": value})
    case(b, "CUDA_VISIBLE_DEVICES 0", lambda m: m.nvidia().vulkan("nvidia"),
         {"cuda.environment": "info", "cuda.compatibility": "ok", "vulkan.drivers": "ok"}, 0,
         env={"CUDA_VISIBLE_DEVICES": "0"})
    case(b, "only lavapipe for an AMD GPU", lambda m: m.amd(target="100300").vulkan("lvp"),
         {"vulkan.drivers": "fail"}, 0, first="vulkan.drivers", fix="mesa-vulkan-drivers",
         summary="no Vulkan driver for the AMD GPU")

    def missing_library(m):
        m.vulkan("lvp")
        m.file("/usr/share/vulkan/icd.d/broken_icd.json",
               json.dumps({"ICD": {"library_path": "/opt/gone/libvulkan_gone.so"}}))
    case(b, "an ICD manifest names a missing library", missing_library,
         {"vulkan.drivers": "info"}, 0)
    case(b, "VK_ICD_FILENAMES names a missing driver", missing_library,
         {"vulkan.drivers": "fail"}, 0, first="vulkan.drivers", fix="unset VK_ICD_FILENAMES",
         env={"VK_ICD_FILENAMES": "/usr/share/vulkan/icd.d/broken_icd.json"},
         evidence="libvulkan_gone.so (missing)")

    def malformed(m):
        m.amd(target="garbage").vulkan("radeon")
        m.file("/usr/share/vulkan/icd.d/bad.json", "{\"ICD\": [1, 2")
        m.file("/sys/class/kfd/kfd/topology/nodes/2/properties", "\x00\xff gfx_target_version")
    case(b, "malformed manifests and properties", malformed,
         {"hip.compatibility": "warn", "vulkan.drivers": "warn"}, 0)

    def opencl(m):
        m.library("libOpenCL.so.1", "libOpenCL.so.1.0.0")
        os.makedirs(m.path("/etc/OpenCL/vendors"), exist_ok=True)
    case(b, "OpenCL loader without vendor ICDs", opencl, {"opencl.drivers": "warn"}, 0)

    def container(m):
        m.nvidia(nodes=False)
        m.file("/.dockerenv")
    case(b, "a container without the GPU passed in", container, {"cuda.device-nodes": "fail"}, 1,
         first="cuda.device-nodes", fix="--gpus all")
    case(b, "an Intel iGPU with no Vulkan driver",
         lambda m: m.gpu("0000:00:02.0", 0x8086, 0x46a6, 0x030000, "i915").file(
             "/dev/dri/renderD128", mode=0o666).vulkan("lvp", "radeon"),
         {"vulkan.drivers": "fail"}, 1, first="vulkan.drivers", summary="Intel GPU",
         fix="mesa-vulkan-drivers")

    # This machine for real.
    env = dict(os.environ)
    env.pop("POLYSTACK_SYSROOT", None)
    with tempfile.TemporaryDirectory() as cache:
        env["XDG_CACHE_HOME"] = cache
        r = subprocess.run([b, "doctor", "--json"], capture_output=True, text=True, env=env,
                           timeout=120)
        try:
            out = json.loads(r.stdout)
        except json.JSONDecodeError:
            out = None
        check(out is not None, "doctor --json on this machine is JSON", r.stdout[:300])
        if out:
            keys = {"id", "api", "layer", "status", "summary", "evidence", "fix"}
            check(all(keys <= c.keys() for c in out["checks"]), "every check has the fields")
            by = {c["id"]: c for c in out["checks"]}
            for cid in ("cuda.api", "hip.api"):
                print(f"this machine: {cid}: {by.get(cid, {}).get('summary')!r}")
            if not any(os.path.exists(f"/dev/{n}") for n in ("nvidiactl", "kfd")):
                check(by.get("cuda.hardware", {}).get("status") == "info" or
                      by.get("cuda.hardware", {}).get("status") == "ok", "cuda hardware reported")
            lvp = [c for c in out["checks"] if c["id"] == "vulkan.self-check" and
                   "CPU driver" in c["summary"]]
            if os.path.exists("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json"):
                check(bool(lvp), "doctor shows lavapipe as a CPU driver",
                      str([c for c in out["checks"] if c["api"] == "vulkan"]))
            check(out["verdict"]["device"] != "", "the verdict names a device")
            check(r.returncode == (1 if out["verdict"]["gpu_present"] and
                                   not out["verdict"]["gpu_usable"] else 0),
                  f"exit code {r.returncode} against the verdict {out['verdict']}")
        t = subprocess.run([b, "doctor"], capture_output=True, text=True, env=env, timeout=120)
        check("run would use: " in t.stdout and "[" in t.stdout, "doctor's text report",
              t.stdout[-500:])

    # Bad input.
    r = subprocess.run([b, "doctor", "--api", "nosuch"], capture_output=True, text=True)
    check(r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1,
          f"--api nosuch: rc {r.returncode} {r.stderr!r}")
    r = subprocess.run([b, "doctor"], capture_output=True, text=True,
                       env=dict(os.environ, POLYSTACK_SYSROOT="/nonexistent/sysroot"))
    check(r.returncode != 0 and len(r.stderr.strip().splitlines()) == 1 and
          "POLYSTACK_SYSROOT" in r.stderr, f"a missing sysroot: rc {r.returncode} {r.stderr!r}")
    with tempfile.TemporaryDirectory() as tmp:
        m = Machine(tmp)
        m.nvidia().amd().vulkan("radeon", "nvidia")
        r = subprocess.run([b, "doctor", "--api", "hip", "--json"], capture_output=True,
                           text=True, env=dict(os.environ, POLYSTACK_SYSROOT=tmp))
        out = json.loads(r.stdout) if r.returncode in (0, 1) else {"checks": []}
        check(out["checks"] and all(c["api"] in ("hip", "system") for c in out["checks"]),
              "--api hip checks only HIP", str({c["api"] for c in out["checks"]}))

    print(f"{passed} passed, {len(problems)} failed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
