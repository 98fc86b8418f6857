#!/usr/bin/env python3
"""A model across the ranks of an MPI job, through the binary: `mpirun -np N polystack ... --mpi`.

Checks, on this machine (the ranks talk over Open MPI's shared memory):
  - greedy text of `run` with 2 and 3 ranks (and an uneven --rank-split) is the one process's;
  - `run -v` names each rank's layers, devices, memory and hop;
  - `serve --mpi` answers concurrent requests (pipelined micro-batches) with the one process's
    text (--deterministic on both), and embeddings as it does; /metrics lists the ranks;
  - `bench --mpi` measures; `doctor --mpi` names which rank would hold what;
  - a rank killed mid-job ends it within seconds, rank 0 naming the rank;
  - a rank with another model file (mpirun's MPMD form) or another version is refused at start;
  - more ranks than layers and a --rank-split of the wrong length are refused with exit 2;
  - without the MPI module, --mpi says how to get it (exit 2).
Exit 77 (skip) when mpirun or libpolystack-mpi.so is absent.
"""
import argparse
import concurrent.futures
import json
import re
import resource
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from servertest import Server, check, mpi_problem, problems, sanitizer_build  # noqa: E402

SKIP = 77
PROMPT = "Once upon a time"


def mpirun(ranks, extra=None):
    return ["mpirun", "--oversubscribe", "-np", str(ranks)] + (extra or [])


