#!/usr/bin/env python3
"""Writes the seed corpus of each fuzz target into OUT/<target>/ (scripts/fuzz calls this).

The seeds come from the data beside the repository (../shared: the tiny models and the
tokenizer vocabularies with their test texts) and from tiny random models that
scripts/make_llama_gguf.py writes, one per architecture and a few variants; what is absent is
skipped. Nothing here is committed: the corpus is made again in the build folder.
"""
import argparse
import hashlib
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TARGETS = ["fuzz_gguf", "fuzz_model", "fuzz_tokenizer", "fuzz_server_request", "fuzz_template",
           "fuzz_device_parsers", "fuzz_doctor_parsers", "fuzz_cli_args", "fuzz_grammar",
           "fuzz_pipeline"]
# The real vocabularies fuzz_tokenizer loads, in the order its first byte picks them.
VOCABS = ["ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-bert-bge.gguf"]

# Tiny models: (file name, make_llama_gguf.py arguments). Quantized ones need rows of 32.
SMALL = ["--n-embd", "16", "--n-layer", "1", "--n-head", "2", "--n-head-kv", "1", "--n-ff", "32",
         "--ctx", "32", "--n-vocab", "300", "--head-dim", "8", "--tied", "--dtype", "F16"]
WIDE = ["--n-embd", "32", "--n-layer", "2", "--n-head", "2", "--n-head-kv", "2", "--n-ff", "64",
        "--ctx", "32", "--n-vocab", "300"]
MODELS = [
    ("llama.gguf", ["--arch", "llama"] + SMALL),
    ("qwen2.gguf", ["--arch", "qwen2"] + SMALL),
    ("qwen3.gguf", ["--arch", "qwen3"] + SMALL),
    ("phi3.gguf", ["--arch", "phi3"] + SMALL),
    ("gemma3.gguf", ["--arch", "gemma3", "--sliding-window", "4", "--swa-pattern", "2"] + SMALL),
    ("llama-q4_0-rope-freqs.gguf", ["--arch", "llama", "--dtype", "Q4_0", "--embd-dtype", "Q8_0",
                                    "--rope-freqs", "llama3"] + WIDE),
    ("phi3-longrope.gguf", ["--arch", "phi3", "--longrope", "--dtype", "BF16"] + WIDE),
    ("llama-linear.gguf", ["--arch", "llama", "--rope-scaling", "linear",
                           "--rope-scale-factor", "2", "--dtype", "Q8_0"] + WIDE),
    # Mixtures of experts: the expert counts and 3-D expert tensors for the loader to refuse.
    ("qwen3moe.gguf", ["--arch", "qwen3moe", "--experts", "4", "--experts-used", "2",
                       "--expert-ff", "16", "--routing", "random"] + SMALL),
    ("qwen2moe.gguf", ["--arch", "qwen2moe", "--experts", "3", "--experts-used", "1",
                       "--expert-ff", "16", "--shared-expert-ff", "16", "--routing", "random"]
     + SMALL),
    ("mixtral.gguf", ["--arch", "llama", "--experts", "3", "--experts-used", "2",
                      "--routing", "random"] + SMALL),
    # MXFP4 weights (17-byte blocks) and YaRN scaling.
    ("qwen3moe-mxfp4-yarn.gguf", ["--arch", "qwen3moe", "--experts", "4", "--experts-used", "2",
                                  "--expert-ff", "32", "--routing", "random", "--rope-scaling",
                                  "yarn", "--rope-scale-factor", "4", "--original-context", "16"]
     + WIDE + ["--dtype", "MXFP4"]),
    # gpt-oss: biases, sinks, 2-D expert bias tables; llama with LongRoPE by its type name.
    ("gpt-oss.gguf", ["--arch", "gpt-oss", "--experts", "4", "--experts-used", "2",
                      "--expert-ff", "16", "--routing", "random", "--sliding-window", "4"]
     + SMALL),
    ("llama-longrope.gguf", ["--arch", "llama", "--longrope", "--original-context", "16"]
     + WIDE),
]


