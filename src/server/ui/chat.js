// Chat page of `polystack serve`: plain DOM, no dependencies, works offline.
// Model text only ever reaches the page through textContent, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const ui = {
  messages: $("messages"), input: $("input"), send: $("send"), stop: $("stop"),
  newChat: $("new-chat"), model: $("model"), device: $("device"), speed: $("speed"),
  keyForm: $("key-form"), apiKey: $("api-key"), keyNote: $("key-note"), system: $("system"),
  composer: $("composer"),
};
const KEY = "polystack.apiKey", SYSTEM = "polystack.system";

let history = [];      // the turns sent as context: {role, content}
let current = null;    // the reply being streamed
let retryChat = false; // a request answered 401 waits for a key, then is sent again

function el(tag, cls) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  return e;
}

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = localStorage.getItem(KEY);
  if (key) h.Authorization = "Bearer " + key;
  return h;
}

async function errorText(res) {
  try {
    const j = await res.json();
    if (j.error && j.error.message) return `${res.status}: ${j.error.message}`;
  } catch (_) { /* not JSON: fall back to the status line */ }
  return `${res.status} ${res.statusText}`;
}

function askKey() {
  ui.keyNote.textContent = localStorage.getItem(KEY)
    ? "The saved key was refused; enter the server's API key."
    : "This server needs an API key.";
  ui.keyForm.hidden = false;
  ui.apiKey.focus();
}

async function loadProps() {
  let res;
  try {
    res = await fetch("/props", { headers: headers() });
  } catch (e) {
    ui.model.textContent = "server unreachable";
    return;
  }
  if (res.status === 401) return askKey();
  if (!res.ok) {
    ui.model.textContent = "unknown model";
    return;
  }
  const p = await res.json();
  ui.model.textContent = p.model || "unknown model";
  ui.device.textContent = p.device || "";
  ui.model.title = `${p.model} (chat template ${p.chat_template}, context ${p.n_ctx} tokens)`;
}

