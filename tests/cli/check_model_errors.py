#!/usr/bin/env python3
"""Files of the llama family that are subtly wrong, each refused in one clear line.

Every case writes a one-layer model with gguf.GGUFWriter (random F32 weights, no vocabulary:
`polystack logits` runs without a tokenizer), breaks one thing, and expects `polystack logits`
to end with exit 1 and a single "polystack: error:" line holding the given words; or, for a
tensor known to be redundant, to run and print a warning. The good files of each architecture
run, so that every refusal is about the one thing broken. `inspect --json` names each file's
features (biases, QK-norm, RoPE factors, a window) or why it cannot run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import gguf

N_EMBD, N_HEAD, N_HEAD_KV, N_FF, N_VOCAB, HEAD = 32, 4, 2, 48, 20, 8
Q_DIM, KV_DIM = N_HEAD * HEAD, N_HEAD_KV * HEAD


def tensors_for(arch: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    def w(rows: int, cols: int) -> np.ndarray:  # GGUF shape [cols, rows]: numpy (rows, cols)
        return (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)

    def vec(n: int) -> np.ndarray:
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    t = {"token_embd.weight": w(N_VOCAB, N_EMBD), "output_norm.weight": vec(N_EMBD),
         "output.weight": w(N_VOCAB, N_EMBD), "blk.0.attn_norm.weight": vec(N_EMBD),
         "blk.0.attn_output.weight": w(N_EMBD, Q_DIM), "blk.0.ffn_norm.weight": vec(N_EMBD),
         "blk.0.ffn_down.weight": w(N_EMBD, N_FF)}
    if arch == "phi3":
        t["blk.0.attn_qkv.weight"] = w(Q_DIM + 2 * KV_DIM, N_EMBD)
        t["blk.0.ffn_up.weight"] = w(2 * N_FF, N_EMBD)
    else:
        t["blk.0.attn_q.weight"] = w(Q_DIM, N_EMBD)
        t["blk.0.attn_k.weight"] = w(KV_DIM, N_EMBD)
        t["blk.0.attn_v.weight"] = w(KV_DIM, N_EMBD)
        t["blk.0.ffn_gate.weight"] = w(N_FF, N_EMBD)
        t["blk.0.ffn_up.weight"] = w(N_FF, N_EMBD)
    if arch == "qwen2":
        for name, n in (("q", Q_DIM), ("k", KV_DIM), ("v", KV_DIM)):
            t[f"blk.0.attn_{name}.bias"] = (0.1 * rng.standard_normal(n)).astype(np.float32)
    if arch == "qwen3":
        t["blk.0.attn_q_norm.weight"] = vec(HEAD)
        t["blk.0.attn_k_norm.weight"] = vec(HEAD)
    return t


def write(path: str, arch: str, tensors: dict[str, np.ndarray], kv: dict) -> None:
    wr = gguf.GGUFWriter(path, arch)
    a = arch
    base = {f"{a}.context_length": 128, f"{a}.embedding_length": N_EMBD,
            f"{a}.block_count": 1, f"{a}.feed_forward_length": N_FF,
            f"{a}.attention.head_count": N_HEAD, f"{a}.attention.head_count_kv": N_HEAD_KV,
            f"{a}.attention.layer_norm_rms_epsilon": 1e-5, f"{a}.rope.dimension_count": HEAD}
    base.update(kv)
    for k, v in base.items():
        if v is None:
            continue
        if isinstance(v, str):
            wr.add_string(k, v)
        elif isinstance(v, float):
            wr.add_float32(k, v)
        else:
            wr.add_uint32(k, v)
    for name, data in tensors.items():
        wr.add_tensor(name, data)
    wr.write_header_to_file()
    wr.write_kv_data_to_file()
    wr.write_tensors_to_file()
    wr.close()


def run_logits(binary: str, model: str, out: str) -> subprocess.CompletedProcess:
    return subprocess.run([binary, "logits", "-m", model, "--tokens", "1 2 3", "--out", out],
                          capture_output=True, text=True, timeout=120)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    a = ap.parse_args()
    rng = np.random.default_rng(7)
    ok = True
    with tempfile.TemporaryDirectory(prefix="polystack-model-errors-") as tmp:
        out = os.path.join(tmp, "logits.bin")

        def case(label: str, arch: str, words: str | None, drop=(), add=None, kv=None,
                 warning: str | None = None) -> None:
            nonlocal ok
            t = tensors_for(arch, rng)
            for name in drop:
                del t[name]
            t.update(add or {})
            path = os.path.join(tmp, f"{len(os.listdir(tmp))}.gguf")
            write(path, arch, t, kv or {})
            r = run_logits(a.bin, path, out)
            lines = [ln for ln in r.stderr.strip().splitlines() if ln]
            if words is None:  # must run; optionally with a warning
                good = r.returncode == 0 and (warning is None or any(
                    "warning" in ln and warning in ln for ln in lines))
            else:
                good = (r.returncode == 1 and len(lines) == 1
                        and lines[0].startswith("polystack: error:") and words in lines[0])
            print(f"{'ok' if good else 'FAIL'}: {label}: exit {r.returncode}: "
                  f"{r.stderr.strip()[-400:]}")
            ok &= good

        for arch in ("llama", "qwen2", "qwen3", "phi3"):
            case(f"a good {arch} file runs", arch, None)
        freqs = np.linspace(1.0, 8.0, HEAD // 2).astype(np.float32)
        case("llama with rope_freqs runs", "llama", None, add={"rope_freqs.weight": freqs})
        case("rope_freqs of the wrong length", "llama", "tensor 'rope_freqs.weight' has shape",
             add={"rope_freqs.weight": freqs[:-1]})
        case("an unknown rope scaling type", "llama",
             "metadata 'llama.rope.scaling.type' = 'su-v2' is not supported",
             kv={"llama.rope.scaling.type": "su-v2", "llama.rope.scaling.factor": 4.0})
        case("longrope without its factor tensors", "llama",
             "rope.scaling.type is 'longrope' but the file has no rope_factors_long.weight",
             kv={"llama.rope.scaling.type": "longrope"})
        case("longrope on an architecture without LongRoPE factors", "qwen2",
             "metadata 'qwen2.rope.scaling.type' = 'longrope' is read for llama and phi3",
             kv={"qwen2.rope.scaling.type": "longrope"})
        longrope = {"rope_factors_long.weight": freqs, "rope_factors_short.weight": freqs[::-1]}
        case("llama with longrope runs", "llama", None, add=longrope,
             kv={"llama.rope.scaling.type": "longrope"})
        yarn = {"llama.rope.scaling.type": "yarn", "llama.rope.scaling.factor": 4.0,
                "llama.rope.scaling.original_context_length": 32}
        case("llama with YaRN runs", "llama", None, kv=yarn)
        case("YaRN with a factor below 1", "llama", "needs 'llama.rope.scaling.factor' >= 1",
             kv={**yarn, "llama.rope.scaling.factor": 0.5})
        case("YaRN with a zero beta_fast", "llama", "beta_fast (0) and beta_slow (1) must be positive",
             kv={**yarn, "llama.rope.scaling.yarn_beta_fast": 0.0})
        case("YaRN with an ext_factor out of range", "llama",
             "metadata 'llama.rope.scaling.yarn_ext_factor'",
             kv={**yarn, "llama.rope.scaling.yarn_ext_factor": 100.0})
        case("phi3 with LongRoPE factors and YaRN", "phi3",
             "both LongRoPE factors and YaRN scaling",
             add={"rope_factors_short.weight": freqs, "rope_factors_long.weight": freqs},
             kv={"phi3.rope.scaling.type": "yarn", "phi3.rope.scaling.factor": 4.0})
        case("a tensor no architecture uses", "llama",
             "tensor 'blk.0.ffn_mystery.weight' is not used by the llama architecture",
             add={"blk.0.ffn_mystery.weight": np.ones((4, 4), np.float32)})
        case("rope_freqs in a qwen2 file", "qwen2",
             "tensor 'rope_freqs.weight' is not used by the qwen2 architecture",
             add={"rope_freqs.weight": freqs})
        case("an old rotary table is only a warning", "llama", None,
             add={"blk.0.attn_rot_embd.weight": np.ones((4, 4), np.float32)},
             warning="blk.0.attn_rot_embd.weight")
        case("qwen2 without a bias", "qwen2", "tensor 'blk.0.attn_k.bias' is missing",
             drop=["blk.0.attn_k.bias"])
        case("qwen2 with a bias of the wrong length", "qwen2", "tensor 'blk.0.attn_v.bias' has shape",
             add={"blk.0.attn_v.bias": np.zeros(KV_DIM + 1, np.float32)})
        case("qwen3 without QK-norm", "qwen3", "tensor 'blk.0.attn_q_norm.weight' is missing",
             drop=["blk.0.attn_q_norm.weight"])
        case("qwen3 with a head size of its own", "qwen3", None,
             kv={"qwen3.attention.key_length": HEAD, "qwen3.attention.value_length": HEAD})
        case("qwen3 key_length that does not match the tensors", "qwen3",
             "tensor 'blk.0.attn_q.weight' has shape",
             kv={"qwen3.attention.key_length": 16, "qwen3.attention.value_length": 16,
                 "qwen3.rope.dimension_count": 16})
        case("phi3 fused QKV of the wrong size", "phi3", "tensor 'blk.0.attn_qkv.weight' has shape",
             add={"blk.0.attn_qkv.weight": np.zeros((Q_DIM + KV_DIM, N_EMBD), np.float32)})
        case("phi3 fused gate+up of the wrong size", "phi3", "tensor 'blk.0.ffn_up.weight' has shape",
             add={"blk.0.ffn_up.weight": np.zeros((N_FF, N_EMBD), np.float32)})
        case("phi3 with only the short LongRoPE factors", "phi3", "only one of rope_factors_short",
             add={"rope_factors_short.weight": freqs})
        case("phi3 LongRoPE factors of the wrong length", "phi3",
             "tensor 'rope_factors_long.weight' has shape",
             add={"rope_factors_short.weight": freqs, "rope_factors_long.weight": freqs[:-1]})
        case("phi3 with LongRoPE and a window runs", "phi3", None,
             add={"rope_factors_short.weight": freqs, "rope_factors_long.weight": freqs * 2},
             kv={"phi3.rope.scaling.original_context_length": 64,
                 "phi3.rope.scaling.attn_factor": 1.2, "phi3.attention.sliding_window": 2})
        case("phi3 with a negative attn_factor", "phi3",
             "metadata 'phi3.rope.scaling.attn_factor' = -1 is out of range",
             kv={"phi3.rope.scaling.attn_factor": -1.0})
        # Mixtures of experts: the counts checked before any tensor is looked for; a Mixtral
        # (llama with experts) without its router names the tensor.
        case("a qwen3moe without expert_count", "qwen3moe",
             "metadata 'qwen3moe.expert_count' is missing or 0")
        case("more experts per token than experts", "qwen3moe",
             "'qwen3moe.expert_used_count'",
             kv={"qwen3moe.expert_count": 4, "qwen3moe.expert_used_count": 5})
        case("a router over another gating function", "qwen3moe", "expert_gating_func",
             kv={"qwen3moe.expert_count": 4, "qwen3moe.expert_used_count": 2,
                 "qwen3moe.expert_gating_func": 2})
        case("a Mixtral without its router", "llama", "tensor 'blk.0.ffn_gate_inp.weight' is missing",
             kv={"llama.expert_count": 4, "llama.expert_used_count": 2})

        # `inspect --json` names the features a file uses, or why polystack cannot run it.
        def inspect(label: str, arch: str, expect: list[str], add=None, kv=None,
                    error: str | None = None) -> None:
            nonlocal ok
            t = tensors_for(arch, rng)
            t.update(add or {})
            path = os.path.join(tmp, f"{len(os.listdir(tmp))}.gguf")
            write(path, arch, t, kv or {})
            r = subprocess.run([a.bin, "inspect", "--json", path], capture_output=True,
                               text=True, timeout=60)
            info = json.loads(r.stdout) if r.returncode == 0 else {}
            if error:
                good = error in info.get("model_error", "")
            else:
                feats = " | ".join(info.get("model", {}).get("features", []))
                good = all(e in feats for e in expect) and (bool(expect) or not feats)
            print(f"{'ok' if good else 'FAIL'}: inspect: {label}: "
                  f"{info.get('model', info.get('model_error', r.stderr.strip()))}")
            ok &= good

        inspect("plain llama", "llama", [])
        inspect("llama 3.1 factors", "llama", ["RoPE frequency factors"],
                add={"rope_freqs.weight": freqs})
        inspect("llama with YaRN", "llama",
                ["YaRN RoPE scaling (factor 4 over an original context of 32; ext_factor 1, "
                 "beta 32/1, magnitude 1.139)"], kv=yarn)
        inspect("qwen2", "qwen2", ["biases on Q, K and V"])
        inspect("qwen3", "qwen3", ["QK-norm"])
        inspect("phi3 with LongRoPE and a window", "phi3",
                ["fused QKV", "LongRoPE", "sliding window of 6 positions"],
                add={"rope_factors_short.weight": freqs, "rope_factors_long.weight": freqs},
                kv={"phi3.attention.sliding_window": 6})
        inspect("a file it cannot run", "llama", [], error="is not used by the llama",
                add={"blk.0.ffn_mystery.weight": np.ones((4, 4), np.float32)})
        inspect("a file without the metadata a model needs", "llama", [],
                error="metadata 'llama.embedding_length' is missing",
                kv={"llama.embedding_length": None})
    print("all cases passed" if ok else "some cases FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