def run(cmd, timeout=120, env=None):
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    why = mpi_problem(args.bin, args.model)
    if why:
        print(f"SKIP: {why}")
        return SKIP
    b, m = args.bin, args.model
    gen = ["-p", PROMPT, "-n", "40", "--temp", "0"]

    # Greedy text: one process, then 2 and 3 ranks.
    rc, one, err, _ = run([b, "run", "-m", m] + gen)
    check(rc == 0 and len(one) > 20, "one process generates", err[-300:])
    for ranks, split in ((2, None), (3, None), (2, "1,3"), (3, "3,1,1")):
        extra = ["--rank-split", split] if split else []
        rc, out, err, _ = run(mpirun(ranks) + [b, "run", "-m", m] + gen + ["--mpi", "-v"] + extra)
        what = f"{ranks} ranks{' --rank-split ' + split if split else ''}"
        check(rc == 0, f"{what}: exit 0", err[-3000:])
        check(out == one, f"{what}: the one process's greedy text", f"{out!r} vs {one!r}")
        check(f"MPI job of {ranks} ranks:" in err, f"{what}: the ranks are named", err[-800:])
        for r in range(ranks):
            check(f"polystack: rank {r} on " in err, f"{what}: run -v shows rank {r}")
        check("resident" in err and "hop from rank 0" in err,
              f"{what}: run -v shows each rank's memory and hop")
        if split == "1,3":
            # stories260K: 5 layers; a quarter of the bytes on rank 0 leaves it the input and
            # fewer layers than rank 1.
            line = [x for x in err.splitlines() if x.startswith("polystack: rank 0 on ")]
            check(line and "layers 3-4" not in line[0], f"{what}: rank 0 holds the smaller share",
                  str(line))

    # The default model (Gemma 3 270M, when installed; not in a sanitizer build): the same text on
    # 2 ranks, and each rank's memory near its share rather than the whole model.
    rc, one_default, err, _ = run([b, "run"] + gen, timeout=300)
    single_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    if rc != 0 or sanitizer_build(b):
        print("skip: the default model part (not installed, or a sanitizer build):", err[-200:])
    else:
        rc, out, err, _ = run(mpirun(2) + [b, "run"] + gen + ["--mpi", "-v"], timeout=300)
        check(rc == 0 and out == one_default, "default model on 2 ranks: the one process's text",
              f"{out!r} vs {one_default!r} {err[-300:]}")
        peaks = [float(x) * {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[u] for x, u in
                 re.findall(r"polystack: rank \d+: resident [0-9.]+ \w+, peak ([0-9.]+) (\w+)", err)]
        print(f"peak resident: one process {single_peak / 2**20:.1f} MiB, ranks "
              f"{', '.join(f'{p / 2**20:.1f} MiB' for p in peaks)}")
        check(len(peaks) == 2 and max(peaks) < single_peak and min(peaks) < single_peak / 2,
              "default model on 2 ranks: each rank's memory is its share, not the whole model")

    # doctor names which rank would hold what.
    rc, out, err, _ = run(mpirun(2) + [b, "doctor", "-m", m, "--mpi", "--json"])
    try:
        mpi = {c["id"]: c for c in json.loads(out)["checks"] if c["api"] == "mpi"}
    except ValueError:
        mpi = {}
    ranks = mpi.get("mpi.ranks", {})
    check(mpi.get("mpi.module", {}).get("status") == "ok" and ranks.get("status") == "ok"
          and "rank 0 on" in ranks.get("summary", "") and "rank 1 on" in ranks.get("summary", "")
          and "output" in ranks.get("summary", ""), "doctor --mpi: which rank holds what",
          (out + err)[-800:])

    # A GPU inside a rank: each rank splits its own layers between vulkan:0 (lavapipe, where
    # present) and its CPU.
    vk = ["--device", "vulkan:0", "-ngl", "2"]
    rc, one_vk, err = 1, "", "a sanitizer build (lavapipe's work is not instrumented, and slow)"
    if not sanitizer_build(b):
        rc, one_vk, err, _ = run([b, "run", "-m", m] + gen + vk, timeout=300)
    if rc != 0:
        print("skip: vulkan:0 is not usable here:", err.strip().splitlines()[-1:])
    else:
        rc, out, err, _ = run(mpirun(2) + [b, "run", "-m", m] + gen + vk + ["--mpi", "-v"],
                              timeout=300)
        check(rc == 0 and out == one_vk, "2 ranks, each with vulkan:0 beside its CPU: the one "
              "process's text", f"{out!r} vs {one_vk!r} {err[-400:]}")
        # -ngl 2 counts rank 0's own layers (input + layers 0-2 of stories260K's 5).
        check("polystack: plan: layers 1-2 on vulkan:0" in err,
              "2 ranks with vulkan:0: -ngl 2 puts rank 0's last 2 layers on its GPU", err[-800:])

    # bench over 2 ranks.
    rc, out, err, _ = run(mpirun(2) + [b, "bench", "-m", m, "-p", "16", "-n", "8", "-r", "1",
                                      "--mpi"])
    check(rc == 0 and "tg8" in out, "bench --mpi measures", (out + err)[-500:])

    # serve: concurrent requests, pipelined, with the one process's text.
    bodies = [{"prompt": p, "max_tokens": 24, "temperature": 0}
              for p in ("Once upon a time", "The little dog", "Lily and Ben went")]

    def answers(server):
        with concurrent.futures.ThreadPoolExecutor(len(bodies)) as ex:
            got = list(ex.map(lambda body: server.request("POST", "/v1/completions", body),
                              bodies))
        return [(s, r["choices"][0]["text"] if s == 200 else r) for s, r in got]

    # An embedding request (hidden states, not logits, come back from the last rank), then the
    # completions again: the workers go on after it.
    embed = {"input": ["Once upon a time", "The little dog"]}

    def embeddings(server):
        status, r = server.request("POST", "/v1/embeddings", embed)
        return [d["embedding"] for d in r["data"]] if status == 200 else r

    sargs = ["--parallel", "3", "--deterministic", "--metrics"]
    single = Server(b, m, sargs, on_fail=lambda msg: check(False, msg))
    want = answers(single)
    want_embed = embeddings(single)
    single.stop()
    check(all(s == 200 for s, _ in want), "one server answers", str(want))
    server = Server(b, m, sargs + ["--mpi"], on_fail=lambda msg: check(False, msg),
                    launcher=mpirun(3))
    got = answers(server)
    check(got == want, "serve --mpi (3 ranks): the one server's answers", f"{got} vs {want}")
    got_embed = embeddings(server)
    check(isinstance(got_embed, list) and len(got_embed) == 2 and all(
        max(abs(x - y) for x, y in zip(g, w)) < 1e-5 for g, w in zip(got_embed, want_embed)),
        "serve --mpi: embeddings as the one server's", f"{str(got_embed)[:300]}")
    check(answers(server) == want, "serve --mpi: completions after an embedding request")
    status, metrics = server.request("GET", "/metrics")
    check(status == 200 and 'polystack_rank_info{rank="2"' in str(metrics)
          and "polystack_rank_resident_bytes" in str(metrics), "/metrics lists the ranks",
          str(metrics)[-600:])
    rc, err = server.stop()
    check(rc != -1, "serve --mpi stops on SIGTERM", err[-300:])

    # A rank killed at its first pass: the job ends within seconds and rank 0 names it.
    env = dict(os.environ, POLYSTACK_TEST_MPI_EXIT_RANK="2")
    rc, out, err, secs = run(mpirun(3, ["-x", "POLYSTACK_TEST_MPI_EXIT_RANK"]) +
                             [b, "run", "-m", m] + gen + ["--mpi"], timeout=60, env=env)
    check(rc != 0, "a killed rank: the job fails", f"rc {rc}")
    check(secs < 30, f"a killed rank: the job ends within 30 s ({secs:.1f} s)")
    check("waiting for rank 2" in err and "rank 2" in err, "a killed rank: rank 0 names it",
          err[-800:])

    with tempfile.TemporaryDirectory(prefix="polystack-mpi-") as tmp:
        # Another model file on rank 1 (MPMD: each rank its own command line).
        other = os.path.join(tmp, "other.gguf")
        data = bytearray(Path(m).read_bytes())
        data[-100] ^= 0x55
        Path(other).write_bytes(bytes(data))
        rc, out, err, _ = run(["mpirun", "--oversubscribe", "-np", "1", b, "run", "-m", m] + gen +
                              ["--mpi", ":", "-np", "1", b, "run", "-m", other] + gen + ["--mpi"])
        check(rc != 0 and "rank 1" in err and "different model" in err,
              "a rank with another model file is refused", err[-600:])

    env = dict(os.environ, POLYSTACK_TEST_VERSION="9.9.9")
    rc, out, err, _ = run(mpirun(2, ["-x", "POLYSTACK_TEST_VERSION"]) + [b, "run", "-m", m] +
                          gen + ["--mpi"], env=env)
    check(rc != 0 and "runs polystack 9.9.9" in err, "a rank of another version is refused",
          err[-600:])

    rc, out, err, _ = run(mpirun(7) + [b, "run", "-m", m] + gen + ["--mpi"])
    check(rc != 0 and "7 ranks for a model of 5 layers" in err, "more ranks than layers: refused",
          err[-600:])
    rc, out, err, _ = run(mpirun(2) + [b, "run", "-m", m] + gen + ["--mpi", "--rank-split", "1,2,3"])
    check(rc != 0 and "--rank-split has 3 proportions for 2 ranks" in err,
          "a --rank-split of the wrong length: refused", err[-600:])

    # No module: --mpi says how to get MPI.
    env = dict(os.environ, POLYSTACK_MPI_MODULE="/nonexistent/libpolystack-mpi.so")
    rc, out, err, _ = run([b, "run", "-m", m] + gen + ["--mpi"], env=env)
    check(rc == 2 and "built without MPI" in err and "apt install openmpi-bin" in err
          and len(err.strip().splitlines()) == 1, "no MPI module: one line saying how to get it",
          err)
    # One process with --mpi (no mpirun): runs, saying there is nothing to spread.
    rc, out, err, _ = run([b, "run", "-m", m] + gen + ["--mpi"])
    check(rc == 0 and out == one and "job of one rank" in err,
          "--mpi without mpirun: the whole model here, said", err[-400:])

    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