// Fenced blocks (```) become <pre><code>, the rest plain text whose line breaks CSS keeps.
// An unclosed fence (mid-stream) is code up to the end.
function render(node, text) {
  const parts = [];
  let buf = [], code = false;
  const flush = () => {
    let t = buf.join("\n");
    if (code) {
      const pre = el("pre"), c = el("code");
      c.textContent = t;
      pre.append(c);
      parts.push(pre);
    } else if ((t = t.replace(/^\n+|\s+$/g, ""))) { // blank lines at the ends take room
      const d = el("div", "text");
      d.textContent = t;
      parts.push(d);
    }
    buf = [];
  };
  for (const line of text.split("\n")) {
    if (/^\s*```/.test(line)) {
      flush();
      code = !code;
    } else {
      buf.push(line);
    }
  }
  flush();
  node.replaceChildren(...parts);
}

function nearBottom() {
  const m = ui.messages;
  return m.scrollHeight - m.scrollTop - m.clientHeight < 60;
}

function addMessage(cls, text) {
  const stick = nearBottom();
  const m = el("div", "msg " + cls);
  if (text !== undefined) {
    const t = el("div", "text");
    t.textContent = text;
    m.append(t);
  }
  ui.messages.append(m);
  if (stick) ui.messages.scrollTop = ui.messages.scrollHeight;
  return m;
}

function showReply(r) {
  r.frame = 0;
  const stick = nearBottom();
  if (r.reasoning) {
    // Open while the model thinks, folded once when the answer starts (then the reader's).
    if (r.thinking.hidden) {
      r.thinking.hidden = false;
      r.thinking.open = !r.content;
    }
    if (r.content && r.thinking.open && !r.folded) r.thinking.open = false;
    if (r.content) r.folded = true;
    r.thinkingText.textContent = r.reasoning;
  }
  render(r.body, r.content);
  if (stick) ui.messages.scrollTop = ui.messages.scrollHeight;
}

// Repaint at most once a frame, however many deltas arrive.
function schedule(r) {
  if (!r.frame) r.frame = requestAnimationFrame(() => showReply(r));
}

function newReply(userEl) {
  const r = {
    controller: new AbortController(), userEl, content: "", reasoning: "",
    deltas: 0, t0: 0, tLast: 0, usage: null, finish: null, error: null, stopped: false,
  };
  r.el = addMessage("assistant streaming");
  r.thinking = el("details", "reasoning");
  r.thinking.hidden = true;
  const s = el("summary");
  s.textContent = "Reasoning";
  r.thinkingText = el("div", "text");
  r.thinking.append(s, r.thinkingText);
  r.body = el("div", "content");
  r.meta = el("div", "meta");
  r.el.append(r.thinking, r.body, r.meta);
  return r;
}

// One SSE line; true when the stream is over ([DONE] or an error event).
function onLine(line, r) {
  if (!line.startsWith("data:")) return false;
  const data = line.slice(5).trim();
  if (data === "[DONE]") return true;
  const j = JSON.parse(data);
  if (j.error) {
    r.error = j.error.message || "error";
    return true;
  }
  if (j.usage) r.usage = j.usage;
  const c = j.choices && j.choices[0];
  if (!c) return false;
  const d = c.delta || {};
  if (d.content || d.reasoning_content) {
    const now = performance.now();
    if (!r.deltas) r.t0 = now;
    r.tLast = now;
    r.deltas++;
    r.content += d.content || "";
    r.reasoning += d.reasoning_content || "";
    schedule(r);
  }
  if (c.finish_reason) r.finish = c.finish_reason;
  return false;
}

async function readStream(res, r) {
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += dec.decode(value, { stream: true });
    // A read can end anywhere, mid-line or mid-character: keep the unfinished line.
    const lines = buf.split("\n");
    buf = lines.pop();
    for (const line of lines) {
      if (onLine(line.replace(/\r$/, ""), r)) {
        reader.cancel().catch(() => {});
        return;
      }
    }
  }
  if (buf) onLine(buf + dec.decode(), r);
}

function speedText(r) {
  // Usage counts tokens; without it (stopped, errors) each delta is about one token.
  const n = r.usage ? r.usage.completion_tokens : r.deltas;
  const secs = (r.tLast - r.t0) / 1000;
  // The first token ends the prompt's processing: the rate is that of the tokens after it.
  const rate = n > 1 && secs > 0 ? ((n - 1) / secs).toFixed(1) : "-";
  let s = `${rate} tok/s, ${n} tokens`;
  if (r.stopped) s += ", stopped";
  else if (r.finish === "length") s += ", cut at the length limit";
  return s;
}

function setBusy(busy) {
  ui.send.hidden = busy;
  ui.stop.hidden = !busy;
}

async function complete(userEl) {
  const messages = [];
  const sys = ui.system.value.trim();
  if (sys) messages.push({ role: "system", content: sys });
  messages.push(...history);
  const r = newReply(userEl);
  current = r;
  setBusy(true);
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers(), signal: r.controller.signal,
      body: JSON.stringify({ messages, stream: true, stream_options: { include_usage: true } }),
    });
    if (res.status === 401) {
      r.auth = true;
      return;
    }
    if (!res.ok) throw new Error(await errorText(res));
    await readStream(res, r);
  } catch (e) {
    if (e.name === "AbortError") r.stopped = true;
    else if (e instanceof TypeError) r.error = `the server cannot be reached (${e.message})`;
    else r.error = e.message || String(e);
  } finally {
    finish(r);
  }
}

function finish(r) {
  if (current === r) current = null;
  setBusy(false);
  if (r.frame) cancelAnimationFrame(r.frame);
  if (r.discarded) return; // New chat: the page is already cleared
  if (r.auth) {            // sent again once a key is saved
    r.el.remove();
    retryChat = true;
    askKey();
    return;
  }
  r.el.classList.remove("streaming");
  showReply(r);
  if (r.content) {
    history.push({ role: "assistant", content: r.content });
  } else {
    // Nothing came back: undo the turn so the context keeps alternating user/assistant,
    // and give the text back for another try.
    r.el.remove();
    const turn = history.pop();
    r.userEl.remove();
    if (!ui.input.value) ui.input.value = turn.content;
  }
  if (r.deltas || r.stopped) {
    const s = speedText(r);
    ui.speed.textContent = s;
    if (r.content) r.meta.textContent = s;
  }
  if (r.error) addMessage("error", "Error: " + r.error);
}

function send() {
  const text = ui.input.value;
  if (!text.trim() || current || retryChat) return;
  ui.input.value = "";
  autosize();
  history.push({ role: "user", content: text });
  complete(addMessage("user", text));
}

// The box grows with its text up to CSS's max-height; empty, it is one row again.
function autosize() {
  ui.input.style.height = "";
  if (ui.input.value) ui.input.style.height = ui.input.scrollHeight + 2 + "px";
}

ui.composer.addEventListener("submit", (e) => {
  e.preventDefault();
  send();
});
ui.input.addEventListener("keydown", (e) => {
  // Enter sends; Shift+Enter (and Enter while an IME composes) is a new line.
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    send();
  }
});
ui.input.addEventListener("input", autosize);
ui.stop.addEventListener("click", () => current && current.controller.abort());
ui.newChat.addEventListener("click", () => {
  if (current) {
    current.discarded = true;
    current.controller.abort();
  }
  history = [];
  retryChat = false;
  ui.messages.replaceChildren();
  ui.speed.textContent = "";
  ui.input.focus();
});
ui.keyForm.addEventListener("submit", (e) => {
  e.preventDefault();
  const key = ui.apiKey.value.trim();
  if (!key) return;
  localStorage.setItem(KEY, key);
  ui.apiKey.value = "";
  ui.keyForm.hidden = true;
  loadProps();
  if (retryChat) {
    retryChat = false;
    const users = ui.messages.querySelectorAll(".msg.user");
    complete(users[users.length - 1]);
  }
});
ui.system.value = localStorage.getItem(SYSTEM) || "";
if (ui.system.value) $("system-box").open = true;
ui.system.addEventListener("change", () => localStorage.setItem(SYSTEM, ui.system.value));

loadProps();
ui.input.focus();
