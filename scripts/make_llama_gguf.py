#!/usr/bin/env python3
"""Writes a llama-, gemma3-, qwen2-, qwen3- or phi3-architecture GGUF with random weights and a
minimal SentencePiece vocab.

The file follows the layout and metadata keys of llama.cpp's convert script, so it loads as a
real model. Weights are random (normal, scaled by 1/sqrt(fan_in) so that every projection keeps
activations O(1) and attention scores are neither uniform nor one-hot); norm weights are near 1.

RoPE convention: like every llama GGUF, attn_q / attn_k are meant for ggml's NORMAL rope mode,
which rotates adjacent pairs (x[2i], x[2i+1]). The convert script permutes Hugging Face rows
to get there; random weights need no permutation, they are simply defined in this convention.
(gemma3, qwen2, qwen3 and phi3 use the NEOX mode, x[i] with x[i + n_rot/2]; again nothing to
permute.)

--arch gemma3 adds what Gemma 3 has beyond llama: per-head Q/K norms, post-attention and
post-FFN norms, a head size of its own (--head-dim), a sliding window (--sliding-window) over
which all layers but every --swa-pattern-th attend, and the sliding layers' RoPE base
(--rope-freq-base-swa, written only when given). Its output is always tied to the embedding.

--rope-freqs llama3 (llama only) adds Llama 3.1's RoPE frequency factors: rope_freqs.weight
(F32, n_rot/2), computed as llama.cpp's converter does for rope_scaling.rope_type "llama3" from
--rope-factor, --low-freq-factor, --high-freq-factor and --original-context (defaults 8, 1, 4 and
8192, as Llama 3.1). With the tiny preset the defaults already leave the two lowest frequencies
scaled (factors 1 x6, ~4.68, 8); --original-context 64 scales all but the first (1, ~1.30, ~7.66,
8 x5), which is what a short test sequence notices.

--arch qwen2: llama plus F32 biases on attn_q / attn_k / attn_v, NEOX RoPE.
--arch qwen3: llama plus per-head attn_q_norm / attn_k_norm, a head size of its own (written as
attention.key_length / value_length; the tiny preset uses 32 with n_embd 64 and 4 heads), NEOX
RoPE. Neither writes rope.dimension_count or vocab_size (their converter does not).
--arch qwen2moe / qwen3moe, and llama with --experts N (Mixtral): the feed-forward of every layer
is a mixture of experts: a router ffn_gate_inp (F32 [n_embd, E], kept F32 as llama.cpp's quantize
keeps it), and the experts' ffn_gate_exps / ffn_up_exps [n_embd, n_ff_exp, E] and ffn_down_exps
[n_ff_exp, n_embd, E] in --dtype; qwen2moe adds a shared expert (ffn_gate_inp_shexp [n_embd],
ffn_{gate,up,down}_shexp of --shared-expert-ff). qwen2moe / qwen3moe attend as qwen2 / qwen3 and
default to 8 experts, 2 used, 64 wide (--experts, --experts-used, --expert-ff); Mixtral's experts
are n_ff wide.

Routing is made decisive (the default; --routing random leaves a plain random router): a near
tie between two experts' logits would let a rounding anywhere upstream flip a token's expert and
its logits far beyond any tolerance, so no comparison could be made on quantized weights. The
first E dimensions of the residual stream carry the routing signal instead: each token's
embedding holds a permutation of E levels 0.5 apart there, nothing writes to those dimensions
(attn_output's, the experts' and the shared expert's down rows for them are zero), and the
router reads only them (ffn_gate_inp = --router-scale times [I | 0]). A token's ranking of the
experts is then fixed by its id (the RMS norm scales all E alike), while the weights still
depend on the whole hidden state.
--arch phi3: fused attn_qkv (Q rows, then K, then V) and fused ffn_up (gate half, then up half),
no ffn_gate; NEOX RoPE over --rope-dim dims (default the head size); rope.scaling.
original_context_length (--original-context, default the context length) and
attention.sliding_window (--sliding-window, 0 = none) are always written, as the converter does.
--longrope adds LongRoPE's rope_factors_long / rope_factors_short (F32, n_rot/2, fixed smooth
ramps, long > short) and rope.scaling.attn_factor, by default the converter's
sqrt(1 + ln(ctx / original) / ln(original)) (1 when ctx <= original); --rope-attn-factor sets it,
--no-rope-attn-factor leaves the key out (llama.cpp then uses 1). On llama, --longrope also writes
rope.scaling.type "longrope" and rope.scaling.original_context_length, with which llama.cpp reads
the same factors for that architecture.
--arch gpt-oss (OpenAI's gpt-oss as llama.cpp's converter writes it): Q/K/V and attn_output
with biases, attn_sinks (one logit per query head), post_attention_norm as the feed-forward's
input norm (no ffn_norm), a head size of its own (attention.key_length, 32 with the tiny
preset), attention.sliding_window (--sliding-window, default 8) on the even layers; experts
(default 8, 2 used, 64 wide) whose router and gate/up/down projections carry biases
(ffn_gate_inp.bias [E], ffn_{gate,up}_exps.bias [E, n_ff_exp], ffn_down_exps.bias [E, n_embd]).
Its decisive routing also zeroes the first E entries of attn_output.bias and of the down
biases, and keeps the router bias small (0.05 times the level spacing at most).
--rope-scaling yarn (any architecture) writes YaRN scaling: rope.scaling.type "yarn", .factor
(--rope-scale-factor), .original_context_length (--original-context, default the context length),
and where given .yarn_ext_factor, .yarn_beta_fast, .yarn_beta_slow, .yarn_log_multiplier
(--yarn-ext-factor, ...) and .attn_factor (--rope-attn-factor).
qwen2, qwen3 and phi3 write tokenizer.ggml.pre "default", as the converter does for a
SentencePiece vocab (the vocab is the same SentencePiece-style one as llama's, not a BPE one).

Tensors are generated and written one at a time (each from its own seed), so a bench-1b file
needs memory for one tensor, not for the whole model.

Usage: make_llama_gguf.py --out model.gguf [--preset tiny|bench-1b|bench-8b] [--dtype Q4_0] [--tied] ...
"""

