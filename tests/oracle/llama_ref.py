#!/usr/bin/env python3
"""Independent numpy reference of the llama, gemma3, qwen2, qwen3 and phi3 forward passes, for
checking polystack's logits.

Weights are read with gguf.GGUFReader and dequantized with the gguf package, then the whole
computation runs in float64, so the only differences from an exact result are the stored
weights themselves. Conventions follow llama.cpp for llama GGUF files:
  - RMSNorm: x / sqrt(mean(x^2) + eps) * w, eps from <arch>.attention.layer_norm_rms_epsilon.
  - RoPE in ggml's NORMAL mode: adjacent pairs (x[2i], x[2i+1]) of the first n_rot dims of each
    head rotate by pos * base^(-2i/n_rot); linear scaling divides pos by the factor.
  - Grouped-query attention: query head h reads KV head h // (n_head / n_head_kv); causal,
    scale 1/sqrt(head_dim).
  - SwiGLU FFN: down(silu(gate(x)) * up(x)); output.weight, or token_embd.weight when absent.
and for gemma3 GGUF files (Gemma 3 as llama.cpp runs it):
  - the embedding rows are multiplied by sqrt(n_embd);
  - norm weights are used as stored (the converter already stored 1 + w);
  - each query and key head is RMS-normalized (attn_q_norm / attn_k_norm) before RoPE;
  - RoPE in NEOX mode: dims i and i + n_rot/2 rotate together;
  - attention output and FFN output pass through post_attention_norm / post_ffw_norm before
    their residual adds; the FFN is down(gelu_tanh(gate(x)) * up(x));
  - with attention.sliding_window = W, layer l is a sliding layer unless l % 6 == 5 (or as
    attention.sliding_window_pattern says); a sliding layer's query at position p sees
    positions p - W + 1 .. p and its RoPE base is rope.freq_base_swa (10000), without scaling;
  - queries are scaled by 1/sqrt(head_dim) (1/sqrt(n_embd / n_head) for the 62-layer 27B).
  - kv_cache="f16" rounds K (after RoPE) and V to fp16, as a KV cache stored in F16 does
    (llama.cpp's default); that storage is part of the computation being checked, like the
    weights' type, so the reference reproduces it instead of widening the tolerance.
RoPE frequency factors (any architecture whose file has them):
  - llama with rope_freqs.weight (Llama 3.1's "llama3" rope type, as llama.cpp's converter
    stores it): dims pair i rotates by pos * base^(-2i/n_rot) / freq_factor[i], which is what
    ggml_rope_ext does with freq_factors and what Hugging Face's _compute_llama3_parameters
    does to inv_freq; the factors are read from the file, never recomputed.
  - <arch>.rope.scaling.attn_factor (default 1, as llama.cpp's hparams.rope_attn_factor)
    multiplies cos and sin (so each of q and k), as ggml's rope_yarn mscale and HF's
    attention_scaling do.
YaRN (rope.scaling.type "yarn", factor s, original_context_length n_orig, any architecture; on
gemma3 only its global layers): ggml's rope_yarn as llama.cpp drives it. Pair i's extrapolated
angle theta_e = pos * base^(-2i/n_rot) / freq_factor[i] and interpolated one theta_i = theta_e / s
mix as theta_i * (1 - r) + theta_e * r, where r = (1 - clamp((i - low) / max(0.001, high - low),
0, 1)) * ext_factor and low = max(0, floor(d(beta_fast))), high = min(n_rot - 1,
ceil(d(beta_slow))), d(b) = n_rot ln(n_orig / (2 pi b)) / (2 ln base). cos and sin are multiplied
by llama.cpp's yarn_attn_factor (get_mscale(s, 1) / get_mscale(s, log_multiplier) when the file
has rope.scaling.yarn_log_multiplier, else get_mscale(s, 1); divided by 1 + 0.1 ln s; times
rope.scaling.attn_factor) and then by ggml's 1 + 0.1 ln s. ext_factor defaults to 1, beta_fast
to 32, beta_slow to 1 (rope.scaling.yarn_*); with ext_factor 0 the angle is theta_i and the
multiplier rope.scaling.yarn_attn_factor times attn_factor.
and for the mixtures of experts (llama with expert_count: Mixtral; qwen2moe; qwen3moe), whose
feed-forward is llama.cpp's build_moe_ffn: see moe_ffn;
and for gpt-oss (OpenAI's gpt-oss as llama.cpp runs it, src/models/openai-moe.cpp):
  - Q, K, V and attn_output have biases; RoPE in NEOX mode (YaRN where the file says so, on
    every layer); queries scaled by 1/sqrt(head_dim);
  - attention sinks: head h's softmax has one more logit, attn_sinks[h], which takes its share
    of the weights and adds no value;
  - the even layers attend over the sliding window (attention.sliding_window), with
    rope.freq_base_swa (default rope.freq_base); the odd ones over everything;
  - the feed-forward's input norm is post_attention_norm; its router adds ffn_gate_inp.bias,
    picks the top k of the biased logits and weighs them by a softmax over the k chosen; each
    expert adds its biases after the gate, up and down projections and joins gate g and up u
    as min(g, 7) * sigmoid(1.702 min(g, 7)) * (clamp(u, -7, 7) + 1) (ggml's swiglu_oai);
and for qwen2 / qwen3 / phi3 GGUF files (Hugging Face's Qwen2/Qwen3/Phi3 modeling, with
llama.cpp's GGUF layout):
  - RoPE in NEOX mode for all three (llama.cpp's llama_model_rope_type; HF's rotate_half);
  - qwen2: attn_q / attn_k / attn_v have biases, added after the projection;
  - qwen3: head size from attention.key_length; every query and key head is RMS-normalized
    with attn_q_norm / attn_k_norm (eps = attention.layer_norm_rms_epsilon) before RoPE;
  - phi3: attn_qkv is Q rows, then K, then V (HF Phi3Attention.qkv_proj); ffn_up is the gate
    half then the up half, out = down(silu(gate) * up) (HF Phi3MLP.gate_up_proj); RoPE covers the
    first rope.dimension_count dims of each head (partial rotary);
  - phi3 LongRoPE: with rope_factors_long / rope_factors_short, the long factors are used when
    the run's context size n_ctx exceeds rope.scaling.original_context_length (default
    context_length), else the short ones, as llama.cpp's llama_model::get_rope_factors picks
    them (n_ctx_seq > n_ctx_orig_yarn). Pass RefModel(path, n_ctx=...) the context per sequence
    the run being checked uses (llama.cpp pads it to a multiple of 256); without it the
    reference takes context_length, as llama.cpp does for -c 0. llama files with
    rope.scaling.type "longrope" take the same factors the same way (llama.cpp loads them for
    that architecture when the type says so).
  - phi3 sliding window: attention.sliding_window = W > 0 makes every layer a sliding layer
    (a query at position p sees p - W + 1 .. p, HF's sliding_window_causal mask). llama.cpp
    (llama_model_phi3::load_arch_hparams) currently ignores it and attends causally over the
    whole context; RefModel(path, phi3_sliding_window=False) does the same.

Run as a script it decodes greedily from a prompt: llama_ref.py MODEL --prompt "Once upon a time"
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

import gguf
from gguf import GGMLQuantizationType as QT

# Optional hook applied to the input of every weight matmul: (activations, weight type) ->
# activations. The reference itself never uses it; check_logits.py uses it to measure how much
# a backend that rounds activations (to F16, BF16 or 8-bit blocks) may differ.
MatmulInputRounding = Callable[[np.ndarray, QT], np.ndarray]

ARCHITECTURES = ("llama", "gemma3", "qwen2", "qwen3", "phi3", "qwen2moe", "qwen3moe", "gpt-oss")
NEOX_ARCHITECTURES = ("gemma3", "qwen2", "qwen3", "phi3", "qwen2moe", "qwen3moe", "gpt-oss")


@dataclass
class HParams:
    arch: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    head_dim: int
    n_rot: int
    rope_freq_base: float
    rope_scale: float  # positions are divided by this (1 without scaling)
    rms_eps: float
    # gemma3 only
    sliding_window: int = 0
    sliding_layers: list[bool] = field(default_factory=list)
    rope_freq_base_swa: float = 10000.0
    kq_scale: float = 0.0
    # RoPE frequency factors (llama's rope_freqs, phi3's long or short factors) or None, and the
    # cos/sin multiplier
    rope_freq_factors: np.ndarray | None = None
    rope_attn_factor: float = 1.0
    # YaRN: {"factor", "n_orig", "ext_factor", "beta_fast", "beta_slow", "mscale"} or None
    yarn: dict | None = None
    n_ctx: int = 0  # the run's context size (phi3: picks the long or short factors)
    # mixture of experts (expert_count > 0): experts per token, and whether their weights are
    # normalized to sum 1 (Mixtral, qwen3moe; not qwen2moe)
    n_expert: int = 0
    n_expert_used: int = 0
    expert_norm: bool = True


class RefModel:
    def __init__(self, path: str, n_ctx: int | None = None, phi3_sliding_window: bool = True):
        self.path = path
        self.reader = gguf.GGUFReader(path)
        arch = self.field("general.architecture")
        if arch not in ARCHITECTURES:
            raise ValueError(f"{path}: architecture {arch!r} is not one of {ARCHITECTURES}")
        a = arch
        n_head = int(self.field(f"{a}.attention.head_count"))
        n_embd = int(self.field(f"{a}.embedding_length"))
        head_dim = int(self.field(f"{a}.attention.key_length", n_embd // n_head))
        scale = 1.0
        if self.field(f"{a}.rope.scaling.type", "none") == "linear":
            scale = float(self.field(f"{a}.rope.scaling.factor", 1.0))
        self.tensors = {t.name: t for t in self.reader.tensors}
        n_layer = int(self.field(f"{a}.block_count"))
        self.hp = HParams(
            arch=arch,
            n_vocab=self.tensors["token_embd.weight"].data.shape[0],
            n_embd=n_embd,
            n_layer=n_layer,
            n_head=n_head,
            n_head_kv=int(self.field(f"{a}.attention.head_count_kv", n_head)),
            n_ff=int(self.field(f"{a}.feed_forward_length")),
            head_dim=head_dim,
            n_rot=int(self.field(f"{a}.rope.dimension_count", head_dim)),
            rope_freq_base=float(self.field(f"{a}.rope.freq_base", 10000.0)),
            rope_scale=scale,
            rms_eps=float(self.field(f"{a}.attention.layer_norm_rms_epsilon")),
            kq_scale=1.0 / np.sqrt(head_dim),
        )
        if arch == "gemma3":
            hp = self.hp
            hp.sliding_window = int(self.field("gemma3.attention.sliding_window", 0))
            pattern = self.field("gemma3.attention.sliding_window_pattern", 6)
            if hp.sliding_window == 0:
                hp.sliding_layers = [False] * n_layer
            elif isinstance(pattern, list):
                hp.sliding_layers = [bool(v) for v in pattern]
            else:
                n = int(pattern)
                hp.sliding_layers = [n == 0 or layer % n < n - 1 for layer in range(n_layer)]
            hp.rope_freq_base_swa = float(self.field("gemma3.rope.freq_base_swa", 10000.0))
            if n_layer == 62:
                hp.kq_scale = 1.0 / np.sqrt(n_embd // n_head)
        self._cache: dict[str, np.ndarray] = {}
        hp = self.hp
        hp.n_expert = int(self.field(f"{a}.expert_count", 0))
        if hp.n_expert:
            hp.n_expert_used = int(self.field(f"{a}.expert_used_count"))
            hp.expert_norm = arch not in ("qwen2moe", "gpt-oss")
        if arch == "gpt-oss":
            hp.sliding_window = int(self.field("gpt-oss.attention.sliding_window"))
            hp.sliding_layers = [layer % 2 == 0 for layer in range(n_layer)]
            hp.rope_freq_base_swa = float(self.field("gpt-oss.rope.freq_base_swa",
                                                     hp.rope_freq_base))
        hp.n_ctx = int(n_ctx) if n_ctx else int(self.field(f"{a}.context_length", 0))
        hp.rope_attn_factor = float(self.field(f"{a}.rope.scaling.attn_factor", 1.0))
        if self.field(f"{a}.rope.scaling.type", "none") == "yarn":
            factor = float(self.field(f"{a}.rope.scaling.factor"))
            ext = float(self.field(f"{a}.rope.scaling.yarn_ext_factor", -1.0))
            ext = 1.0 if ext < 0 else ext
            log_mul = float(self.field(f"{a}.rope.scaling.yarn_log_multiplier", 0.0))

            def get_mscale(scale, m):
                return 1.0 if scale <= 1.0 else 0.1 * m * np.log(scale) + 1.0
            if ext != 0:
                attn = get_mscale(factor, 1.0)
                if log_mul != 0:
                    attn = attn / get_mscale(factor, log_mul)
                attn = attn / (1.0 + 0.1 * np.log(factor)) * hp.rope_attn_factor
                mscale = attn * (1.0 + 0.1 * np.log(factor))  # ggml's rope_yarn
            else:
                mscale = float(self.field(f"{a}.rope.scaling.yarn_attn_factor", 1.0)) * \
                    hp.rope_attn_factor
            hp.yarn = {
                "factor": factor, "ext_factor": ext, "mscale": mscale,
                "n_orig": int(self.field(f"{a}.rope.scaling.original_context_length",
                                         int(self.field(f"{a}.context_length")))),
                "beta_fast": float(self.field(f"{a}.rope.scaling.yarn_beta_fast", 32.0)),
                "beta_slow": float(self.field(f"{a}.rope.scaling.yarn_beta_slow", 1.0)),
            }
        if arch == "llama" and self.has("rope_freqs.weight"):
            hp.rope_freq_factors = self.weight("rope_freqs.weight")
        longrope = arch == "llama" and self.field("llama.rope.scaling.type", "") == "longrope"
        if arch == "phi3" or longrope:
            n_orig = int(self.field(f"{a}.rope.scaling.original_context_length",
                                    int(self.field(f"{a}.context_length"))))
            name = ("rope_factors_long.weight" if hp.n_ctx > n_orig
                    else "rope_factors_short.weight")
            if self.has(name):
                hp.rope_freq_factors = self.weight(name)
        if arch == "phi3":
            hp.sliding_window = int(self.field("phi3.attention.sliding_window", 0))
            if not phi3_sliding_window:
                hp.sliding_window = 0
            hp.sliding_layers = [hp.sliding_window > 0] * n_layer
        if hp.rope_freq_factors is not None and hp.rope_freq_factors.shape != (hp.n_rot // 2,):
            raise ValueError(f"{path}: RoPE factors of shape {hp.rope_freq_factors.shape}, "
                             f"expected ({hp.n_rot // 2},)")

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

    def embedding_rows(self, ids: np.ndarray) -> np.ndarray:
        """Rows of token_embd.weight, dequantizing only those rows (vocabularies reach 262k)."""
        name = "token_embd.weight"
        if name in self._cache:
            return self._cache[name][ids]
        t = self.tensors[name]
        raw = np.asarray(t.data)
        rows = gguf.quants.dequantize(raw[ids], QT(t.tensor_type))
        return rows.reshape(len(ids), -1).astype(np.float64)

    def has(self, name: str) -> bool:
        return name in self.tensors


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x: np.ndarray, positions: np.ndarray, n_rot: int, base: float, scale: float,
         neox: bool, freq_factors: np.ndarray | None = None,
         attn_factor: float = 1.0, yarn: dict | None = None) -> np.ndarray:
    """x: [n_tokens, n_heads, head_dim]. Rotates the first n_rot dims of each head: adjacent
    pairs (x[2i], x[2i+1]) in NORMAL mode, (x[i], x[i + n_rot/2]) in NEOX mode. Pair i turns by
    pos / scale * base^(-2i/n_rot) / freq_factors[i]; cos and sin are multiplied by
    attn_factor. With yarn (HParams.yarn), the angle and the multiplier are YaRN's (the module's
    docstring) and scale and attn_factor are not used."""
    out = x.copy()
    i = np.arange(n_rot // 2, dtype=np.float64)
    inv_freq = base ** (-2.0 * i / n_rot)
    if yarn is None:
        theta = (positions.astype(np.float64) / scale)[:, None] * inv_freq[None, :]
        if freq_factors is not None:
            theta = theta / np.asarray(freq_factors, dtype=np.float64)[None, :]
    else:
        extrap = positions.astype(np.float64)[:, None] * inv_freq[None, :]
        if freq_factors is not None:
            extrap = extrap / np.asarray(freq_factors, dtype=np.float64)[None, :]
        interp = extrap / yarn["factor"]
        theta = interp
        if yarn["ext_factor"] != 0:
            def corr_dim(beta):
                return n_rot * np.log(yarn["n_orig"] / (beta * 2 * np.pi)) / (2 * np.log(base))
            low = max(0.0, np.floor(corr_dim(yarn["beta_fast"])))
            high = min(n_rot - 1.0, np.ceil(corr_dim(yarn["beta_slow"])))
            ramp = (1 - np.clip((i - low) / max(0.001, high - low), 0, 1)) * yarn["ext_factor"]
            theta = interp * (1 - ramp)[None, :] + extrap * ramp[None, :]
        attn_factor = yarn["mscale"]
    cos = np.cos(theta)[:, None, :]
    sin = np.sin(theta)[:, None, :]
    if attn_factor != 1.0:
        cos = cos * attn_factor
        sin = sin * attn_factor
    if neox:
        first, second = slice(0, n_rot // 2), slice(n_rot // 2, n_rot)
    else:
        first, second = slice(0, n_rot, 2), slice(1, n_rot, 2)
    x0 = x[..., first]
    x1 = x[..., second]
    out[..., first] = x0 * cos - x1 * sin
    out[..., second] = x0 * sin + x1 * cos
    return out


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@dataclass
class RoutingTrace:
    """What the mixture-of-experts layers chose: per layer the router logits [n_tokens, E] and
    the chosen experts [n_tokens, k]; margin is the smallest gap between the k-th and the
    (k+1)-th largest logit of any token in any layer (inf when k = E): a perturbation of the
    logits smaller than half of it cannot change any choice."""
    logits: list[np.ndarray] = field(default_factory=list)
    chosen: list[np.ndarray] = field(default_factory=list)
    margin: float = float("inf")


def moe_ffn(h: np.ndarray, b: str, m: "RefModel", matmul, trace: RoutingTrace | None):
    """llama.cpp's build_moe_ffn for these families: top-k of the router's softmax (ties to the
    lower index), their probabilities (normalized to sum 1 for Mixtral and qwen3moe), each
    chosen expert's SwiGLU feed-forward, the weighted sum; qwen2moe adds the shared expert
    times sigmoid(ffn_gate_inp_shexp . h)."""
    hp = m.hp
    k = hp.n_expert_used
    oai = hp.arch == "gpt-oss"
    z = matmul(h, b + "ffn_gate_inp.weight")  # [n, E]
    if oai:
        z = z + m.weight(b + "ffn_gate_inp.bias")
    order = np.argsort(-z, axis=-1, kind="stable")
    chosen = order[:, :k]
    if oai:  # a softmax over the chosen logits
        w = softmax(np.take_along_axis(z, chosen, axis=-1))
    else:
        w = np.take_along_axis(softmax(z), chosen, axis=-1)
    if hp.expert_norm:
        w = w / w.sum(axis=-1, keepdims=True)
    if trace is not None:
        trace.logits.append(z)
        trace.chosen.append(chosen)
        if k < z.shape[1]:
            zs = np.take_along_axis(z, order, axis=-1)
            trace.margin = min(trace.margin, float((zs[:, k - 1] - zs[:, k]).min()))
    gate, up, down = (m.weight(b + f"ffn_{n}_exps.weight") for n in ("gate", "up", "down"))
    if oai:
        bg, bu, bd = (m.weight(b + f"ffn_{n}_exps.bias") for n in ("gate", "up", "down"))
    out = np.zeros_like(h)
    for t in range(h.shape[0]):
        for j in range(k):
            e = chosen[t, j]
            x = matmul.rounded(h[t:t + 1], b + "ffn_up_exps.weight")
            g = x @ gate[e].T
            u = x @ up[e].T
            if oai:
                g = np.minimum(g + bg[e], 7.0)
                u = np.clip(u + bu[e], -7.0, 7.0)
                act = g / (1.0 + np.exp(-1.702 * g)) * (u + 1.0)
            else:
                act = silu(g) * u
            a = matmul.rounded(act, b + "ffn_down_exps.weight")
            y = (a @ down[e].T)[0]
            out[t] += w[t, j] * (y + bd[e] if oai else y)
    if m.has(b + "ffn_gate_inp_shexp.weight"):
        gate_value = 1.0 / (1.0 + np.exp(-(h @ m.weight(b + "ffn_gate_inp_shexp.weight"))))
        shared = matmul(silu(matmul(h, b + "ffn_gate_shexp.weight"))
                        * matmul(h, b + "ffn_up_shexp.weight"), b + "ffn_down_shexp.weight")
        out = out + gate_value[:, None] * shared
    return out


def logits(model_path: str | RefModel, token_ids, kv_cache: str = "f32",
           rounding: MatmulInputRounding | None = None,
           trace: RoutingTrace | None = None) -> np.ndarray:
    """Logits for every position of token_ids (positions 0..n-1): [n_tokens, n_vocab]. With a
    trace, the mixture-of-experts layers record their routing there."""
    if kv_cache not in ("f32", "f16"):
        raise ValueError(f"kv_cache must be f32 or f16, not {kv_cache!r}")
    m = model_path if isinstance(model_path, RefModel) else RefModel(model_path)
    hp = m.hp
    gemma = hp.arch == "gemma3"
    neox = hp.arch in NEOX_ARCHITECTURES
    phi3 = hp.arch == "phi3"
    q_dim, kv_dim = hp.n_head * hp.head_dim, hp.n_head_kv * hp.head_dim
    ids = np.asarray(token_ids, dtype=np.int64)
    if ids.ndim != 1 or ids.size == 0:
        raise ValueError("token_ids must be a non-empty 1-D sequence")
    if ids.min() < 0 or ids.max() >= hp.n_vocab:
        raise ValueError(f"token ids must lie in [0, {hp.n_vocab})")
    n = ids.size
    hd = hp.head_dim
    group = hp.n_head // hp.n_head_kv
    positions = np.arange(n)

    def rounded(x: np.ndarray, name: str) -> np.ndarray:
        return rounding(x, m.tensor_type(name)) if rounding is not None else x

    def matmul(x: np.ndarray, name: str) -> np.ndarray:
        return rounded(x, name) @ m.weight(name).T
    matmul.rounded = rounded

    def norm(x: np.ndarray, name: str) -> np.ndarray:
        return rms_norm(x, m.weight(name), hp.rms_eps)

    x = m.embedding_rows(ids)
    if gemma:
        x = x * np.sqrt(hp.n_embd)
    distance = positions[:, None] - positions[None, :]  # query position - key position
    causal = np.where(distance < 0, -np.inf, 0.0)
    sliding = np.where((distance < 0) | (distance >= max(hp.sliding_window, 1)), -np.inf, 0.0)
    for layer in range(hp.n_layer):
        b = f"blk.{layer}."
        oai = hp.arch == "gpt-oss"
        is_sliding = (gemma or phi3 or oai) and hp.sliding_layers[layer]
        gemma_sliding = gemma and is_sliding
        base = hp.rope_freq_base_swa if gemma_sliding or (oai and is_sliding) else \
            hp.rope_freq_base
        rope_scale = 1.0 if gemma_sliding else hp.rope_scale
        h = norm(x, b + "attn_norm.weight")
        if phi3:
            qkv = matmul(h, b + "attn_qkv.weight")
            q = qkv[:, :q_dim]
            k = qkv[:, q_dim:q_dim + kv_dim]
            v = qkv[:, q_dim + kv_dim:q_dim + 2 * kv_dim]
        else:
            q = matmul(h, b + "attn_q.weight")
            k = matmul(h, b + "attn_k.weight")
            v = matmul(h, b + "attn_v.weight")
        if hp.arch in ("qwen2", "qwen2moe", "gpt-oss"):
            q = q + m.weight(b + "attn_q.bias")
            k = k + m.weight(b + "attn_k.bias")
            v = v + m.weight(b + "attn_v.bias")
        q = q.reshape(n, hp.n_head, hd)
        k = k.reshape(n, hp.n_head_kv, hd)
        v = v.reshape(n, hp.n_head_kv, hd)
        if gemma or hp.arch in ("qwen3", "qwen3moe"):
            q = norm(q, b + "attn_q_norm.weight")
            k = norm(k, b + "attn_k_norm.weight")
        yarn = None if gemma_sliding else hp.yarn
        q = rope(q, positions, hp.n_rot, base, rope_scale, neox=neox,
                 freq_factors=hp.rope_freq_factors, attn_factor=hp.rope_attn_factor, yarn=yarn)
        k = rope(k, positions, hp.n_rot, base, rope_scale, neox=neox,
                 freq_factors=hp.rope_freq_factors, attn_factor=hp.rope_attn_factor, yarn=yarn)
        if kv_cache == "f16":
            k = k.astype(np.float16).astype(np.float64)
            v = v.astype(np.float16).astype(np.float64)
        k = np.repeat(k, group, axis=1)  # query head h uses KV head h // group
        v = np.repeat(v, group, axis=1)
        mask = sliding if is_sliding else causal
        scores = np.einsum("qhd,khd->hqk", q, k) * hp.kq_scale + mask[None]
        if oai:  # the sink: one more logit per head, its weight then dropped
            sinks = np.broadcast_to(m.weight(b + "attn_sinks.weight")[:, None, None],
                                    scores.shape[:2] + (1,))
            scores = np.concatenate([scores, sinks], axis=-1)
        scores -= scores.max(axis=-1, keepdims=True)
        probs = np.exp(scores)
        probs /= probs.sum(axis=-1, keepdims=True)
        if oai:
            probs = probs[..., :-1]
        attn = np.einsum("hqk,khd->qhd", probs, v).reshape(n, hp.n_head * hd)
        out = matmul(attn, b + "attn_output.weight")
        if oai:
            out = out + m.weight(b + "attn_output.bias")
        if gemma:
            out = norm(out, b + "post_attention_norm.weight")
        x = x + out

        h = norm(x, b + ("post_attention_norm.weight" if oai else "ffn_norm.weight"))
        act = gelu_tanh if gemma else silu
        if hp.n_expert:
            x = x + moe_ffn(h, b, m, matmul, trace)
            continue
        if phi3:
            gate_up = matmul(h, b + "ffn_up.weight")
            n_ff = gate_up.shape[-1] // 2
            ff = act(gate_up[:, :n_ff]) * gate_up[:, n_ff:]
        else:
            ff = act(matmul(h, b + "ffn_gate.weight")) * matmul(h, b + "ffn_up.weight")
        out = matmul(ff, b + "ffn_down.weight")
        if gemma:
            out = norm(out, b + "post_ffw_norm.weight")
        x = x + out

    x = norm(x, "output_norm.weight")
    out_name = "output.weight" if m.has("output.weight") else "token_embd.weight"
    return matmul(x, out_name)


# --- A small SentencePiece (llama) tokenizer, only for the greedy demo below -----------------

def vocab(model: RefModel) -> tuple[list[str], list[float], list[int]]:
    tokens = [str(t) for t in model.field("tokenizer.ggml.tokens")]
    scores = [float(s) for s in model.field("tokenizer.ggml.scores", [0.0] * len(tokens))]
    types = [int(t) for t in model.field("tokenizer.ggml.token_type", [1] * len(tokens))]
    return tokens, scores, types


def spm_encode(model: RefModel, text: str, add_bos: bool = True) -> list[int]:
    """llama.cpp's SPM algorithm: prefix a space (unless tokenizer.ggml.add_space_prefix is
    false), spaces -> U+2581, split into UTF-8 characters, then repeatedly merge the adjacent
    pair whose concatenation is the vocab piece with the highest score (leftmost on ties);
    unknown characters fall back to byte tokens."""
    tokens, scores, types = vocab(model)
    index = {t: i for i, t in enumerate(tokens) if types[i] in (1, 4, 6)}
    if model.field("tokenizer.ggml.add_space_prefix", True):
        text = " " + text
    text = text.replace(" ", "\u2581")
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
    ids = [int(model.field("tokenizer.ggml.bos_token_id", 1))] if add_bos else []
    for s in symbols:
        if s in index:
            ids.append(index[s])
        else:
            ids.extend(index[f"<0x{b:02X}>"] for b in s.encode("utf-8"))
    return ids


def spm_decode(model: RefModel, ids) -> str:
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
    ap.add_argument("--tokens", help="prompt as space-separated token ids instead of --prompt")
    ap.add_argument("--n-predict", type=int, default=64)
    ap.add_argument("--n-ctx", type=int, help="the run's context size (phi3 LongRoPE)")
    ap.add_argument("--kv-cache", choices=["f32", "f16"], default="f32")
    a = ap.parse_args()
    model = RefModel(a.model, n_ctx=a.n_ctx)
    if a.tokens:
        ids = [int(t) for t in a.tokens.split()]
    else:
        ids = spm_encode(model, a.prompt)
    prompt_len = len(ids)
    print("prompt ids:", " ".join(map(str, ids)))
    for _ in range(a.n_predict):
        ids.append(int(np.argmax(logits(model, ids, kv_cache=a.kv_cache)[-1])))
    print("generated ids:", " ".join(map(str, ids[prompt_len:])))
    print("text:", spm_decode(model, ids).lstrip(" "))
    return 0


if __name__ == "__main__":
    sys.exit(main())