def write(out: Path, target: str, data: bytes) -> None:
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    (d / hashlib.sha1(data).hexdigest()).write_bytes(data)


def pipeline_seeds() -> list:
    """Pass messages as engine/pipeline.cpp encodes them: the command byte 3, then int32s."""
    def pass_bytes(all_logits, runs):
        out = [3, all_logits, len(runs)]
        for seq, n_past, hidden, tokens, tables in runs:
            out += [seq, n_past, hidden, len(tokens)] + tokens + [len(tables)]
            for t in tables:
                out += [len(t)] + t
        return bytes([out[0]]) + struct.pack(f"<{len(out) - 1}i", *out[1:])
    return [pass_bytes(0, [(0, 0, 0, [1, 2, 3], [[0]])]),
            pass_bytes(1, [(2, 40, 0, [7], [[0, 1], [3]]), (1, 5, 1, [9, 9], [[4], [5]])])]


def tiny_models(tmp: Path) -> list:
    made = []
    for name, args in MODELS:
        path = tmp / name
        r = subprocess.run([sys.executable, str(REPO / "scripts/make_llama_gguf.py"), "--out",
                            str(path)] + args, capture_output=True, text=True)
        if r.returncode == 0:
            made.append(path.read_bytes())
        else:
            print(f"make_corpus: {name} not written: {r.stderr.strip()[-200:]}", file=sys.stderr)
    return made


def handmade_ggufs() -> list:
    """Edge cases no converter writes: headers only, version 2, nested arrays."""
    def s(text: bytes) -> bytes:
        return struct.pack("<Q", len(text)) + text

    out = [b"GGUF" + struct.pack("<IQQ", 3, 0, 0), b"GGUF" + struct.pack("<IQQ", 2, 0, 0)]
    kv = s(b"general.architecture") + struct.pack("<I", 8) + s(b"llama")
    kv += s(b"general.alignment") + struct.pack("<II", 4, 64)
    nested = struct.pack("<IQ", 9, 2) + struct.pack("<IQ", 4, 1) + struct.pack("<I", 7)
    nested += struct.pack("<IQ", 8, 1) + s(b"x")
    kv += s(b"nested") + struct.pack("<I", 9) + nested
    kv += s(b"f") + struct.pack("<If", 6, 1.5) + s(b"d") + struct.pack("<Id", 12, -2.0)
    tensor = s(b"t") + struct.pack("<IQQIQ", 2, 4, 1, 0, 0)
    head = b"GGUF" + struct.pack("<IQQ", 3, 1, 5) + kv + tensor
    head += b"\0" * (-len(head) % 64)
    out.append(head + struct.pack("<4f", 1, 2, 3, 4))
    return out


def vocab_tests(shared: Path, name: str) -> list:
    inp = shared / "tokenizer-tests" / (name + ".inp")
    if not inp.exists():
        return []
    texts = inp.read_bytes().split(b"\n__ggml_vocab_test__\n")
    return [t for t in texts if t]


def synthetic_vocab(model: int, pre: int, flags: int, tokens: list, merges: list, text: bytes,
                    specials=(0, 1, 0xFF)) -> bytes:
    lines = [b"=" + m for m in merges] + [bytes([ty]) + t for ty, t in tokens]
    return bytes([0xC0, model, pre, flags] + list(specials)) + b"\n".join(lines) + b"\0" + text


