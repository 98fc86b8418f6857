#!/usr/bin/env python3
"""Cross-checks make_llama_gguf.py's models and the numpy reference (tests/oracle/llama_ref.py)
against a llama.cpp build: greedy tokens and top log-probabilities from llama-server.

Not part of the test suite (llama.cpp is not there in CI); run it by hand after changing the
generator or the reference:

    scripts/crosscheck_llamacpp.py --llama-bin /path/to/llama.cpp/build/bin [--case NAME ...]

For each case a tiny F32 model is written into a temporary folder, one llama-server is started
on it (127.0.0.1, a free port, -c as the case says, -t 2, one slot, F32 KV cache unless
--kv-cache f16, no flash attention), asked for --n-predict greedy tokens after a fixed token-id prompt through
/completion (temperature 0, top_k 1, ignore_eos, return_tokens), then asked once per step
for one token after each prefix with n_probs 8 (softmax of the raw logits), then stopped. The
reference decodes greedily from the same prompt (its EOS logit set to -inf, which is what
ignore_eos does in llama.cpp). Reported per case: how many tokens match, and the largest
difference of the top-8 log-probabilities (EOS left out) over the steps whose prefixes agree.

With --polystack BIN, polystack itself decodes greedily from the same prompt on the same file
(one `polystack logits --tokens` call per step, -c as the case says, on the CPU, EOS masked) and
its tokens are compared with llama.cpp's as well.

Cases marked "sensitivity" also decode with the feature switched off in the reference, to show
that the feature changes the tokens (else a match would not say much).

Exit status: 0 when every case matches as expected, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "tests" / "oracle"))

import llama_ref  # noqa: E402
import make_llama_gguf  # noqa: E402
from make_llama_gguf import ModelParams  # noqa: E402

N_PROBS = 8  # top log-probabilities compared per step


@dataclass
class Case:
    name: str
    params: ModelParams
    ctx: int = 256  # llama-server -c (llama.cpp pads it to a multiple of 256)
    ref_kwargs: dict = field(default_factory=dict)  # extra RefModel arguments
    expect_match: bool = True
    # Whether polystack's tokens should equal llama.cpp's (None: as expect_match).
    polystack_matches: bool | None = None
    note: str = ""
    # A reference tweak that switches the case's feature off: (description, fn(RefModel)).
    ablation: tuple | None = None
    # A `polystack quantize` mix the model is converted to first (needs --polystack): llama.cpp
    # then reads the types as polystack wrote them. Both quantize the activations of such
    # weights to 8 bits (the reference does not), which moves these small random models' log-
    # probabilities by ~0.1 and can flip a greedy near-tie: the verdict is then polystack's log-
    # probabilities along llama.cpp's own tokens within 0.2 of llama.cpp's (Q4_0, an old type,
    # shows the same gaps), and the token counts are information.
    quantize: str = ""


def _no_rope_factors(m: llama_ref.RefModel) -> None:
    m.hp.rope_freq_factors = None


def _short_factors(m: llama_ref.RefModel) -> None:
    m.hp.rope_freq_factors = m.weight("rope_factors_short.weight")


def _long_factors(m: llama_ref.RefModel) -> None:
    m.hp.rope_freq_factors = m.weight("rope_factors_long.weight")


def _no_qkv_bias(m: llama_ref.RefModel) -> None:
    for layer in range(m.hp.n_layer):
        for name in ("attn_q.bias", "attn_k.bias", "attn_v.bias"):
            full = f"blk.{layer}.{name}"
            m._cache[full] = np.zeros_like(m.weight(full))


def _no_qk_norm(m: llama_ref.RefModel) -> None:
    # RMS norm with unit weights still normalizes; this removes the stored weights' effect.
    for layer in range(m.hp.n_layer):
        for name in ("attn_q_norm.weight", "attn_k_norm.weight"):
            full = f"blk.{layer}.{name}"
            m._cache[full] = np.ones_like(m.weight(full))


def _no_attn_factor(m: llama_ref.RefModel) -> None:
    m.hp.rope_attn_factor = 1.0


def _no_sliding_window(m: llama_ref.RefModel) -> None:
    m.hp.sliding_window = 0
    m.hp.sliding_layers = [False] * m.hp.n_layer


def _flip_expert_norm(m: llama_ref.RefModel) -> None:
    m.hp.expert_norm = not m.hp.expert_norm


def _no_shared_expert(m: llama_ref.RefModel) -> None:
    for layer in range(m.hp.n_layer):
        full = f"blk.{layer}.ffn_down_shexp.weight"
        m._cache[full] = np.zeros_like(m.weight(full))


def _no_yarn(m: llama_ref.RefModel) -> None:
    m.hp.yarn = None


def _no_sinks(m: llama_ref.RefModel) -> None:
    for layer in range(m.hp.n_layer):
        name = f"blk.{layer}.attn_sinks.weight"
        m._cache[name] = np.full_like(m.weight(name), -np.inf)


def cases() -> list[Case]:
    def P(**kw) -> ModelParams:
        return ModelParams(**kw)

    lr = dict(arch="phi3", longrope=True, ctx=1024, original_context=256)
    return [
        Case("llama", P(seed=11)),
        Case("llama_rope_freqs", P(seed=11, rope_freqs="llama3", original_context=64),
             ablation=("without rope_freqs", _no_rope_factors)),
        Case("qwen2", P(arch="qwen2", seed=12), ablation=("with zero biases", _no_qkv_bias)),
        Case("qwen2_tied", P(arch="qwen2", seed=13, tied=True)),
        Case("qwen3", P(arch="qwen3", seed=14, head_dim_override=32),
             ablation=("with unit q/k norm weights", _no_qk_norm)),
        Case("qwen3_tied", P(arch="qwen3", seed=15, head_dim_override=32, tied=True,
                             rope_freq_base=1e6)),
        Case("phi3", P(arch="phi3", seed=16)),
        Case("phi3_partial_rope", P(arch="phi3", seed=17, n_rot_override=8)),
        Case("phi3_swa_ref_full", P(arch="phi3", seed=18, sliding_window=8),
             ref_kwargs=dict(phi3_sliding_window=False), polystack_matches=False,
             note="reference told to ignore the window, as llama.cpp does; polystack applies "
                  "it, so it differs from both"),
        Case("phi3_swa", P(arch="phi3", seed=18, sliding_window=8), expect_match=False,
             note="reference applies the window; llama.cpp disables Phi-3 SWA "
                  "(llama_model_phi3::load_arch_hparams), so a divergence is expected",
             ablation=("without the window", _no_sliding_window)),
        Case("phi3_longrope_short", P(seed=19, **lr), ctx=256, ref_kwargs=dict(n_ctx=256),
             ablation=("with the long factors", _long_factors)),
        Case("phi3_longrope_long", P(seed=19, **lr), ctx=512, ref_kwargs=dict(n_ctx=512),
             ablation=("with the short factors", _short_factors)),
        Case("phi3_longrope_long_attn", P(seed=20, rope_attn_factor=1.6, **lr), ctx=512,
             ref_kwargs=dict(n_ctx=512), ablation=("attn_factor 1", _no_attn_factor)),
        Case("phi3_longrope_no_attn_key", P(seed=20, omit_rope_attn_factor=True, **lr), ctx=512,
             ref_kwargs=dict(n_ctx=512)),
        Case("phi3_longrope_partial_long", P(seed=21, n_rot_override=8, **lr), ctx=512,
             ref_kwargs=dict(n_ctx=512)),
        # llama with rope.scaling.type "longrope": the same factors as phi3's, the same choice.
        Case("llama_longrope_short", P(seed=28, longrope=True, ctx=1024, original_context=256),
             ctx=256, ref_kwargs=dict(n_ctx=256), ablation=("with the long factors", _long_factors)),
        Case("llama_longrope_long", P(seed=27, longrope=True, ctx=1024, original_context=256),
             ctx=512, ref_kwargs=dict(n_ctx=512),
             ablation=("with the short factors", _short_factors)),
        # YaRN (a low RoPE base and small original contexts put the ramp inside the head).
        Case("llama_yarn", P(seed=22, rope_scaling="yarn", rope_scale_factor=4.0,
                             original_context=512, rope_freq_base=1000.0),
             ablation=("without YaRN", _no_yarn)),
        Case("qwen3_yarn_attn", P(arch="qwen3", seed=23, head_dim_override=32,
                                  rope_scaling="yarn", rope_scale_factor=8.0,
                                  original_context=256, rope_freq_base=1000.0,
                                  rope_attn_factor=0.9)),
        Case("qwen3_yarn_keys", P(arch="qwen3", seed=23, head_dim_override=32,
                                  rope_scaling="yarn", rope_scale_factor=8.0,
                                  original_context=256, rope_freq_base=1000.0,
                                  yarn_beta_fast=16.0, yarn_log_multiplier=0.5),
             expect_match=False,
             note="llama.cpp reads rope.scaling.yarn_beta_* and yarn_log_multiplier only for the "
                  "architectures whose converters write them (not qwen3): it runs the defaults, "
                  "the reference and polystack what the file says"),
        # gpt-oss: biases, attention sinks, the even layers sliding over 8 positions, router and
        # expert biases, swiglu_oai; with YaRN.
        Case("gpt_oss", P(arch="gpt-oss", seed=37, head_dim_override=32, sliding_window=8,
                          n_expert=8, n_expert_used=2), ablation=("without sinks", _no_sinks)),
        Case("gpt_oss_yarn", P(arch="gpt-oss", seed=38, head_dim_override=32, sliding_window=8,
                               n_expert=8, n_expert_used=2, rope_scaling="yarn",
                               rope_scale_factor=8.0, original_context=64,
                               rope_freq_base=1000.0)),
        # The codebook types as polystack's quantize writes them (rows of 256 for IQ4_XS), and
        # Q4_0 for the size of the gaps that 8-bit activations make.
        Case("qwen3moe_q4_0", P(arch="qwen3moe", seed=36, head_dim_override=32, n_expert=8,
                                n_expert_used=2, n_ff_exp=256), quantize="Q4_0"),
        Case("qwen2_iq4_nl", P(arch="qwen2", seed=24, n_embd=256, n_ff=512), quantize="IQ4_NL"),
        Case("llama_iq4_xs", P(seed=25, n_embd=256, n_ff=512), quantize="IQ4_XS"),
        Case("qwen3moe_mxfp4", P(arch="qwen3moe", seed=36, head_dim_override=32, n_expert=8,
                                 n_expert_used=2, n_ff_exp=256), quantize="MXFP4_MOE"),
        # Mixtures of experts (decisive routing, make_llama_gguf.py): 2 of 8 experts.
        Case("qwen3moe", P(arch="qwen3moe", seed=31, head_dim_override=32, n_expert=8,
                           n_expert_used=2),
             ablation=("weights not normalized", _flip_expert_norm)),
        Case("qwen3moe_k1", P(arch="qwen3moe", seed=34, head_dim_override=32, n_expert=8,
                              n_expert_used=1)),
        Case("qwen2moe", P(arch="qwen2moe", seed=32, n_expert=8, n_expert_used=2),
             ablation=("without the shared expert", _no_shared_expert)),
        Case("qwen2moe_norm", P(arch="qwen2moe", seed=35, n_expert=8, n_expert_used=2),
             ablation=("weights normalized", _flip_expert_norm)),
        Case("mixtral", P(seed=33, n_expert=4, n_expert_used=2),
             ablation=("weights not normalized", _flip_expert_norm)),
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict, timeout: float) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def server_session(bin_dir: str, model: str, ctx: int, prompt: list[int], n_predict: int,
                   threads: int, log_path: str, timeout: float,
                   kv_cache: str = "f32") -> tuple[list[int], list[dict]]:
    """Greedy ids after prompt, and for each step (prefix prompt + ids[:step]) the top-N
    log-probabilities of a one-token request: the probabilities of one long request may be
    off by a step where byte tokens leave incomplete UTF-8 (the server holds those back)."""
    port = free_port()
    env = dict(os.environ, LD_LIBRARY_PATH=bin_dir)
    cmd = [os.path.join(bin_dir, "llama-server"), "-m", model, "--host", "127.0.0.1",
           "--port", str(port), "-c", str(ctx), "-t", str(threads), "-np", "1",
           "-ctk", kv_cache, "-ctv", kv_cache, "-fa", "off", "-ngl", "0", "--no-webui",
           "--no-warmup", "-s", "0"]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.time() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {proc.returncode}; see {log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.time() > deadline:
                raise RuntimeError("llama-server did not become ready")
            time.sleep(0.2)
        def request(ids: list[int], n: int) -> dict:
            return post(f"http://127.0.0.1:{port}/completion", dict(
                prompt=ids, n_predict=n, temperature=0.0, top_k=1, seed=0, ignore_eos=True,
                n_probs=N_PROBS, return_tokens=True, cache_prompt=False, stream=False),
                timeout)

        tokens = [int(t) for t in request(prompt, n_predict).get("tokens", [])]
        steps = []
        for step in range(len(tokens)):
            probs = request(prompt + tokens[:step], 1).get("completion_probabilities", [])
            steps.append(probs[0] if probs else {})
        return tokens, steps
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def ref_greedy(m: llama_ref.RefModel, prompt: list[int], n_predict: int,
               kv_cache: str) -> tuple[list[int], list[np.ndarray]]:
    """Greedy ids and, per step, the log-softmax of the logits (EOS masked as ignore_eos)."""
    eos = int(m.field("tokenizer.ggml.eos_token_id", 2))
    ids = list(prompt)
    logps = []
    for _ in range(n_predict):
        last = llama_ref.logits(m, ids, kv_cache=kv_cache)[-1].copy()
        z = last - last.max()
        logps.append(z - np.log(np.exp(z).sum()))  # softmax over the raw logits
        last[eos] = -np.inf
        ids.append(int(np.argmax(last)))
    return ids[len(prompt):], logps


def polystack_greedy(binary: str, model: str, ctx: int, prompt: list[int], n_predict: int,
                     eos: int, n_vocab: int, threads: int, work: str) -> list[int]:
    """Greedy ids from polystack's logits of each prefix (EOS masked as ignore_eos)."""
    ids = list(prompt)
    out = os.path.join(work, "polystack-logits.f32")
    for _ in range(n_predict):
        subprocess.run([binary, "logits", "-m", model, "-c", str(ctx), "-t", str(threads),
                        "--device", "cpu", "--tokens", " ".join(map(str, ids)), "-o", out],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        last = np.fromfile(out, dtype=np.float32).reshape(len(ids), n_vocab)[-1].copy()
        last[eos] = -np.inf
        ids.append(int(np.argmax(last)))
    return ids[len(prompt):]


def polystack_logprob_gap(binary: str, model: str, ctx: int, prompt: list[int],
                          theirs: list[int], their_probs: list[dict], eos: int, n_vocab: int,
                          threads: int, work: str) -> tuple[float, int]:
    """polystack's log-probabilities along llama.cpp's own tokens (one pass over prompt +
    theirs): the largest |difference| over llama.cpp's top-N at each step, and the steps."""
    ids = list(prompt) + list(theirs)
    out = os.path.join(work, "polystack-logits.f32")
    subprocess.run([binary, "logits", "-m", model, "-c", str(ctx), "-t", str(threads),
                    "--device", "cpu", "--tokens", " ".join(map(str, ids)), "-o", out],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    logits = np.fromfile(out, dtype=np.float32).reshape(len(ids), n_vocab).astype(np.float64)
    gap, steps = 0.0, 0
    for step, probs in enumerate(their_probs):
        z = logits[len(prompt) - 1 + step]
        z = z - z.max()
        logp = z - np.log(np.exp(z).sum())
        steps += bool(probs.get("top_logprobs"))
        for top in probs.get("top_logprobs", []):
            if top["id"] != eos:
                gap = max(gap, abs(top["logprob"] - logp[top["id"]]))
    return gap, steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-bin", required=True,
                    help="folder of llama-server and its libraries (a llama.cpp build, e.g. from "
                    "the llama-cpp-python source package)")
    ap.add_argument("--polystack", help="a polystack binary: also compare its greedy tokens "
                    "with llama.cpp's on each file")
    ap.add_argument("--case", action="append", help="run only these cases (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--n-predict", type=int, default=24)
    ap.add_argument("--n-prompt", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--keep", help="write the models and server logs into this folder")
    ap.add_argument("--kv-cache", choices=["f32", "f16"], default="f32",
                    help="llama-server's KV cache type; the reference rounds K and V alike "
                         "(f16 also rounds Q and the attention weights in llama.cpp, which the "
                         "reference does not: expect log-probabilities to differ by ~1e-3)")
    a = ap.parse_args()
    all_cases = cases()
    if a.list:
        for c in all_cases:
            print(c.name)
        return 0
    chosen = [c for c in all_cases if not a.case or c.name in a.case]
    if a.case and len(chosen) != len(set(a.case)):
        known = {c.name for c in all_cases}
        ap.error(f"unknown case(s): {', '.join(sorted(set(a.case) - known))}")

    failures = 0
    with tempfile.TemporaryDirectory(prefix="polystack-xcheck-") as tmp:
        work = a.keep or tmp
        os.makedirs(work, exist_ok=True)
        for c in chosen:
            model = os.path.join(work, f"{c.name}.gguf")
            make_llama_gguf.write_model(model, c.params)
            if c.quantize:
                if not a.polystack:
                    print(f"{c.name}: SKIP: quantizing to {c.quantize} needs --polystack")
                    continue
                quantized = os.path.join(work, f"{c.name}.{c.quantize}.gguf")
                subprocess.run([a.polystack, "quantize", model, quantized, c.quantize],
                               check=True, capture_output=True)
                model = quantized
            # BOS, then ids fixed by the case's seed (byte tokens included).
            rng = np.random.default_rng(1000 + c.params.seed)
            prompt = [1] + [int(t) for t in rng.integers(3, c.params.n_vocab,
                                                         size=a.n_prompt - 1)]
            try:
                theirs, their_probs = server_session(
                    a.llama_bin, model, c.ctx, prompt, a.n_predict, a.threads,
                    os.path.join(work, f"{c.name}.log"), a.timeout, a.kv_cache)
            except (RuntimeError, urllib.error.URLError, OSError) as e:
                print(f"{c.name}: FAIL: {e}")
                failures += 1
                continue
            m = llama_ref.RefModel(model, **c.ref_kwargs)
            eos = int(m.field("tokenizer.ggml.eos_token_id", 2))
            ours, logps = ref_greedy(m, prompt, a.n_predict, a.kv_cache)
            n_same = next((i for i, (x, y) in enumerate(zip(ours, theirs)) if x != y),
                          min(len(ours), len(theirs)))
            # Top-N log-probabilities at the steps whose prefixes agree (the first n_same + 1).
            max_dlogp = 0.0
            n_compared = 0
            for step, probs in enumerate(their_probs):
                if step > n_same or step >= len(logps):
                    break
                n_compared += bool(probs.get("top_logprobs"))
                for top in probs.get("top_logprobs", []):
                    if top["id"] == eos:  # masked by ignore_eos on the server's side
                        continue
                    max_dlogp = max(max_dlogp, abs(top["logprob"] - logps[step][top["id"]]))
            matched = n_same == len(ours) == len(theirs)
            ok = matched == c.expect_match or bool(c.quantize)
            failures += not ok
            line = (f"{c.name}: {'PASS' if ok else 'FAIL'}: matched {n_same}/{len(ours)} tokens"
                    f"{'' if matched else f' (llama.cpp gave {len(theirs)})'}; max |dlogprob| of "
                    f"the top {N_PROBS} over {n_compared} steps {max_dlogp:.2e}")
            if c.ablation:
                what, fn = c.ablation
                m2 = llama_ref.RefModel(model, **c.ref_kwargs)
                fn(m2)
                ablated, _ = ref_greedy(m2, prompt, a.n_predict, a.kv_cache)
                n_abl = next((i for i, (x, y) in enumerate(zip(ablated, ours)) if x != y),
                             len(ours))
                line += (f"; sensitivity: reference {what} agrees with itself on {n_abl}/"
                         f"{len(ours)}")
            if a.polystack:
                try:
                    mine = polystack_greedy(a.polystack, model, c.ctx, prompt, a.n_predict, eos,
                                            c.params.n_vocab, a.threads, work)
                except subprocess.CalledProcessError as e:
                    print(f"{c.name}: FAIL: polystack: {e.stderr.decode().strip()}")
                    failures += 1
                    continue
                n_mine = next((i for i, (x, y) in enumerate(zip(mine, theirs)) if x != y),
                              min(len(mine), len(theirs)))
                same = n_mine == len(mine) == len(theirs)
                expect = c.expect_match if c.polystack_matches is None else c.polystack_matches
                gap, steps = polystack_logprob_gap(a.polystack, model, c.ctx, prompt, theirs,
                                                   their_probs, eos, c.params.n_vocab,
                                                   a.threads, work)
                if (gap > 0.2) if c.quantize else (same != expect):
                    failures += ok  # count the case once
                    ok = False
                    line = line.replace(": PASS:", ": FAIL:", 1)
                n_ref = next((i for i, (x, y) in enumerate(zip(mine, ours)) if x != y),
                             min(len(mine), len(ours)))
                line += (f"; polystack vs llama.cpp {n_mine}/{len(mine)}, vs the reference "
                         f"{n_ref}/{len(mine)}; polystack's log-probabilities along llama.cpp's "
                         f"tokens: max |d| {gap:.2e} over {steps} steps")
            if c.note:
                line += f"  [{c.note}]"
            print(line, flush=True)
            if not matched:
                print(f"  ref:       {' '.join(map(str, ours))}\n"
                      f"  llama.cpp: {' '.join(map(str, theirs))}")
    print(f"{len(chosen) - failures} of {len(chosen)} cases as expected")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
