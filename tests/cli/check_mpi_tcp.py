#!/usr/bin/env python3
"""A model across two ranks whose bytes cross a real network stack: two network namespaces
joined by a veth pair, rank 0 in one and rank 1 in the other, Open MPI's TCP transport alone
(`--mca btl tcp,self`, bound to the pair's subnet). mpirun reaches the second namespace through
a launcher script in place of ssh (plm_rsh_agent), as it would reach another host.

Checks: the greedy text is the one process's; the veth pair carried the activations (its byte
counters grew); rank 0 reports the hop. Exit 77 (skip), saying why, where the machine does not
allow it: no mpirun, no MPI module, not root, no `ip`, or namespaces that cannot be made.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from servertest import mpi_problem  # noqa: E402

SKIP = 77


def sh(*cmd, check=True):
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check)


def veth_bytes(ns, dev):
    """(rx, tx) bytes of dev inside ns."""
    base = f"/sys/class/net/{dev}/statistics"
    out = sh("ip", "netns", "exec", ns, "cat", f"{base}/rx_bytes", f"{base}/tx_bytes").stdout
    rx, tx = out.split()
    return int(rx), int(tx)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    a = ap.parse_args()
    why = mpi_problem(a.bin, a.model)
    if why:
        print(f"SKIP: {why}")
        return SKIP
    if os.geteuid() != 0:
        print("SKIP: network namespaces and a veth pair need root")
        return SKIP
    if not shutil.which("ip"):
        print("SKIP: no `ip` command (Debian: iproute2)")
        return SKIP
    tag = str(os.getpid() % 100000)
    ns = [f"psmpiA{tag}", f"psmpiB{tag}"]
    dev = [f"psva{tag}", f"psvb{tag}"]
    addr = ["10.231.7.1", "10.231.7.2"]
    made = []
    try:
        try:
            for n in ns:
                sh("ip", "netns", "add", n)
                made.append(n)
            sh("ip", "link", "add", dev[0], "type", "veth", "peer", "name", dev[1])
            for i in range(2):
                sh("ip", "link", "set", dev[i], "netns", ns[i])
                sh("ip", "-n", ns[i], "addr", "add", f"{addr[i]}/24", "dev", dev[i])
                sh("ip", "-n", ns[i], "link", "set", dev[i], "up")
                sh("ip", "-n", ns[i], "link", "set", "lo", "up")
        except subprocess.CalledProcessError as e:
            print(f"SKIP: this machine does not allow a veth pair between namespaces: "
                  f"{' '.join(e.cmd)}: {e.stderr.strip()}")
            return SKIP
        gen = ["run", "-m", a.model, "-p", "Once upon a time", "-n", "32", "--temp", "0"]
        one = subprocess.run([a.bin] + gen, capture_output=True, text=True, timeout=120)
        with tempfile.TemporaryDirectory(prefix="polystack-mpi-tcp-") as tmp:
            agent = Path(tmp) / "agent.sh"
            agent.write_text(
                "#!/bin/sh\n# mpirun's launcher in place of ssh: the host is a namespace's address.\n"
                f'host=$1\nshift\ncase "$host" in {addr[1]}) ns={ns[1]} ;; *) ns={ns[0]} ;; esac\n'
                'exec ip netns exec "$ns" sh -c "$*"\n')
            agent.chmod(0o755)
            hosts = Path(tmp) / "hosts"
            hosts.write_text(f"{addr[0]} slots=1\n{addr[1]} slots=1\n")
            before = veth_bytes(ns[1], dev[1])
            cmd = ["ip", "netns", "exec", ns[0], "mpirun", "--hostfile", str(hosts), "-np", "2",
                   "--mca", "plm_rsh_agent", str(agent), "--mca", "btl", "tcp,self",
                   "--mca", "btl_tcp_if_include", "10.231.7.0/24",
                   "--mca", "oob_tcp_if_include", "10.231.7.0/24", a.bin] + gen + ["--mpi", "-v"]
            print("running:", " ".join(cmd))
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
            after = veth_bytes(ns[1], dev[1])
    finally:
        for n in made:
            sh("ip", "netns", "del", n, check=False)
    problems = 0

    def check(ok, what, detail=""):
        nonlocal problems
        print(("ok: " if ok else "FAIL: ") + what, "" if ok else detail)
        problems += 0 if ok else 1

    check(p.returncode == 0, "2 ranks over TCP: exit 0", p.stderr[-800:])
    check(p.stdout == one.stdout and len(one.stdout) > 20,
          "2 ranks over TCP: the one process's greedy text", f"{p.stdout!r} vs {one.stdout!r}")
    moved = (after[0] - before[0]) + (after[1] - before[1])
    # stories260K's activations: 64 floats per token; 32 decode steps and the prompt, both ways
    # (logits of 512 floats come back): tens of KiB at least.
    check(moved > 32 * 1024, f"the veth pair carried {moved} bytes", str((before, after)))
    hop = re.search(r"hop from rank 0 ([0-9.]+) us", p.stderr)
    check(hop is not None, "rank 0 reports the hop", p.stderr[-600:])
    if hop:
        print(f"hop from rank 0 to rank 1 over the veth pair: {hop.group(1)} us")
    print(f"{problems} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