from __future__ import annotations

import argparse
import itertools
import string
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

SUPPORTED_DTYPES = ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "MXFP4"]

FILE_TYPE = {
    "F32": gguf.LlamaFileType.ALL_F32,
    "F16": gguf.LlamaFileType.MOSTLY_F16,
    "BF16": gguf.LlamaFileType.MOSTLY_BF16,
    "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
    "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0,
    "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
    "Q5_0": gguf.LlamaFileType.MOSTLY_Q5_0,
    "Q5_1": gguf.LlamaFileType.MOSTLY_Q5_1,
    "MXFP4": gguf.LlamaFileType.MOSTLY_MXFP4_MOE,
}

PRESETS = {
    "tiny": dict(n_vocab=559, n_embd=64, n_layer=2, n_head=4, n_head_kv=2, n_ff=160, ctx=256),
    "bench-1b": dict(
        n_vocab=32000, n_embd=2048, n_layer=16, n_head=16, n_head_kv=4, n_ff=5632, ctx=4096
    ),
    # Llama 3.1 8B's shape (its vocabulary size; the tokens are this script's own).
    "bench-8b": dict(
        n_vocab=128256, n_embd=4096, n_layer=32, n_head=32, n_head_kv=8, n_ff=14336, ctx=8192
    ),
}
ARCHITECTURES = ["llama", "gemma3", "qwen2", "qwen3", "phi3", "qwen2moe", "qwen3moe", "gpt-oss"]
# written by tensor_specs_new_arch
NEW_ARCHITECTURES = ("qwen2", "qwen3", "phi3", "qwen2moe", "qwen3moe", "gpt-oss")
MOE_ARCHITECTURES = ("qwen2moe", "qwen3moe", "gpt-oss")
QWEN3_TINY_HEAD_DIM = 32  # the tiny preset's qwen3 head size (n_embd 64 / 4 heads would be 16)

N_SPECIAL = 3  # <unk>, <s>, </s>
N_FIXED_TOKENS = N_SPECIAL + 256  # plus one byte token per byte value


@dataclass
class ModelParams:
    n_vocab: int = 559
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 160
    ctx: int = 256
    dtype: str = "F32"
    embd_dtype: str | None = None  # token_embd type; defaults to dtype
    tied: bool = False
    rope_scaling: str = "none"
    rope_scale_factor: float = 1.0
    rope_freq_base: float = 10000.0
    rms_eps: float = 1e-5
    seed: int = 0
    name: str = "polystack-random-llama"
    jobs: int = 1  # processes that make the tensors (not a model parameter)
    arch: str = "llama"
    head_dim_override: int | None = None  # written as attention.key_length / value_length
    sliding_window: int = 0  # gemma3: 0 = every layer global
    swa_pattern: int | None = None  # gemma3: every n-th layer global (None: not written, 6)
    rope_freq_base_swa: float | None = None  # gemma3: None = not written (10000)
    # llama: Llama 3.1 RoPE frequency factors ("llama3") written as rope_freqs.weight
    rope_freqs: str = "none"
    rope_factor: float = 8.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_context: int | None = None  # llama3: None = 8192; phi3: None = ctx
    # phi3
    longrope: bool = False  # rope_factors_long / rope_factors_short + rope.scaling.attn_factor
    rope_attn_factor: float | None = None  # None: the converter's formula
    # --rope-scaling yarn: rope.scaling.yarn_* keys written where not None
    yarn_ext_factor: float | None = None
    yarn_beta_fast: float | None = None
    yarn_beta_slow: float | None = None
    yarn_log_multiplier: float | None = None
    omit_rope_attn_factor: bool = False
    n_rot_override: int | None = None  # phi3.rope.dimension_count when not the head size
    # mixture of experts (qwen2moe, qwen3moe; llama when n_expert > 0: Mixtral)
    n_expert: int = 0
    n_expert_used: int = 0
    n_ff_exp: int | None = None  # None: 64 (qwen), n_ff (Mixtral)
    n_ff_shexp: int = 96  # qwen2moe's shared expert
    router_scale: float = 3.0
    routing: str = "decisive"  # or "random"

    @property
    def expert_ff(self) -> int:
        if self.n_ff_exp is not None:
            return self.n_ff_exp
        return self.n_ff if self.arch == "llama" else 64

    @property
    def head_dim(self) -> int:
        return self.head_dim_override or self.n_embd // self.n_head

    @property
    def n_rot(self) -> int:
        return self.n_rot_override or self.head_dim

    @property
    def orig_ctx(self) -> int:
        if self.original_context is not None:
            return self.original_context
        return 8192 if self.rope_freqs == "llama3" else self.ctx


def make_vocab(n_vocab: int) -> tuple[list[str], list[float], list[int]]:
    """SentencePiece-style vocab: specials, 256 byte tokens, then made-up word pieces."""
    if n_vocab < N_FIXED_TOKENS + 1:
        raise ValueError(f"n_vocab must be at least {N_FIXED_TOKENS + 1}")
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    scores = [0.0] * len(tokens)

    def pieces():
        yield "\u2581"
        for length in itertools.count(1):
            for letters in itertools.product(string.ascii_lowercase, repeat=length):
                word = "".join(letters)
                yield "\u2581" + word
                yield word

    for rank, piece in enumerate(itertools.islice(pieces(), n_vocab - len(tokens))):
        tokens.append(piece)
        types.append(gguf.TokenType.NORMAL)
        # SentencePiece scores are log-probabilities: shorter, earlier pieces are likelier.
        scores.append(-float(rank))
    return tokens, scores, [int(t) for t in types]


@dataclass
class TensorSpec:
    name: str
    shape: tuple[int, ...]  # numpy order: (rows, row_length); GGUF stores it reversed
    qtype: QT
    make: Callable[[np.random.Generator], np.ndarray]
    random: bool = True  # False: values fixed by the parameters; takes no seed index


