#!/usr/bin/env python3
"""Turns `polystack bench --json` output into a PNG bar chart: one group of bars per test (pp512,
tg128, ...), one bar per device and thread count, each labelled with its tokens/s and its ratio
to the first device.

    polystack bench -m model.gguf --device cpu,vulkan:0 --json > bench.json
    python3 scripts/plot_bench.py bench.json -o bench.png
"""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="bench --json output ('-' for standard input)")
    ap.add_argument("-o", "--out", required=True, help="PNG file to write")
    ap.add_argument("--title", help="chart title (default: the model)")
    args = ap.parse_args()
    text = sys.stdin.read() if args.json == "-" else open(args.json, encoding="utf-8").read()
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as e:
        print(f"plot_bench: {args.json}: not JSON ({e})", file=sys.stderr)
        return 1
    if not isinstance(rows, list) or not rows or not all(
            isinstance(r, dict) and {"test", "device", "avg_ts"} <= r.keys() for r in rows):
        print(f"plot_bench: {args.json}: not the output of `polystack bench --json`",
              file=sys.stderr)
        return 1

    tests = list(dict.fromkeys(r["test"] for r in rows))
    # A series per device (or split), -ngl and thread count.
    series = list(dict.fromkeys((r["device"], r.get("threads", 0), r.get("n_gpu_layers", ""))
                                for r in rows))
    # Thread counts in the labels only for a device tested at several.
    counts = {d: sum(1 for dd, _, _ in series if dd == d) for d, _, _ in series}
    several_ngl = len({n for _, _, n in series}) > 1
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6, 2 + 1.6 * len(tests) * len(series) / 2), 4.5))
    for k, (device, threads, ngl) in enumerate(series):
        xs, ys, labels = [], [], []
        for i, test in enumerate(tests):
            r = next((r for r in rows if r["test"] == test and r["device"] == device
                      and r.get("threads", 0) == threads
                      and r.get("n_gpu_layers", "") == ngl), None)
            if r is None:
                continue
            xs.append(i + (k - (len(series) - 1) / 2) * width)
            ys.append(r["avg_ts"])
            ratio = r.get("ratio")
            labels.append(f"{r['avg_ts']:.1f}" + (f"\n{ratio:.2f}x" if ratio else ""))
        name = f"{device}, {threads} threads" if counts[device] > 1 and not several_ngl \
            else device
        if several_ngl:
            name += f", -ngl {ngl}"
        bars = ax.bar(xs, ys, width, label=name)
        ax.bar_label(bars, labels=labels, fontsize=7, padding=2)
    ax.set_xticks(range(len(tests)), tests)
    ax.set_ylabel("tokens / s")
    ax.set_title(args.title or f"{rows[0].get('model', '')}: ratios to {rows[0].get('ratio_to', series[0][0])}")
    ax.margins(y=0.2)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"plot_bench: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
