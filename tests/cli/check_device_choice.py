#!/usr/bin/env python3
"""Device choice through the binary: probes that cannot take polystack down, one physical device
listed once, the self-check before a GPU is trusted, the forms of --device, and bench across
devices.

- Plugins that crash, hang or exit in their library constructor, in a folder named by
  POLYSTACK_BACKEND_PATH: `devices` and `run` still work, name each API and what happened, and
  finish within POLYSTACK_PROBE_TIMEOUT plus a few seconds.
- The stand-in libcuda.so.1 reporting the UUID of the Vulkan device: `devices` lists one physical
  device reachable as cuda:0 and vulkan:0; --device takes its UUID (both forms) and PCI address.
- vulkan:0 (lavapipe here): the self-check runs on first use, passes, is cached (the second run
  does not run it), runs again with --recheck; a fault injected into one kernel
  (POLYSTACK_TEST_FAULT) makes it fail naming the case; POLYSTACK_DEVICE names the device.
- The stand-in CUDA device, whose runtime cannot launch kernels, is passed over by the default
  policy with its reason and is an error when named.
- `--device gpu` fails with one line saying no GPU passed; malformed specs fail in one line.
- `bench --device cpu,vulkan:0` prints a row per device with the ratio to the first;
  scripts/plot_bench.py turns its JSON into a PNG.

Each check runs with its own XDG_CACHE_HOME. Exits 77 (skipped) without the Vulkan plugin.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

SKIP = 77
problems = []


def fail(msg):
    print("FAIL:", msg)
    problems.append(msg)


def run(args, env, timeout=300):
    t0 = time.monotonic()
    r = subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)
    r.seconds = time.monotonic() - t0
    return r


def error_lines(r):
    return [l for l in r.stderr.splitlines() if l.startswith("polystack: error:")]


def check_misbehaving_plugins(binary, plugins_dir, model, base_env):
    with tempfile.TemporaryDirectory() as tmp:
        for how, api in (("crash", "opencl"), ("hang", "metal"), ("exit", "directml")):
            shutil.copy(os.path.join(plugins_dir, f"libpolystack_test_plugin_{how}.so"),
                        os.path.join(tmp, f"libpolystack-backend-{api}.so"))
        # A copy of the binary beside the Vulkan plugin alone: the plugins beside the executable
        # come first, so the real OpenCL plugin would stand in front of the crashing one.
        exe_dir = os.path.join(tmp, "bin")
        os.makedirs(exe_dir)
        vulkan = os.path.join(os.path.dirname(binary), "libpolystack-backend-vulkan.so")
        if os.path.exists(vulkan):
            shutil.copy(vulkan, exe_dir)
        binary = shutil.copy(binary, exe_dir)
        env = dict(base_env, POLYSTACK_BACKEND_PATH=tmp, POLYSTACK_PROBE_TIMEOUT="3")
        r = run([binary, "devices", "--json"], env)
        print(f"devices with misbehaving plugins: rc={r.returncode} in {r.seconds:.1f} s")
        if r.returncode != 0:
            fail(f"devices failed with misbehaving plugins: {r.stderr.strip()[-300:]}")
            return
        if r.seconds > 3 + 5:
            fail(f"devices took {r.seconds:.1f} s with a 3 s probe timeout")
        apis = {a["api"]: a for a in json.loads(r.stdout)["apis"]}
        want = {"opencl": "the opencl plugin crashed while loading (signal ",
                "metal": "the metal plugin did not answer within 3 s while loading",
                "directml": "the directml plugin exited with status 3 while loading"}
        for api, start in want.items():
            print(f"  {api}: {apis[api]['reason']!r}")
            if not apis[api]["reason"].startswith(start) or not apis[api]["failed"]:
                fail(f"{api}: expected a failed report starting {start!r}, got {apis[api]}")
        if not apis["vulkan"]["available"] or not apis["cpu"]["available"]:
            fail("the other APIs were lost beside the misbehaving plugins")
        # run goes on as well, on the CPU, within the timeout.
        r = run([binary, "run", "-m", model, "-p", "Once", "-n", "4", "--temp", "0"], env)
        print(f"run with misbehaving plugins: rc={r.returncode} in {r.seconds:.1f} s")
        if r.returncode != 0 or not r.stdout.strip() or "running on cpu" not in r.stderr:
            fail(f"run failed beside misbehaving plugins: {r.stderr.strip()[-300:]}")
        if r.seconds > 3 + 5:
            fail(f"run took {r.seconds:.1f} s with a 3 s probe timeout")
        if "not chosen: opencl: the opencl plugin crashed while loading" not in r.stderr:
            fail("run does not say the opencl plugin crashed")
        # --device cpu probes no plugin at all.
        r = run([binary, "run", "-m", model, "-p", "Once", "-n", "2", "--device", "cpu"], env)
        if r.returncode != 0 or r.seconds > 2.5:
            fail(f"run --device cpu waited for the plugins ({r.seconds:.1f} s)")
        # A timeout that is not a number is one error line.
        r = run([binary, "devices"], dict(env, POLYSTACK_PROBE_TIMEOUT="soon"))
        if r.returncode == 0 or len(error_lines(r)) != 1 or "POLYSTACK_PROBE_TIMEOUT" not in r.stderr:
            fail(f"POLYSTACK_PROBE_TIMEOUT=soon: {r.returncode} {r.stderr.strip()!r}")


def vulkan_device(report):
    return next((d for d in report["devices"] if d["id"] == "vulkan:0"), None)


def check_dedup(binary, fake_dir, vk, model, base_env):
    uuid = vk["uuid"].replace("-", "")
    env = dict(base_env, LD_LIBRARY_PATH=fake_dir + os.pathsep + base_env.get("LD_LIBRARY_PATH", ""),
               FAKE_CUDA_UUID=uuid)
    r = run([binary, "devices", "--json"], env)
    if r.returncode != 0:
        fail(f"devices with the stand-in driver: {r.stderr.strip()[-300:]}")
        return
    rep = json.loads(r.stdout)
    groups = [g for g in rep["physical_devices"] if "cuda:0" in g["ids"]]
    print(f"stand-in driver with vulkan:0's UUID: {rep['physical_devices']}")
    if not groups or groups[0]["ids"] != ["cuda:0", "vulkan:0"] or \
            groups[0].get("matched_by") != "uuid":
        fail(f"cuda:0 and vulkan:0 are not one physical device: {rep['physical_devices']}")
    if sum(1 for g in rep["physical_devices"] if "vulkan:0" in g["ids"]) != 1:
        fail("vulkan:0 is listed twice")
    text = run([binary, "devices"], env).stdout
    print("\n".join(l for l in text.splitlines() if "cuda:0" in l or "as vulkan:0" in l))
    if "cuda:0, also vulkan:0: Fake NVIDIA H200" not in text or \
            "as vulkan:0 (the same device, matched by UUID)" not in text:
        fail("devices does not show cuda:0 and vulkan:0 as one device")
    # The default policy: cuda:0 (first by API) fails its self-check (no real driver behind the
    # stand-in); the same GPU through Vulkan is a CPU driver: the CPU runs.
    if rep["default"]["device"] != "cpu":
        fail(f"default {rep['default']} with a stand-in CUDA device")
    why = [l for l in rep["default"]["passed_over"] if l.startswith("cuda:0 (Fake NVIDIA H200)")]
    print(f"  default: {rep['default']['device']}; cuda:0: {why}")
    if not why or "self-check failed" not in why[0]:
        fail(f"the stand-in CUDA device is not passed over for its self-check: {why}")
    # Named by id, UUID (both forms) or PCI address, it is an error naming the failure.
    for spec in ("cuda:0", "GPU-" + vk["uuid"], uuid, "pci:0000:4e:00.0"):
        r = run([binary, "run", "-m", model, "-p", "Once", "-n", "2", "--device", spec], env)
        lines = r.stderr.strip().splitlines()
        print(f"  run --device {spec}: rc={r.returncode} {lines[-1:]}")
        if r.returncode == 0 or r.stdout or len(lines) != 1 or not lines[0].startswith(
                "polystack: error: cuda:0 (Fake NVIDIA H200) failed its self-check: "):
            fail(f"run --device {spec} on the stand-in device: {lines}")


def check_selfcheck(binary, model, base_env, cache):
    env = dict(base_env, XDG_CACHE_HOME=cache)
    args = [binary, "run", "-m", model, "-p", "Once upon a time", "-n", "8", "--temp", "0"]
    first = run(args + ["--device", "vulkan:0"], env)
    print(f"first run on vulkan:0: rc={first.returncode} "
          f"{[l for l in first.stderr.splitlines() if 'self-check' in l]}")
    if first.returncode != 0 or "polystack: self-check of vulkan:0: " not in first.stderr or \
            "self-check passed, " not in first.stderr:
        fail(f"the first run on vulkan:0 did not run and pass the self-check: {first.stderr[-400:]}")
    # The results, beside the lock that writers take (SelfCheckCache::save).
    cached = [f for f in os.listdir(os.path.join(cache, "polystack"))
              if f.startswith("selfcheck-") and f.endswith(".json")]
    if len(cached) != 1:
        fail(f"the self-check result was not cached in XDG_CACHE_HOME/polystack: {cached}")
    # The second run reads the cache, and POLYSTACK_DEVICE names the device as --device does.
    second = run(args, dict(env, POLYSTACK_DEVICE="vulkan:0"))
    if second.returncode != 0 or "self-check of vulkan:0" in second.stderr or \
            "named with POLYSTACK_DEVICE; self-check passed (cached)" not in second.stderr:
        fail(f"the second run did not use the cached self-check: {second.stderr[-400:]}")
    if second.stdout != first.stdout:
        fail("the cached run generated other text")
    again = run(args + ["--device", "vulkan:0", "--recheck"], env)
    if again.returncode != 0 or "polystack: self-check of vulkan:0: " not in again.stderr:
        fail(f"--recheck did not run the self-check again: {again.stderr[-400:]}")
    # A fault in one kernel: the check fails naming the case, and the failure is kept.
    fenv = dict(base_env, XDG_CACHE_HOME=os.path.join(cache, "fault"),
                POLYSTACK_TEST_FAULT="matmul:F32")
    for attempt in ("first", "cached"):
        r = run(args + ["--device", "vulkan:0"], fenv)
        lines = r.stderr.strip().splitlines()
        print(f"fault injected ({attempt}): rc={r.returncode} {lines[-1:]}")
        if r.returncode == 0 or r.stdout or len(error_lines(r)) != 1 or \
                "vulkan:0 (llvmpipe" not in lines[-1] or \
                "failed its self-check: computed matmul F32 decode " not in lines[-1]:
            fail(f"a faulty matmul was not caught by the self-check ({attempt}): {lines[-2:]}")
    # With --no-self-check it runs all the same.
    r = run(args + ["--device", "vulkan:0", "--no-self-check"], fenv)
    if r.returncode != 0 or "self-check skipped (--no-self-check)" not in r.stderr:
        fail(f"--no-self-check did not run on the device: {r.stderr[-300:]}")
    # The API's name picks its best device (the only one here).
    r = run(args + ["--device", "vulkan"], env)
    if r.returncode != 0 or "running on vulkan:0" not in r.stderr:
        fail(f"--device vulkan did not run on vulkan:0: {r.stderr[-300:]}")


def check_specs(binary, model, base_env):
    # No GPU here: lavapipe is a CPU driver.
    r = run([binary, "run", "-m", model, "-p", "Once", "-n", "2", "--device", "gpu"], base_env)
    lines = r.stderr.strip().splitlines()
    print(f"--device gpu: rc={r.returncode} {lines}")
    if r.returncode == 0 or r.stdout or len(lines) != 1 or \
            not lines[0].startswith("polystack: error: no GPU passed (--device gpu): ") or \
            "a CPU driver of vulkan" not in lines[0]:
        fail(f"--device gpu: {lines}")
    for spec, part in (("nosuch", "unknown device 'nosuch'"), ("vulkan:x", "not a device index"),
                       ("pci:zz", "not a PCI address"), ("vulkan:7", "does not exist"),
                       ("GPU-0123456789abcdef0123456789abcdef", "no device has the UUID")):
        r = run([binary, "run", "-m", model, "-p", "Once", "-n", "2", "--device", spec], base_env)
        lines = r.stderr.strip().splitlines()
        if r.returncode == 0 or r.stdout or len(lines) != 1 or part not in lines[0]:
            fail(f"--device {spec}: expected one error line with {part!r}, got {lines}")
    r = run([binary, "run", "-m", model, "-p", "Once", "-n", "2"],
            dict(base_env, POLYSTACK_DEVICE="nosuch"))
    if r.returncode == 0 or "unknown device 'nosuch'" not in r.stderr:
        fail(f"POLYSTACK_DEVICE=nosuch: {r.stderr.strip()!r}")


def check_bench(binary, model, base_env, repo):
    args = [binary, "bench", "-m", model, "-p", "16", "-n", "8", "-r", "1",
            "--device", "cpu,vulkan:0"]
    r = run(args, base_env)
    rows = [l for l in r.stdout.splitlines() if l.startswith("| llama")]
    print("\n".join(r.stdout.splitlines()[:2] + rows))
    if r.returncode != 0 or len(rows) != 4 or "vs cpu" not in r.stdout.splitlines()[0]:
        fail(f"bench --device cpu,vulkan:0: rc={r.returncode} {r.stdout[-500:]} {r.stderr[-300:]}")
    elif not all(" cpu " in l for l in rows[:2]) or not all(" vulkan:0 " in l for l in rows[2:]) \
            or not all(l.rstrip(" |").endswith("1.00x") for l in rows[:2]):
        fail(f"bench rows: {rows}")
    r = run(args + ["--json"], base_env)
    try:
        data = json.loads(r.stdout)
    except json.JSONDecodeError:
        fail(f"bench --json is not JSON: {r.stdout[:200]!r}")
        return
    devices = [d["device"] for d in data]
    if devices != ["cpu", "cpu", "vulkan:0", "vulkan:0"] or \
            any(d["ratio_to"] != "cpu" for d in data) or data[0]["ratio"] != 1.0 or \
            not all(d["ratio"] > 0 for d in data):
        fail(f"bench --json rows: {[(d['device'], d['test'], d['ratio']) for d in data]}")
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "bench.json")
        png = os.path.join(tmp, "bench.png")
        with open(src, "w") as f:
            f.write(r.stdout)
        p = subprocess.run([sys.executable, os.path.join(repo, "scripts", "plot_bench.py"), src,
                            "-o", png], capture_output=True, text=True, timeout=120)
        size = os.path.getsize(png) if os.path.exists(png) else 0
        print(f"plot_bench: rc={p.returncode} {size} bytes")
        if p.returncode != 0 or size < 5000:
            fail(f"plot_bench.py did not write a PNG: {p.stderr[-300:]}")
        else:
            with open(png, "rb") as f:
                head = f.read(24)
            width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
            if head[:8] != b"\x89PNG\r\n\x1a\n" or not (300 <= width <= 4000 and
                                                         200 <= height <= 3000):
                fail(f"plot_bench.py wrote no plausible PNG ({head[:8]!r}, {width}x{height})")
        p = subprocess.run([sys.executable, os.path.join(repo, "scripts", "plot_bench.py"),
                            os.path.join(repo, "README.md"), "-o", png],
                           capture_output=True, text=True, timeout=120)
        if p.returncode == 0 or len(p.stderr.strip().splitlines()) != 1:
            fail(f"plot_bench.py on a file that is not JSON: rc={p.returncode} {p.stderr!r}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--plugins-dir", required=True, help="folder of the misbehaving test plugins")
    ap.add_argument("--fake-driver-dir", required=True, help="folder of the stand-in libcuda.so.1")
    ap.add_argument("--repo", required=True)
    args = ap.parse_args()
    bindir = os.path.dirname(os.path.abspath(args.bin))
    if not os.path.exists(os.path.join(bindir, "libpolystack-backend-vulkan.so")):
        print("skipped: the Vulkan plugin was not built")
        return SKIP
    if not os.path.exists(args.model):
        print(f"skipped: {args.model} is absent")
        return SKIP
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, XDG_CACHE_HOME=cache)
        env.pop("POLYSTACK_DEVICE", None)
        rep = json.loads(run([args.bin, "devices", "--json"], env).stdout)
        vk = vulkan_device(rep)
        if vk is None or not vk["usable"]:
            print("skipped: no usable Vulkan device (install mesa-vulkan-drivers for lavapipe)")
            return SKIP
        check_misbehaving_plugins(args.bin, args.plugins_dir, args.model, env)
        if os.path.exists(os.path.join(bindir, "libpolystack-backend-cuda.so")):
            check_dedup(args.bin, args.fake_driver_dir, vk, args.model,
                        dict(env, XDG_CACHE_HOME=os.path.join(cache, "dedup")))
        else:
            print("note: the CUDA plugin was not built: the matching across APIs is not checked")
        check_selfcheck(args.bin, args.model, env, os.path.join(cache, "selfcheck"))
        check_specs(args.bin, args.model, env)
        check_bench(args.bin, args.model, env, args.repo)
    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