def tokenizer_seeds(shared: Path) -> list:
    seeds = []
    present = [v for v in VOCABS if (shared / "tokenizer-tests" / v).exists()]
    for i, name in enumerate(present):
        for n, text in enumerate(vocab_tests(shared, name)):
            seeds.append(bytes([i + 48 * (n % 4)]) + text)
    normal, control, user, byte = 1, 0x83, 0x84, 0x86
    spm = [(control, b"<unk>"), (control, b"<s>"), (control, b"</s>")]
    spm += [(byte, b"<0x%02X>" % b) for b in range(256)]
    spm += [(normal, w.encode()) for w in ["\u2581", "\u2581h", "\u2581he", "llo", "\u2581hello",
                                           "\u2581w", "orld", "\u2581world", "."]]
    seeds.append(synthetic_vocab(0, 0, 0x0D, spm, [], b"hello world. <s>\xff\xfe"))
    bpe_byte = "".join(chr(c) for c in range(0x21, 0x7F))
    bpe = [(normal, c.encode()) for c in bpe_byte] + [(normal, "\u0120".encode()),
                                                      (normal, b"he"), (normal, b"ll"),
                                                      (normal, b"hell"), (normal, b"hello"),
                                                      (normal, "\u0120w".encode()),
                                                      (control, b"<|endoftext|>"),
                                                      (user, b"<|user|>")]
    merges = [b"h e", b"l l", b"he ll", b"hell o", "\u0120 w".encode()]
    for pre in range(0, 48, 7):
        seeds.append(synthetic_vocab(1, pre, 0x80 | 0x03, bpe, merges,
                                     b"hello world 123 <|endoftext|><|user|> don't\r\n"))
    wpm = [(control, b"[PAD]"), (control, b"[UNK]"), (control, b"[CLS]"), (control, b"[SEP]")]
    wpm += [(normal, w.encode()) for w in ["hello", "world", "##s", "##ing", "play", "a", "b"]]
    seeds.append(synthetic_vocab(2, 0, 0x03, wpm, [], b"Hello worlds, playing AB!",
                                 specials=(2, 3, 1)))
    return seeds


def device_seeds() -> list:
    return [b"\x00" + s for s in [b"cpu", b"vulkan:0", b"cuda:1", b"hip:0", b"pci:0000:41:00.0",
                                  b"uuid:GPU-0d0e"]] + [
        b"\x01" + b"0000:41:00.0", b"\x01" + b"GPU-12345678-1234-1234-1234-123456789abc",
        b"\x03" + b"cpu=1G,vulkan:0=512M", b"\x03" + b"2048",
        b"\x04" + bytes(range(96)),
        b"\x02" + b'{"backend":"vulkan","devices":[{"id":"vulkan:0","name":"GPU","kind":'
                  b'"discrete","memory_total":1024,"pci_bus_id":"0000:41:00.0"}]}',
        b"\x02" + b'{"backend":"cuda","devices":[],"reason":"no driver","unusable":true}']


def doctor_seeds() -> list:
    return [
        b'{"file_format_version":"1.0.0","ICD":{"library_path":"libvulkan_radeon.so",'
        b'"api_version":"1.3.255"}}',
        b"cpu_cores_count 0\nsimd_count 120\ngfx_target_version 110000\nvendor_id 4098\n",
        b"render:x:105:user\nvideo:x:44:user\n",
        b"NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023",
        b"580.65.06\n", b"gfx1030", b"10.3.0", b"libamdocl64.so\n"]


