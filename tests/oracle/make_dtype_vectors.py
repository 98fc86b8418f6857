#!/usr/bin/env python3
"""Writes dtype test vectors made by the gguf package, for tests/unit/dtype_oracle_test.cpp.

For each type T of F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4 the file holds three tensors of
7 rows x 160 columns (5 blocks of 32 per row):
  src.T  F32 source values
  q.T    gguf.quants.quantize(src.T, T), stored as type T
  ref.T  gguf.quants.dequantize(q.T, T), stored as F32

The rows mix magnitudes (1e-9 .. 6e4) and hold edge blocks: constant values (d = 0 for the
min/max types), an all-zero block, positive-only and negative-only blocks, equal +/- extremes
(which sign becomes the scale), one outlier among small values, and exact .5 ties after
scaling. The last row holds type-specific values: for F16 / BF16 infinities, NaN, overflow,
subnormals and round-to-even halfway points; for block types log-uniform magnitudes.

For each k-quant type T of Q2_K .. Q6_K, and IQ4_NL and IQ4_XS (the gguf package dequantizes
them but does not quantize) the file holds 7 rows of 2 blocks of random bytes, their fp16 scales
set to finite values of mixed magnitudes:
  q.T    the blocks, stored as type T
  ref.T  gguf.quants.dequantize(q.T, T), stored as F32

Usage: make_dtype_vectors.py --out dtype_vectors.gguf [--seed N]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

TYPES = ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "MXFP4"]
ROWS, BLOCK, BLOCKS = 7, 32, 5
COLS = BLOCK * BLOCKS
# dequantize-only type: (bytes per block, byte offsets of its fp16 scale fields, elements per
# block)
K_TYPES = {"Q2_K": (84, (80, 82), 256), "Q3_K": (110, (108,), 256), "Q4_K": (144, (0, 2), 256),
           "Q5_K": (176, (0, 2), 256), "Q6_K": (210, (208,), 256), "IQ4_NL": (18, (0,), 32),
           "IQ4_XS": (136, (0,), 256)}
K_BLOCKS = 2


def common_rows(rng: np.random.Generator) -> np.ndarray:
    x = np.empty((ROWS - 1, COLS), dtype=np.float32)
    blk = lambda row, b: x[row, b * BLOCK:(b + 1) * BLOCK]  # noqa: E731

    x[0] = rng.standard_normal(COLS)

    x[1] = rng.standard_normal(COLS) * 1e-3
    blk(1, 2)[:] = 0.25  # constant block

    x[2] = rng.uniform(-6e4, 6e4, COLS)  # near the fp16 range, where the scales still fit
    blk(2, 4)[:] = -3.0

    x[3] = rng.standard_normal(COLS) * 1e-5  # scales become fp16 subnormals
    blk(3, 1)[:] = rng.standard_normal(BLOCK) * 1e-9  # scales underflow to zero

    x[4] = rng.standard_normal(COLS) * 10
    # Q8_0 with amax 127 has d = 1, so k + 0.5 stays a tie: llama.cpp rounds it away from 0.
    blk(4, 0)[:] = np.concatenate([[127.0, -127.0], np.arange(-14.5, 15.5, 1.0)])
    blk(4, 1)[:] = 0.0
    # Equal magnitudes of both signs: the first one found sets the sign of the Q4_0/Q5_0 scale.
    b = rng.standard_normal(BLOCK)
    b[3], b[20] = 7.0, -7.0
    blk(4, 2)[:] = b
    b = rng.standard_normal(BLOCK)
    b[5], b[9] = -7.0, 7.0
    blk(4, 3)[:] = b
    # Q4_0 / Q5_0 with max -8 / -16 have d = 1: halves on the scaled grid.
    blk(4, 4)[:] = np.concatenate([[-8.0], np.arange(-7.5, 8.0, 0.5)])[:BLOCK]

    x[5] = rng.standard_normal(COLS)
    blk(5, 0)[:] = rng.uniform(2.0, 5.0, BLOCK)  # positive only: min > 0
    blk(5, 1)[:] = rng.uniform(-5.0, -2.0, BLOCK)  # negative only
    b = rng.standard_normal(BLOCK) * 1e-2
    b[17] = 300.0
    blk(5, 2)[:] = b  # one outlier
    blk(5, 3)[:] = np.linspace(-1.0, 1.0, BLOCK)
    blk(5, 4)[:] = rng.uniform(-1.0, 1.0, BLOCK).astype(np.float16).astype(np.float32)
    return x


def special_row(qtype: str, rng: np.random.Generator) -> np.ndarray:
    if qtype in ("F16", "BF16"):
        v = np.float32
        specials = [
            np.inf, -np.inf, np.nan, -np.nan, 0.0, -0.0,
            65504.0, 65519.99, 65520.0, 1e5, -1e6, 3.4e38,  # fp16 max, its rounding edge, overflow
            6e-8, 5.96e-8, 2.98e-8, 2.99e-8, 1e-8, -3e-5, 6.1e-5,  # fp16 subnormals and below
            1.0 + 2**-11, 1.0 + 3 * 2**-11, 1.0 + 2**-8, 1.0 + 3 * 2**-8,  # halfway points
            -(1.0 + 2**-11), 2049.0, 2051.0, 1e-40, -1e-45, 1.17549435e-38, 3.3895314e38,
        ]
        row = rng.standard_normal(COLS).astype(np.float32) * 100
        row[: len(specials)] = np.array(specials, dtype=v)
        return row
    mag = 10.0 ** rng.uniform(-6, 4, COLS)
    return (mag * rng.choice([-1.0, 1.0], COLS)).astype(np.float32)


def random_k_blocks(name: str, rng: np.random.Generator) -> np.ndarray:
    size, scale_fields, _ = K_TYPES[name]
    q = rng.integers(0, 256, (ROWS, K_BLOCKS, size), dtype=np.uint8)
    for off in scale_fields:
        scale = rng.standard_normal((ROWS, K_BLOCKS)) * 10.0 ** rng.uniform(-5, 1, (ROWS, K_BLOCKS))
        q[:, :, off:off + 2] = scale.astype(np.float16).view(np.uint8).reshape(ROWS, K_BLOCKS, 2)
    return q.reshape(ROWS, K_BLOCKS * size)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20240601)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    base = common_rows(rng)

    writer = gguf.GGUFWriter(a.out, "polystack-dtype-vectors")
    writer.add_string("polystack.dtype_vectors.types", " ".join(TYPES))
    for name in TYPES:
        qtype = QT[name]
        src = np.concatenate([base, special_row(name, rng)[None, :]]).astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            q = gguf.quants.quantize(src, qtype)
            ref = gguf.quants.dequantize(q, qtype).astype(np.float32)
        writer.add_tensor(f"src.{name}", src)
        if qtype == QT.F16:
            writer.add_tensor(f"q.{name}", q)
        else:
            writer.add_tensor(f"q.{name}", q, raw_dtype=qtype)
        writer.add_tensor(f"ref.{name}", ref.reshape(ROWS, COLS))
    writer.add_string("polystack.dtype_vectors.dequantize_only_types", " ".join(K_TYPES))
    for name in K_TYPES:
        q = random_k_blocks(name, rng)
        ref = gguf.quants.dequantize(q, QT[name]).astype(np.float32)
        writer.add_tensor(f"q.{name}", q, raw_dtype=QT[name])
        writer.add_tensor(f"ref.{name}", ref.reshape(ROWS, K_BLOCKS * K_TYPES[name][2]))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(f"wrote {a.out}: {', '.join(TYPES)}; {ROWS} x {COLS} each; "
          f"{', '.join(K_TYPES)}: {ROWS} x {K_BLOCKS} blocks each")
    return 0


if __name__ == "__main__":
    sys.exit(main())
