#!/usr/bin/env python3
"""Independent numpy reference of the llama forward pass, for checking polystack's logits.

Weights are read with gguf.GGUFReader and dequantized with the gguf package, then the whole
computation runs in float64, so the only differences from an exact result are the stored
weights themselves. Conventions follow llama.cpp for llama GGUF files:
  - RMSNorm: x / sqrt(mean(x^2) + eps) * w, eps from llama.attention.layer_norm_rms_epsilon.
  - RoPE in ggml's NORMAL mode: adjacent pairs (x[2i], x[2i+1]) of the first n_rot dims of each
    head rotate by pos * base^(-2i/n_rot); linear scaling divides pos by the factor.
  - Grouped-query attention: query head h reads KV head h // (n_head / n_head_kv); causal,
    scale 1/sqrt(head_dim).
  - SwiGLU FFN: down(silu(gate(x)) * up(x)); output.weight, or token_embd.weight when absent.
  - kv_cache="f16" rounds K (after RoPE) and V to fp16, as a KV cache stored in F16 does
    (llama.cpp's default); that storage is part of the computation being checked, like the
    weights' type, so the reference reproduces it instead of widening the tolerance.

Run as a script it decodes greedily from a prompt: llama_ref.py MODEL --prompt "Once upon a time"
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

# Optional hook applied to the input of every weight matmul: (activations, weight type) ->
# activations. The reference itself never uses it; check_logits.py uses it to measure how much
# a backend that rounds activations (to F16, BF16 or 8-bit blocks) may differ.
MatmulInputRounding = Callable[[np.ndarray, QT], np.ndarray]


@dataclass
class LlamaHParams:
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_rot: int
    rope_freq_base: float
    rope_scale: float  # positions are divided by this (1 without scaling)
    rms_eps: float

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


class LlamaModel:
    def __init__(self, path: str):
        self.path = path
        self.reader = gguf.GGUFReader(path)
        arch = self.field("general.architecture")
        if arch != "llama":
            raise ValueError(f"{path}: architecture {arch!r} is not llama")
        n_head = int(self.field("llama.attention.head_count"))
        n_embd = int(self.field("llama.embedding_length"))
        scale = 1.0
        if self.field("llama.rope.scaling.type", "none") == "linear":
            scale = float(self.field("llama.rope.scaling.factor", 1.0))
        self.tensors = {t.name: t for t in self.reader.tensors}
        self.hp = LlamaHParams(
            n_vocab=self.tensors["token_embd.weight"].data.shape[0],
            n_embd=n_embd,
            n_layer=int(self.field("llama.block_count")),
            n_head=n_head,
            n_head_kv=int(self.field("llama.attention.head_count_kv", n_head)),
            n_ff=int(self.field("llama.feed_forward_length")),
            n_rot=int(self.field("llama.rope.dimension_count", n_embd // n_head)),
            rope_freq_base=float(self.field("llama.rope.freq_base", 10000.0)),
            rope_scale=scale,
            rms_eps=float(self.field("llama.attention.layer_norm_rms_epsilon")),
        )
        self._cache: dict[str, np.ndarray] = {}

    def field(self, key: str, default=None):
        f = self.reader.fields.get(key)
        if f is None:
            if default is None:
                raise KeyError(f"{self.path}: metadata key {key} is missing")
            return default
        return f.contents()

    def tensor_type(self, name: str) -> QT:
        return QT(self.tensors[name].tensor_type)

    def weight(self, name: str) -> np.ndarray:
        """Dequantized tensor in numpy order (GGUF dims reversed), as float64."""
        if name not in self._cache:
            t = self.tensors[name]
            values = gguf.quants.dequantize(np.asarray(t.data), QT(t.tensor_type))
            shape = tuple(int(d) for d in reversed(t.shape))
            self._cache[name] = values.reshape(shape).astype(np.float64)
        return self._cache[name]

    def has(self, name: str) -> bool:
        return name in self.tensors


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope_normal(x: np.ndarray, positions: np.ndarray, n_rot: int, base: float,
                scale: float) -> np.ndarray:
    """x: [n_tokens, n_heads, head_dim]. Rotates adjacent pairs of the first n_rot dims."""
    out = x.copy()
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / n_rot)
    theta = (positions.astype(np.float64) / scale)[:, None] * inv_freq[None, :]
    cos = np.cos(theta)[:, None, :]
    sin = np.sin(theta)[:, None, :]
    x0 = x[..., 0:n_rot:2]
    x1 = x[..., 1:n_rot:2]
    out[..., 0:n_rot:2] = x0 * cos - x1 * sin
    out[..., 1:n_rot:2] = x0 * sin + x1 * cos
    return out


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def logits(model_path: str | LlamaModel, token_ids, kv_cache: str = "f32",
           rounding: MatmulInputRounding | None = None) -> np.ndarray:
    """Logits for every position of token_ids (positions 0..n-1): [n_tokens, n_vocab]."""
    if kv_cache not in ("f32", "f16"):
        raise ValueError(f"kv_cache must be f32 or f16, not {kv_cache!r}")
    m = model_path if isinstance(model_path, LlamaModel) else LlamaModel(model_path)
    hp = m.hp
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError("token_ids must be a non-empty 1-D sequence")
    if ids.min() < 0 or ids.max() >= hp.n_vocab:
        raise ValueError(f"token ids must lie in [0, {hp.n_vocab})")
    n = ids.size
    hd = hp.head_dim
    group = hp.n_head // hp.n_head_kv
    positions = np.arange(n)

    def matmul(x: np.ndarray, name: str) -> np.ndarray:
        if rounding is not None:
            x = rounding(x, m.tensor_type(name))
        return x @ m.weight(name).T

    x = m.weight("token_embd.weight")[ids]
    causal = np.triu(np.full((n, n), -np.inf), k=1)
    for layer in range(hp.n_layer):
        b = f"blk.{layer}."
        h = rms_norm(x, m.weight(b + "attn_norm.weight"), hp.rms_eps)
        q = matmul(h, b + "attn_q.weight").reshape(n, hp.n_head, hd)
        k = matmul(h, b + "attn_k.weight").reshape(n, hp.n_head_kv, hd)
        v = matmul(h, b + "attn_v.weight").reshape(n, hp.n_head_kv, hd)
        q = rope_normal(q, positions, hp.n_rot, hp.rope_freq_base, hp.rope_scale)
        k = rope_normal(k, positions, hp.n_rot, hp.rope_freq_base, hp.rope_scale)
        if kv_cache == "f16":
            k = k.astype(np.float16).astype(np.float64)
            v = v.astype(np.float16).astype(np.float64)
        k = np.repeat(k, group, axis=1)  # query head h uses KV head h // group
        v = np.repeat(v, group, axis=1)
        scores = np.einsum("qhd,khd->hqk", q, k) / np.sqrt(hd) + causal[None]
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        attn = np.einsum("hqk,khd->qhd", probs, v).reshape(n, hp.n_head * hd)
        x = x + matmul(attn, b + "attn_output.weight")

        h = rms_norm(x, m.weight(b + "ffn_norm.weight"), hp.rms_eps)
        ff = silu(matmul(h, b + "ffn_gate.weight")) * matmul(h, b + "ffn_up.weight")
        x = x + matmul(ff, b + "ffn_down.weight")

    x = rms_norm(x, m.weight("output_norm.weight"), hp.rms_eps)
    out_name = "output.weight" if m.has("output.weight") else "token_embd.weight"
    return matmul(x, out_name)


# --- A small SentencePiece (llama) tokenizer, only for the greedy demo below -----------------

def vocab(model: LlamaModel) -> tuple[list[str], list[float], list[int]]:
    tokens = [str(t) for t in model.field("tokenizer.ggml.tokens")]
    scores = [float(s) for s in model.field("tokenizer.ggml.scores", [0.0] * len(tokens))]
    types = [int(t) for t in model.field("tokenizer.ggml.token_type", [1] * len(tokens))]
    return tokens, scores, types


def spm_encode(model: LlamaModel, text: str, add_bos: bool = True) -> list[int]:
    """llama.cpp's SPM algorithm: prefix a space, spaces -> U+2581, split into UTF-8
    characters, then repeatedly merge the adjacent pair whose concatenation is the vocab piece
    with the highest score (leftmost on ties); unknown characters fall back to byte tokens."""
    tokens, scores, types = vocab(model)
    index = {t: i for i, t in enumerate(tokens) if types[i] in (1, 4, 6)}
    text = (" " + text).replace(" ", "\u2581")
    symbols = list(text)
    while len(symbols) > 1:
        best = None
        for i in range(len(symbols) - 1):
            piece = symbols[i] + symbols[i + 1]
            if piece in index and (best is None or scores[index[piece]] > best[0]):
                best = (scores[index[piece]], i)
        if best is None:
            break
        i = best[1]
        symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
    ids = [1] if add_bos else []
    for s in symbols:
        if s in index:
            ids.append(index[s])
        else:
            ids.extend(index[f"<0x{b:02X}>"] for b in s.encode("utf-8"))
    return ids


def spm_decode(model: LlamaModel, ids) -> str:
    tokens, _, types = vocab(model)
    out = bytearray()
    for i in ids:
        if types[i] == 6:  # byte token <0xAB>
            out.append(int(tokens[i][3:5], 16))
        elif types[i] in (1, 4):
            out += tokens[i].replace("\u2581", " ").encode("utf-8")
    return out.decode("utf-8", errors="replace")


def main() -> int:
    ap = argparse.ArgumentParser(description="greedy decoding with the numpy llama reference")
    ap.add_argument("model")
    ap.add_argument("--prompt", default="Once upon a time")
    ap.add_argument("--n-predict", type=int, default=64)
    a = ap.parse_args()
    model = LlamaModel(a.model)
    ids = spm_encode(model, a.prompt)
    prompt_len = len(ids)
    print("prompt ids:", " ".join(map(str, ids)))
    for _ in range(a.n_predict):
        ids.append(int(np.argmax(logits(model, ids)[-1])))
    print("generated ids:", " ".join(map(str, ids[prompt_len:])))
    print("text:", spm_decode(model, ids).lstrip(" "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