def server_request_seeds() -> list:
    """Request bodies as the server's tests send them; the first byte picks the route
    (0-1 completions, 2-4 chat in each format, 5 tokenize, 6 embeddings, 7 detokenize; 0xF0 and up: raw
    connection bytes for the transport's parser)."""
    completion = [
        b'{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}',
        b'{"prompt": [1, 2, 3], "stream": true, "stream_options": {"include_usage": true}}',
        b'{"prompt": ["a"], "stop": ["x", "y"], "top_p": 0.9, "top_k": 40, "min_p": 0.05, '
        b'"seed": 7, "presence_penalty": 0.5, "frequency_penalty": -0.5, "repeat_penalty": 1.1, '
        b'"n": 1, "model": "m", "max_completion_tokens": 3}',
    ]
    tools = (b'"tools": [{"type": "function", "function": {"name": "get_weather", '
             b'"parameters": {"type": "object", "properties": {"city": {"type": "string"}, '
             b'"n": {"$ref": "#/$defs/n"}}, "required": ["city"], "$defs": {"n": {"type": '
             b'"integer", "minimum": 1}}}}}, {"type": "function", "function": {"name": "now"}}]')
    chat = [
        b'{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", '
        b'"content": "Hi"}, {"role": "assistant", "content": "Hello."}], "max_tokens": 4}',
        b'{"messages": [{"role": "user", "content": "w?"}], ' + tools +
        b', "tool_choice": "required", "parallel_tool_calls": false}',
        b'{"messages": [{"role": "user", "content": "w?"}, {"role": "assistant", "content": '
        b'null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": '
        b'"get_weather", "arguments": "{\\"city\\": \\"Oslo\\"}"}}]}, {"role": "tool", '
        b'"tool_call_id": "c1", "content": "cold"}], ' + tools +
        b', "tool_choice": {"type": "function", "function": {"name": "now"}}, '
        b'"thinking_budget_tokens": 3}',
        b'{"messages": [{"role": "developer", "content": [{"type": "text", "text": "x"}]}], '
        b'"stream": true}',
    ]
    out = [bytes([r]) + b for r in (0, 1) for b in completion]
    # Chat in each built-in template (2-4) and, through the first byte's high bits, each tool
    # call syntax (the byte over 8, modulo 9).
    out += [bytes([r + 8 * f]) + b for r in (2, 3, 4) for b in chat for f in (0, 1, 2, 5)]
    out += [b"\x06" + b'{"input": ["Once upon a time", "a"], "encoding_format": "base64"}',
            b"\x06" + b'{"input": [[1, 2, 3], [4]], "dimensions": 64, "model": "m"}']
    out += [b"\x05" + b'{"content": "Once upon a time", "add_special": true}',
            b"\x07" + b'{"tokens": [1, 2, 3, 100]}']
    # Raw connection bytes for the transport's parser (0xF0, then the piece size).
    body = completion[0]
    connections = [
        b"GET /health HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n"
        b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
        b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body,
        b"POST /tokenize HTTP/1.1\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n"
        b"5\r\n{\"con\r\n10;x=y\r\ntent\": \"Once up\"}\r\n0\r\nTrailer: 1\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"OPTIONS * HTTP/1.0\r\nConnection: keep-alive\r\nOrigin: https://a.example\r\n\r\n",
    ]
    out += [b"\xf0" + bytes([step]) + c for c in connections for step in (0, 6)]
    # Replies with tool calls (0xE0 + the syntax: hermes 1, llama3 3, mistral 4, deepseek 6).
    out += [b"\xe1<tool_call>\n{\"name\": \"a\", \"arguments\": {\"k\": [1]}}\n</tool_call>",
            b"\xe3<|python_tag|>s.call(q=\"x\", n=2)",
            b"\xe4[TOOL_CALLS]add[CALL_ID]x1[ARGS]{\"a\": 1}",
            b"\xe6" + "<\uff5ctool\u2581call\u2581begin\uff5c>f<\uff5ctool\u2581sep\uff5c>{}".encode()]
    return out


def template_seeds(shared: Path) -> list:
    """The real chat templates, and small ones for each construct."""
    seeds = [p.read_bytes() for p in sorted((shared / "chat-templates").glob("*.jinja"))]
    seeds += [s.encode() for s in [
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}",
        "{%- set ns = namespace(n=0) -%}{% for m in messages if m.role == 'user' %}"
        "{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}",
        "{{ tools | tojson(indent=2) }}{{ messages[1:-1] | map(attribute='role') | join(',') }}",
        "{% macro f(x, y=2) %}{{ x ~ y }}{% endmacro %}{{ f(1) }}{% call f(3) %}c{% endcall %}",
        "{{ 'a b'.split() }}{{ (1, 2.5, none, true) }}{{ {'k': [1]} }}{{ 7 // 2 }}{{ 2 ** 10 }}",
        "{% if x is defined %}{{ x | upper }}{% elif y %}{% raw %}{{ }}{% endraw %}{% endif %}",
        "{{ raise_exception('no') if messages | length > 9 else strftime_now('%Y') }}",
    ]]
    return seeds