def llama3_rope_freqs(p: ModelParams) -> np.ndarray:
    """Llama 3.1 RoPE frequency factors, as llama.cpp's convert_hf_to_gguf.py computes them for
    rope_scaling.rope_type "llama3" (in float32, like its torch code): per frequency
    f_i = base^(-2i/dim) with wavelength 2 pi / f_i, 1 below original / high_freq_factor,
    `factor` above original / low_freq_factor, and in between 1 / ((1 - s) / factor + s) with
    s = (original / wavelength - low) / (high - low). dim is the head size."""
    f32 = np.float32
    dim = p.head_dim
    freqs = f32(1.0) / (f32(p.rope_freq_base) ** (np.arange(0, dim, 2, dtype=f32) / f32(dim)))
    old_ctx = f32(p.orig_ctx)
    low, high, factor = f32(p.low_freq_factor), f32(p.high_freq_factor), f32(p.rope_factor)
    low_freq_wavelen = old_ctx / low
    high_freq_wavelen = old_ctx / high
    out = []
    for freq in freqs:
        wavelen = f32(2 * np.pi) / freq
        if wavelen < high_freq_wavelen:
            out.append(f32(1.0))
        elif wavelen > low_freq_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - low) / (high - low)
            out.append(f32(1.0) / ((f32(1.0) - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def longrope_factors(p: ModelParams) -> tuple[np.ndarray, np.ndarray]:
    """Made-up LongRoPE factors (real ones come from a search): ramps over the n_rot/2
    frequencies, short 1 .. 1.5 and long 1 .. 4, so that the two lists and their use (positions
    divided by them) are all visible in a short test sequence."""
    t = np.linspace(0.0, 1.0, p.n_rot // 2, dtype=np.float64)
    return (1.0 + 3.0 * t).astype(np.float32), (1.0 + 0.5 * t).astype(np.float32)


def longrope_attn_factor(p: ModelParams) -> float:
    """The converter's (Phi3MiniModel) value for rope_type longrope / su:
    sqrt(1 + ln(scale) / ln(original)) with scale = context_length / original, 1 if scale <= 1."""
    if p.rope_attn_factor is not None:
        return p.rope_attn_factor
    scale = p.ctx / p.orig_ctx
    return float(np.sqrt(1 + np.log(scale) / np.log(p.orig_ctx))) if scale > 1.0 else 1.0


def make_routing_decisive(p: ModelParams, specs: list[TensorSpec]) -> None:
    """Rewrites the tensors that carry the routing signal (see the docstring)."""
    E = p.n_expert
    levels = (np.arange(E, dtype=np.float32) - (E - 1) / 2) * np.float32(0.5)

    def wrap(spec: TensorSpec, edit: Callable[[np.ndarray, np.random.Generator], None]):
        make = spec.make

        def made(rng):
            values = np.array(make(rng), dtype=np.float32)
            edit(values, rng)
            return values
        spec.make = made

    def embed(v, rng):
        v[:, :E] = levels[np.argsort(rng.random((v.shape[0], E)), axis=1)]

    def no_write(v, rng):
        v[..., :E, :] = 0.0

    def no_write_bias(v, rng):
        v[..., :E] = 0.0

    def small_bias(v, rng):
        # Below the routing levels' spacing (0.5 * router_scale before the norm's gain).
        v *= np.float32(0.05 * 0.5 * p.router_scale) / max(float(np.abs(v).max()), 1e-30)

    def router(v, rng):
        v[...] = 0.0
        v[:, :E] = np.eye(E, dtype=np.float32) * np.float32(p.router_scale)

    for spec in specs:
        if spec.name == "token_embd.weight":
            wrap(spec, embed)
        elif spec.name.endswith(("attn_output.weight", "ffn_down_exps.weight",
                                 "ffn_down_shexp.weight")):
            wrap(spec, no_write)
        elif spec.name.endswith("ffn_gate_inp.weight"):
            wrap(spec, router)
        elif spec.name.endswith(("attn_output.bias", "ffn_down_exps.bias")):
            wrap(spec, no_write_bias)
        elif spec.name.endswith("ffn_gate_inp.bias"):
            wrap(spec, small_bias)


def tensor_specs(p: ModelParams) -> list[TensorSpec]:
    specs = tensor_specs_any(p)
    if p.n_expert and p.routing == "decisive":
        make_routing_decisive(p, specs)
    return specs


def tensor_specs_any(p: ModelParams) -> list[TensorSpec]:
    if p.arch in NEW_ARCHITECTURES:
        return tensor_specs_new_arch(p)
    specs = tensor_specs_llama_gemma3(p)
    if p.rope_freqs == "llama3":
        # First in the file, as the converter yields it; it takes no seed index, so the other
        # tensors keep the values they have without it.
        factors = llama3_rope_freqs(p)
        specs.insert(0, TensorSpec("rope_freqs.weight", factors.shape, QT.F32,
                                   lambda rng: factors, random=False))
    if p.arch == "llama" and p.longrope:  # as for phi3, first in the file and without a seed
        long_f, short_f = longrope_factors(p)
        specs[:0] = [
            TensorSpec("rope_factors_long.weight", long_f.shape, QT.F32, lambda rng: long_f,
                       random=False),
            TensorSpec("rope_factors_short.weight", short_f.shape, QT.F32, lambda rng: short_f,
                       random=False),
        ]
    return specs


def _normal(shape, std):
    return lambda rng: (rng.standard_normal(shape, dtype=np.float32) * np.float32(std))


def _norm_weight(n):
    return lambda rng: (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(np.float32)


def _proj(rows, cols):
    return _normal((rows, cols), 1.0 / np.sqrt(cols))


def expert_specs(p: ModelParams, b: str, wtype: QT) -> list[TensorSpec]:
    """A mixture-of-experts feed-forward's tensors, in the converter's order."""
    E, ff = p.n_expert, p.expert_ff
    specs = [
        TensorSpec(b + "ffn_gate_inp.weight", (E, p.n_embd), QT.F32,
                   _normal((E, p.n_embd), p.router_scale / np.sqrt(p.n_embd))),
        TensorSpec(b + "ffn_gate_exps.weight", (E, ff, p.n_embd), wtype,
                   _normal((E, ff, p.n_embd), 1.0 / np.sqrt(p.n_embd))),
        TensorSpec(b + "ffn_up_exps.weight", (E, ff, p.n_embd), wtype,
                   _normal((E, ff, p.n_embd), 1.0 / np.sqrt(p.n_embd))),
        TensorSpec(b + "ffn_down_exps.weight", (E, p.n_embd, ff), wtype,
                   _normal((E, p.n_embd, ff), 1.0 / np.sqrt(ff))),
    ]
    if p.arch == "gpt-oss":
        # Biases after the router and after each expert's projections (inserted after their
        # weights, as the converter orders them).
        specs.insert(1, TensorSpec(b + "ffn_gate_inp.bias", (E,), QT.F32, _normal((E,), 0.5)))
        specs += [
            TensorSpec(b + "ffn_gate_exps.bias", (E, ff), QT.F32, _normal((E, ff), 0.3)),
            TensorSpec(b + "ffn_up_exps.bias", (E, ff), QT.F32, _normal((E, ff), 0.3)),
            TensorSpec(b + "ffn_down_exps.bias", (E, p.n_embd), QT.F32,
                       _normal((E, p.n_embd), 0.3)),
        ]
    if p.arch == "qwen2moe":
        sh = p.n_ff_shexp
        specs += [
            # A gate of a few units either way, so the sigmoid is neither 0.5 nor saturated.
            TensorSpec(b + "ffn_gate_inp_shexp.weight", (p.n_embd,), QT.F32,
                       _normal((p.n_embd,), 1.0 / np.sqrt(p.n_embd))),
            TensorSpec(b + "ffn_gate_shexp.weight", (sh, p.n_embd), wtype, _proj(sh, p.n_embd)),
            TensorSpec(b + "ffn_up_shexp.weight", (sh, p.n_embd), wtype, _proj(sh, p.n_embd)),
            TensorSpec(b + "ffn_down_shexp.weight", (p.n_embd, sh), wtype, _proj(p.n_embd, sh)),
        ]
    return specs


def tensor_specs_new_arch(p: ModelParams) -> list[TensorSpec]:
    """qwen2 / qwen3 / phi3, with the same weight scales as llama's (see tensor_specs)."""
    wtype = QT[p.dtype]
    etype = QT[p.embd_dtype or p.dtype]
    hd = p.head_dim
    q_dim, kv_dim = p.n_head * hd, p.n_head_kv * hd
    specs = []
    if p.arch == "phi3" and p.longrope:
        long_f, short_f = longrope_factors(p)
        specs += [
            TensorSpec("rope_factors_long.weight", long_f.shape, QT.F32, lambda rng: long_f,
                       random=False),
            TensorSpec("rope_factors_short.weight", short_f.shape, QT.F32, lambda rng: short_f,
                       random=False),
        ]
    specs.append(TensorSpec("token_embd.weight", (p.n_vocab, p.n_embd), etype,
                            _normal((p.n_vocab, p.n_embd), p.n_embd**-0.25)))
    for i in range(p.n_layer):
        b = f"blk.{i}."
        specs.append(TensorSpec(b + "attn_norm.weight", (p.n_embd,), QT.F32,
                                _norm_weight(p.n_embd)))
        if p.arch == "phi3":
            specs.append(TensorSpec(b + "attn_qkv.weight", (q_dim + 2 * kv_dim, p.n_embd), wtype,
                                    _proj(q_dim + 2 * kv_dim, p.n_embd)))
        else:
            for name, rows in (("attn_q", q_dim), ("attn_k", kv_dim), ("attn_v", kv_dim)):
                specs.append(TensorSpec(b + name + ".weight", (rows, p.n_embd), wtype,
                                        _proj(rows, p.n_embd)))
                if p.arch in ("qwen2", "qwen2moe", "gpt-oss"):
                    # Biases of the size of the projections' outputs: they move every score.
                    specs.append(TensorSpec(b + name + ".bias", (rows,), QT.F32,
                                            _normal((rows,), 0.5)))
        if p.arch in ("qwen3", "qwen3moe"):
            specs += [
                TensorSpec(b + "attn_q_norm.weight", (hd,), QT.F32, _norm_weight(hd)),
                TensorSpec(b + "attn_k_norm.weight", (hd,), QT.F32, _norm_weight(hd)),
            ]
        specs.append(TensorSpec(b + "attn_output.weight", (p.n_embd, q_dim), wtype,
                                _proj(p.n_embd, q_dim)))
        if p.arch == "gpt-oss":
            specs += [
                TensorSpec(b + "attn_output.bias", (p.n_embd,), QT.F32, _normal((p.n_embd,), 0.3)),
                # One logit per query head beside the scores: of their size, so that the sink
                # takes a real share of the softmax.
                TensorSpec(b + "attn_sinks.weight", (p.n_head,), QT.F32, _normal((p.n_head,), 1.0)),
                TensorSpec(b + "post_attention_norm.weight", (p.n_embd,), QT.F32,
                           _norm_weight(p.n_embd)),
            ]
        else:
            specs.append(TensorSpec(b + "ffn_norm.weight", (p.n_embd,), QT.F32,
                                    _norm_weight(p.n_embd)))
        if p.arch in MOE_ARCHITECTURES:
            specs += expert_specs(p, b, wtype)
            continue
        if p.arch == "phi3":
            specs.append(TensorSpec(b + "ffn_up.weight", (2 * p.n_ff, p.n_embd), wtype,
                                    _proj(2 * p.n_ff, p.n_embd)))
        else:
            specs += [
                TensorSpec(b + "ffn_gate.weight", (p.n_ff, p.n_embd), wtype,
                           _proj(p.n_ff, p.n_embd)),
                TensorSpec(b + "ffn_up.weight", (p.n_ff, p.n_embd), wtype,
                           _proj(p.n_ff, p.n_embd)),
            ]
        specs.append(TensorSpec(b + "ffn_down.weight", (p.n_embd, p.n_ff), wtype,
                                _proj(p.n_embd, p.n_ff)))
    specs.append(TensorSpec("output_norm.weight", (p.n_embd,), QT.F32, _norm_weight(p.n_embd)))
    if not p.tied:
        specs.append(TensorSpec("output.weight", (p.n_vocab, p.n_embd), wtype,
                                _normal((p.n_vocab, p.n_embd), 2.0 / np.sqrt(p.n_embd))))
    return specs


def tensor_specs_llama_gemma3(p: ModelParams) -> list[TensorSpec]:
    wtype = QT[p.dtype]
    etype = QT[p.embd_dtype or p.dtype]
    hd = p.head_dim

    def normal(shape, std):
        return lambda rng: (rng.standard_normal(shape, dtype=np.float32) * np.float32(std))

    def norm_weight(n):
        return lambda rng: (1.0 + 0.1 * rng.standard_normal(n, dtype=np.float32)).astype(
            np.float32
        )

    def proj(rows, cols):
        return normal((rows, cols), 1.0 / np.sqrt(cols))

    # The embedding feeds RMSNorm, so its scale only matters when it is also the output matrix:
    # n_embd^-1/4 keeps tied logits at a standard deviation of about n_embd^1/4.
    specs = [
        TensorSpec("token_embd.weight", (p.n_vocab, p.n_embd), etype,
                   normal((p.n_vocab, p.n_embd), p.n_embd**-0.25)),
    ]
    gemma = p.arch == "gemma3"
    for i in range(p.n_layer):
        b = f"blk.{i}."
        if gemma:
            specs += [
                TensorSpec(b + "attn_q_norm.weight", (hd,), QT.F32, norm_weight(hd)),
                TensorSpec(b + "attn_k_norm.weight", (hd,), QT.F32, norm_weight(hd)),
                TensorSpec(b + "post_attention_norm.weight", (p.n_embd,), QT.F32,
                           norm_weight(p.n_embd)),
                TensorSpec(b + "post_ffw_norm.weight", (p.n_embd,), QT.F32,
                           norm_weight(p.n_embd)),
            ]
        specs += [
            TensorSpec(b + "attn_norm.weight", (p.n_embd,), QT.F32, norm_weight(p.n_embd)),
            TensorSpec(b + "attn_q.weight", (p.n_head * hd, p.n_embd), wtype,
                       proj(p.n_head * hd, p.n_embd)),
            TensorSpec(b + "attn_k.weight", (p.n_head_kv * hd, p.n_embd), wtype,
                       proj(p.n_head_kv * hd, p.n_embd)),
            TensorSpec(b + "attn_v.weight", (p.n_head_kv * hd, p.n_embd), wtype,
                       proj(p.n_head_kv * hd, p.n_embd)),
            TensorSpec(b + "attn_output.weight", (p.n_embd, p.n_head * hd), wtype,
                       proj(p.n_embd, p.n_head * hd)),
            TensorSpec(b + "ffn_norm.weight", (p.n_embd,), QT.F32, norm_weight(p.n_embd)),
        ]
        if p.n_expert:
            specs += expert_specs(p, b, wtype)
            continue
        specs += [
            TensorSpec(b + "ffn_gate.weight", (p.n_ff, p.n_embd), wtype, proj(p.n_ff, p.n_embd)),
            TensorSpec(b + "ffn_up.weight", (p.n_ff, p.n_embd), wtype, proj(p.n_ff, p.n_embd)),
            TensorSpec(b + "ffn_down.weight", (p.n_embd, p.n_ff), wtype, proj(p.n_embd, p.n_ff)),
        ]
    specs.append(TensorSpec("output_norm.weight", (p.n_embd,), QT.F32, norm_weight(p.n_embd)))
    if not p.tied:
        # Scaled up from 1/sqrt(n_embd) so logits spread over a few units and the argmax is
        # well separated.
        specs.append(TensorSpec("output.weight", (p.n_vocab, p.n_embd), wtype,
                                normal((p.n_vocab, p.n_embd), 2.0 / np.sqrt(p.n_embd))))
    return specs


def encode_tensor(values: np.ndarray, qtype: QT) -> np.ndarray:
    if qtype == QT.F32:
        return values.astype(np.float32, copy=False)
    if qtype == QT.F16:
        return values.astype(np.float16)
    return gguf.quants.quantize(values, qtype)  # uint8 blocks (BF16 included)


def nbytes_of(shape: tuple[int, ...], qtype: QT) -> int:
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    if shape[-1] % block_size:
        raise ValueError(f"row length {shape[-1]} is not a multiple of the {qtype.name} "
                         f"block size {block_size}")
    return int(np.prod(shape[:-1], dtype=np.int64)) * (shape[-1] // block_size) * type_size


def check_params(p: ModelParams) -> None:
    for t in (p.dtype, p.embd_dtype or p.dtype):
        if t not in SUPPORTED_DTYPES:
            raise ValueError(f"unsupported dtype {t}; choose one of {', '.join(SUPPORTED_DTYPES)}")
    if p.arch not in ARCHITECTURES:
        raise ValueError(f"unsupported architecture {p.arch}")
    if p.arch == "gemma3" and not p.tied:
        raise ValueError("gemma3 models tie their output to the embedding")
    if p.arch == "llama" and (p.sliding_window or p.swa_pattern or p.rope_freq_base_swa):
        raise ValueError("sliding-window options are for gemma3")
    if p.arch in NEW_ARCHITECTURES and (p.swa_pattern or p.rope_freq_base_swa):
        raise ValueError("--swa-pattern and --rope-freq-base-swa are for gemma3")
    if p.arch in ("qwen2", "qwen3", "qwen2moe", "qwen3moe") and p.sliding_window:
        raise ValueError("--sliding-window is for gemma3, phi3 and gpt-oss")
    if p.arch == "gpt-oss" and p.sliding_window < 1:
        raise ValueError("gpt-oss needs a sliding window")
    if p.rope_freqs not in ("none", "llama3"):
        raise ValueError("rope freqs must be none or llama3")
    if p.rope_freqs != "none" and p.arch != "llama":
        raise ValueError("--rope-freqs is for llama")
    if p.rope_freqs == "llama3" and p.high_freq_factor == p.low_freq_factor:
        raise ValueError("--high-freq-factor must differ from --low-freq-factor")
    yarn = p.rope_scaling == "yarn"
    if (p.longrope or p.omit_rope_attn_factor or (p.rope_attn_factor is not None and not yarn)) \
            and p.arch not in ("phi3", "llama"):
        raise ValueError("LongRoPE options are for phi3 and llama")
    if p.longrope and p.rope_freqs != "none":
        raise ValueError("--longrope and --rope-freqs exclude each other")
    if (p.rope_attn_factor is not None or p.omit_rope_attn_factor) and not (p.longrope or yarn):
        raise ValueError("--rope-attn-factor / --no-rope-attn-factor need --longrope or yarn")
    if yarn and p.longrope:
        raise ValueError("--longrope and --rope-scaling yarn exclude each other")
    if not yarn and any(v is not None for v in (p.yarn_ext_factor, p.yarn_beta_fast,
                                                 p.yarn_beta_slow, p.yarn_log_multiplier)):
        raise ValueError("--yarn-* options need --rope-scaling yarn")
    if p.original_context is not None and p.rope_freqs == "none" and p.arch != "phi3" \
            and not yarn and not p.longrope:
        raise ValueError("--original-context is for --rope-freqs llama3, yarn, longrope and phi3")
    if p.original_context is not None and p.original_context < 1:
        raise ValueError("--original-context must be positive")
    if p.n_rot_override is not None and p.arch != "phi3":
        raise ValueError("--rope-dim is for phi3")
    if p.arch in ("qwen2", "qwen2moe", "phi3") and p.head_dim_override not in (None, p.n_embd // p.n_head):
        raise ValueError(f"{p.arch}'s head size is n_embd / n_head")
    if p.n_rot % 2 or not 0 < p.n_rot <= p.head_dim:
        raise ValueError("the RoPE dimension count must be even and at most the head size")
    if p.head_dim_override is None and p.n_embd % p.n_head:
        raise ValueError("n_embd must be a multiple of n_head")
    if p.n_head % p.n_head_kv:
        raise ValueError("n_head must be a multiple of n_head_kv")
    if p.head_dim % 2:
        raise ValueError("head dimension must be even for RoPE")
    if p.rope_scaling not in ("none", "linear", "yarn"):
        raise ValueError("rope scaling must be none, linear or yarn")
    if p.n_expert and p.arch not in ("llama",) + MOE_ARCHITECTURES:
        raise ValueError("--experts is for llama (Mixtral), qwen2moe, qwen3moe and gpt-oss")
    if p.n_expert and not 1 <= p.n_expert_used <= p.n_expert:
        raise ValueError("--experts-used must be between 1 and --experts")
    if p.n_expert and p.routing == "decisive" and (p.n_expert > p.n_embd or p.tied):
        raise ValueError("decisive routing needs at least --experts embedding dimensions and "
                         "an untied output (or --routing random)")


def write_model(path: str, p: ModelParams) -> None:
    check_params(p)
    specs = tensor_specs(p)
    writer = gguf.GGUFWriter(path, p.arch)
    writer.add_name(p.name)
    writer.add_file_type(int(FILE_TYPE[p.dtype]))
    if p.dtype.startswith("Q") or (p.embd_dtype or "").startswith("Q"):
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    if p.arch in NEW_ARCHITECTURES:
        write_new_arch_metadata(writer, p)
    else:
        write_llama_gemma3_metadata(writer, p)
    write_vocab(writer, p)
    write_tensors(writer, p, specs)


def write_new_arch_metadata(writer: gguf.GGUFWriter, p: ModelParams) -> None:
    """The keys llama.cpp's converter writes for Qwen2 / Qwen3 / Phi-3 (conversion/qwen.py,
    conversion/phi.py and the shared TextModel.set_gguf_parameters)."""
    writer.add_context_length(p.ctx)
    writer.add_embedding_length(p.n_embd)
    writer.add_block_count(p.n_layer)
    writer.add_feed_forward_length(p.n_ff)
    writer.add_head_count(p.n_head)
    writer.add_head_count_kv(p.n_head_kv)
    writer.add_rope_freq_base(p.rope_freq_base)
    writer.add_layer_norm_rms_eps(p.rms_eps)
    if p.arch in ("qwen3", "qwen3moe", "gpt-oss"):
        writer.add_key_length(p.head_dim)
        writer.add_value_length(p.head_dim)
    if p.arch == "gpt-oss":
        writer.add_sliding_window(p.sliding_window)
    write_expert_metadata(writer, p)
    if p.arch == "phi3":
        writer.add_rope_dimension_count(p.n_rot)
        writer.add_rope_scaling_orig_ctx_len(p.orig_ctx)
        writer.add_sliding_window(p.sliding_window)
        if p.longrope and not p.omit_rope_attn_factor:
            writer.add_rope_scaling_attn_factors(longrope_attn_factor(p))
    write_rope_scaling(writer, p)


def write_llama_gemma3_metadata(writer: gguf.GGUFWriter, p: ModelParams) -> None:
    writer.add_vocab_size(p.n_vocab)
    writer.add_context_length(p.ctx)
    writer.add_embedding_length(p.n_embd)
    writer.add_block_count(p.n_layer)
    writer.add_feed_forward_length(p.n_ff)
    writer.add_head_count(p.n_head)
    writer.add_head_count_kv(p.n_head_kv)
    writer.add_rope_dimension_count(p.head_dim)
    writer.add_rope_freq_base(p.rope_freq_base)
    writer.add_layer_norm_rms_eps(p.rms_eps)
    if p.head_dim_override:
        writer.add_uint32(f"{p.arch}.attention.key_length", p.head_dim)
        writer.add_uint32(f"{p.arch}.attention.value_length", p.head_dim)
    if p.sliding_window:
        writer.add_uint32(f"{p.arch}.attention.sliding_window", p.sliding_window)
    if p.swa_pattern is not None:
        writer.add_uint32(f"{p.arch}.attention.sliding_window_pattern", p.swa_pattern)
    if p.rope_freq_base_swa is not None:
        writer.add_float32(f"{p.arch}.rope.freq_base_swa", p.rope_freq_base_swa)
    write_rope_scaling(writer, p)
    if p.longrope:  # llama: the type name (as MiniCPM's converter writes it), the original context
        writer.add_rope_scaling_type(gguf.RopeScalingType.LONGROPE)
        writer.add_rope_scaling_orig_ctx_len(p.orig_ctx)
        if not p.omit_rope_attn_factor:
            writer.add_rope_scaling_attn_factors(longrope_attn_factor(p))
    write_expert_metadata(writer, p)


def write_rope_scaling(writer: gguf.GGUFWriter, p: ModelParams) -> None:
    """rope.scaling.*: linear, or YaRN with the keys llama.cpp reads (see the docstring)."""
    a = p.arch
    if p.rope_scaling == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(p.rope_scale_factor)
    elif p.rope_scaling == "yarn":
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(p.rope_scale_factor)
        if a != "phi3":  # phi3 writes it always
            writer.add_rope_scaling_orig_ctx_len(p.orig_ctx)
        for key, value in (("yarn_ext_factor", p.yarn_ext_factor),
                           ("yarn_beta_fast", p.yarn_beta_fast),
                           ("yarn_beta_slow", p.yarn_beta_slow),
                           ("yarn_log_multiplier", p.yarn_log_multiplier),
                           ("attn_factor", p.rope_attn_factor)):
            if value is not None:
                writer.add_float32(f"{a}.rope.scaling.{key}", value)


def write_expert_metadata(writer: gguf.GGUFWriter, p: ModelParams) -> None:
    """The converter's keys: expert_count and expert_used_count (Mixtral too), the experts' width
    for the qwen families, the shared expert's for qwen2moe."""
    if not p.n_expert:
        return
    writer.add_expert_count(p.n_expert)
    writer.add_expert_used_count(p.n_expert_used)
    if p.arch in MOE_ARCHITECTURES:
        writer.add_expert_feed_forward_length(p.expert_ff)
    if p.arch == "qwen2moe":
        writer.add_expert_shared_feed_forward_length(p.n_ff_shexp)


def write_vocab(writer: gguf.GGUFWriter, p: ModelParams) -> None:
    tokens, scores, types = make_vocab(p.n_vocab)
    writer.add_tokenizer_model("llama")
    if p.arch in NEW_ARCHITECTURES:
        writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)


def write_tensors(writer: gguf.GGUFWriter, p: ModelParams, specs: list[TensorSpec]) -> None:
    for spec in specs:
        np_dtype = {QT.F32: np.float32, QT.F16: np.float16}.get(spec.qtype, np.float32)
        raw = None if spec.qtype in (QT.F32, QT.F16) else spec.qtype
        writer.add_tensor_info(spec.name, spec.shape, np.dtype(np_dtype),
                               nbytes_of(spec.shape, spec.qtype), raw_dtype=raw)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    # One generator per random tensor: values depend only on (seed, position in the file among
    # the random tensors), so they are the same however many processes make them.
    global _JOBS
    _JOBS = []
    index = 0
    for spec in specs:
        _JOBS.append((spec, [p.seed, index]))
        index += spec.random
    if p.jobs <= 1:
        for i in range(len(_JOBS)):
            writer.write_tensor_data(_make_tensor(i))
    else:
        # Forked workers make the tensors; at most `jobs` are made ahead of the one written.
        import multiprocessing
        with multiprocessing.get_context("fork").Pool(p.jobs) as pool:
            pending = [pool.apply_async(_make_tensor, (i,)) for i in range(min(p.jobs, len(_JOBS)))]
            for i in range(len(_JOBS)):
                data = pending[i].get()
                if i + p.jobs < len(_JOBS):
                    pending.append(pool.apply_async(_make_tensor, (i + p.jobs,)))
                pending[i] = None
                writer.write_tensor_data(data)
    writer.close()


_JOBS: list = []  # (spec, generator seed) of each tensor of the file being written


def _make_tensor(i: int) -> np.ndarray:
    spec, seed = _JOBS[i]
    return encode_tensor(spec.make(np.random.default_rng(seed)), spec.qtype)


def parse_args(argv: list[str] | None = None) -> tuple[str, ModelParams]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    for name in ("n-vocab", "n-embd", "n-layer", "n-head", "n-head-kv", "n-ff", "ctx"):
        ap.add_argument("--" + name, type=int)
    ap.add_argument("--dtype", default="F32", choices=SUPPORTED_DTYPES,
                    help="type of the 2-D weight matrices (norms stay F32)")
    ap.add_argument("--embd-dtype", choices=SUPPORTED_DTYPES,
                    help="type of token_embd.weight (default: --dtype)")
    ap.add_argument("--tied", action="store_true",
                    help="no output.weight: the model reuses token_embd for the output")
    ap.add_argument("--rope-scaling", choices=["none", "linear", "yarn"], default="none")
    ap.add_argument("--rope-scale-factor", type=float, default=1.0)
    ap.add_argument("--rope-freq-base", type=float, default=10000.0)
    ap.add_argument("--rms-eps", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--name", default="polystack-random-llama")
    ap.add_argument("--jobs", type=int, default=1,
                    help="processes that make the tensors (the file is the same for any number)")
    add_gemma3_arguments(ap)
    a = ap.parse_args(argv)
    sizes = dict(PRESETS[a.preset])
    for key in sizes:
        value = getattr(a, key)
        if value is not None:
            sizes[key] = value
    p = ModelParams(**sizes, dtype=a.dtype, embd_dtype=a.embd_dtype, tied=a.tied,
                    rope_scaling=a.rope_scaling, rope_scale_factor=a.rope_scale_factor,
                    rope_freq_base=a.rope_freq_base, rms_eps=a.rms_eps, seed=a.seed, name=a.name,
                    jobs=a.jobs, **gemma3_options(a))
    if p.arch in ("qwen3", "qwen3moe", "gpt-oss") and a.head_dim is None and a.preset == "tiny":
        p.head_dim_override = QWEN3_TINY_HEAD_DIM
    if p.arch == "gpt-oss" and not a.sliding_window:
        p.sliding_window = 8
    return a.out, p


def add_gemma3_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--arch", choices=ARCHITECTURES, default="llama")
    ap.add_argument("--head-dim", type=int, help="head size when not n_embd / n_head")
    ap.add_argument("--sliding-window", type=int, default=0)
    ap.add_argument("--swa-pattern", type=int)
    ap.add_argument("--rope-freq-base-swa", type=float)
    add_new_arch_arguments(ap)


def add_new_arch_arguments(ap: argparse.ArgumentParser) -> None:
    """Options of Llama 3.1's RoPE factors and of qwen2 / qwen3 / phi3 (see the docstring)."""
    ap.add_argument("--rope-freqs", choices=["none", "llama3"], default="none",
                    help="llama: write rope_freqs.weight (Llama 3.1 RoPE factors)")
    ap.add_argument("--rope-factor", type=float, default=8.0, help="llama3: factor (8)")
    ap.add_argument("--low-freq-factor", type=float, default=1.0, help="llama3: (1)")
    ap.add_argument("--high-freq-factor", type=float, default=4.0, help="llama3: (4)")
    ap.add_argument("--original-context", type=int,
                    help="llama3: original_max_position_embeddings (8192); phi3: "
                         "rope.scaling.original_context_length (default: --ctx)")
    ap.add_argument("--longrope", action="store_true",
                    help="phi3, llama: rope_factors_long / rope_factors_short and attn_factor")
    ap.add_argument("--rope-attn-factor", type=float,
                    help="phi3 --longrope: rope.scaling.attn_factor (default: the converter's)")
    ap.add_argument("--no-rope-attn-factor", action="store_true",
                    help="phi3 --longrope: leave rope.scaling.attn_factor out")
    ap.add_argument("--rope-dim", type=int, help="phi3: rope.dimension_count (default: head size)")
    for name in ("ext-factor", "beta-fast", "beta-slow", "log-multiplier"):
        ap.add_argument("--yarn-" + name, type=float,
                        help=f"--rope-scaling yarn: rope.scaling.yarn_{name.replace('-', '_')}")
    ap.add_argument("--experts", type=int,
                    help="experts per layer (llama: Mixtral; qwen2moe/qwen3moe: default 8)")
    ap.add_argument("--experts-used", type=int, help="experts per token (default 2)")
    ap.add_argument("--expert-ff", type=int, help="each expert's width (qwen: 64, Mixtral: n_ff)")
    ap.add_argument("--shared-expert-ff", type=int, default=96, help="qwen2moe: shared expert width")
    ap.add_argument("--router-scale", type=float, default=3.0,
                    help="the router's gain (3): logits of unit inputs spread by about this")
    ap.add_argument("--routing", choices=["decisive", "random"], default="decisive",
                    help="how the router is made (see the docstring)")


def gemma3_options(a: argparse.Namespace) -> dict:
    """ModelParams fields of the options add_gemma3_arguments adds (all architectures')."""
    return dict(arch=a.arch, head_dim_override=a.head_dim, sliding_window=a.sliding_window,
                swa_pattern=a.swa_pattern, rope_freq_base_swa=a.rope_freq_base_swa,
                rope_freqs=a.rope_freqs, rope_factor=a.rope_factor,
                low_freq_factor=a.low_freq_factor, high_freq_factor=a.high_freq_factor,
                original_context=a.original_context, longrope=a.longrope,
                rope_attn_factor=a.rope_attn_factor, omit_rope_attn_factor=a.no_rope_attn_factor,
                n_rot_override=a.rope_dim, yarn_ext_factor=a.yarn_ext_factor,
                yarn_beta_fast=a.yarn_beta_fast, yarn_beta_slow=a.yarn_beta_slow,
                yarn_log_multiplier=a.yarn_log_multiplier,
                n_expert=a.experts if a.experts is not None else
                (8 if a.arch in MOE_ARCHITECTURES else 0),
                n_expert_used=a.experts_used if a.experts_used is not None else 2,
                n_ff_exp=a.expert_ff, n_ff_shexp=a.shared_expert_ff, router_scale=a.router_scale,
                routing=a.routing)


def main(argv: list[str] | None = None) -> int:
    out, p = parse_args(argv)
    try:
        write_model(out, p)
    except ValueError as e:
        print(f"make_llama_gguf: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}: {p.arch} {p.n_layer} layers, n_embd {p.n_embd}, n_head {p.n_head}/"
          f"{p.n_head_kv}, n_ff {p.n_ff}, vocab {p.n_vocab}, {p.dtype}"
          f"{', tied' if p.tied else ''}"
          + (f", {p.n_expert_used} of {p.n_expert} experts {p.expert_ff} wide" if p.n_expert
             else ""), file=sys.stderr)
    if p.rope_freqs == "llama3":
        print("rope_freqs: " + " ".join(f"{v:.6g}" for v in llama3_rope_freqs(p)),
              file=sys.stderr)
    if p.longrope:
        long_f, short_f = longrope_factors(p)
        attn = "absent" if p.omit_rope_attn_factor else f"{longrope_attn_factor(p):.6g}"
        print(f"longrope: original context {p.orig_ctx}, attn_factor {attn}\n  long:  "
              + " ".join(f"{v:.4g}" for v in long_f) + "\n  short: "
              + " ".join(f"{v:.4g}" for v in short_f), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