def grammar_seeds() -> list:
    """GBNF grammars, then a NUL and a text for their matcher."""
    pairs = [
        ('root ::= "{" ws pair ("," ws pair)* "}" ws\npair ::= "\\"" [a-z]+ "\\":" ws [0-9]{1,3}\n'
         'ws ::= [ \\t\\n]*', '{"a": 1, "bc":22}'),
        ('root ::= expr\nexpr ::= term (("+" | "-") term)*\nterm ::= [0-9]+ | "(" expr ")"',
         "1+(2-3)+45"),
        ('# unicode and negation\nroot ::= ("h\u00e9llo" | [^a-z\\n]{2,4})+ "."', "h\u00e9llo\u4f60\u597d."),
        ('root ::= ("ab" | "c")* "!"?', "abcab!"),
    ]
    seeds = [g.encode() + b"\0" + t.encode() for g, t in pairs]
    # JSON schemas (compiled to GBNF first), with an instance as the text.
    schemas = Path(__file__).resolve().parent.parent / "data" / "json_schemas"
    for p in sorted(schemas.glob("*.json")):
        seeds.append(p.read_bytes().strip() + b"\0" + b'{"a": [1, "x", null]}')
    seeds.append(b'{"type": "object", "properties": {"n": {"type": "integer", "minimum": -5, '
                 b'"maximum": 120}, "d": {"type": "string", "format": "date"}}, "required": '
                 b'["n"]}\0{"n": 42, "d": "2024-02-29"}')
    return seeds


def cli_seeds() -> list:
    """Command lines, NUL between the arguments."""
    lines = [["run", "-m", "m.gguf", "-p", "Once upon", "-n", "64", "--temp", "0"],
             ["run", "-ngl", "all", "-sm", "layer", "-ts", "3,1", "-mg", "0", "-c", "-5"],
             ["run", "--tmp", "0.5", "-p", "-", "--raw", "--system", "x"],
             ["run", "-p", "two", "words", "--", "--x"], ["run", "--ctx-size=4096", "-n5"],
             ["bench", "-p", "128,512", "-n", "0", "-t", "1,0", "-ngl", "0,8,all", "--json"],
             ["bench", "--device", "cpu,vulkan:0", "--thread", "2"],
             ["quantize", "in.gguf", "out.gguf", "Q4_K", "--allow-requantize", "-t", "0"],
             ["rnu", "-p"], ["run", "-h"]]
    return [b"\0".join(a.encode() for a in line) for line in lines]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--shared", type=Path,
                    default=Path(os.environ.get("POLYSTACK_SHARED_DIR", REPO.parent / "shared")))
    ap.add_argument("targets", nargs="*", default=TARGETS)
    a = ap.parse_args()
    models = []
    if "fuzz_gguf" in a.targets or "fuzz_model" in a.targets:
        with tempfile.TemporaryDirectory() as tmp:
            models = tiny_models(Path(tmp))
        for name in ["stories260K.gguf", "llama-2-tiny-random.gguf"]:
            p = a.shared / "models" / name
            if p.exists():
                models.append(p.read_bytes())
    for target in a.targets:
        seeds = []
        if target == "fuzz_gguf":
            seeds = models + handmade_ggufs()
            seeds += [(a.shared / "tokenizer-tests" / v).read_bytes() for v in VOCABS
                      if (a.shared / "tokenizer-tests" / v).exists()]
        elif target == "fuzz_model":
            seeds = models
        elif target == "fuzz_tokenizer":
            seeds = tokenizer_seeds(a.shared)
        elif target == "fuzz_server_request":
            seeds = server_request_seeds()
        elif target == "fuzz_device_parsers":
            seeds = device_seeds()
        elif target == "fuzz_doctor_parsers":
            seeds = doctor_seeds()
        elif target == "fuzz_template":
            seeds = template_seeds(a.shared)
        elif target == "fuzz_grammar":
            seeds = grammar_seeds()
        elif target == "fuzz_cli_args":
            seeds = cli_seeds()
        elif target == "fuzz_pipeline":
            seeds = pipeline_seeds()
        (a.out / target).mkdir(parents=True, exist_ok=True)
        for s in seeds:
            write(a.out, target, s)
        print(f"make_corpus: {target}: {len(seeds)} seeds")
    return 0


if __name__ == "__main__":
    sys.exit(main())
