// ctxstack chat page: conversation list, streamed turns over SSE (each answer drawn by
// turn.js), injects, image attachments, the conversation's divider (remember.js) and the
// composer's context meter (meter.js). Plain ES modules, no build step.
//
// Everything the model or a user wrote reaches the DOM either as textContent or through
// renderMarkdown(), which shows raw HTML as text and sanitises its output (markdown.js).

import { el } from "./dom.js";
import { clip, pretty } from "./format.js";
import { setComposerMeter } from "./meter.js";
import { openRemembers, placeDivider } from "./remember.js";
import { renderAccount, renderInfo, syncModeInputs } from "./settings.js";
import { readEventStream } from "./sse.js";
import { AssistantTurn } from "./turn.js";

const $ = (sel) => document.querySelector(sel);
const TOKEN_KEY = "ctxstack.token";
const MODE_KEY = "ctxstack.mode";

const state = {
  info: null,
  token: localStorage.getItem(TOKEN_KEY) || "",
  conversations: [],
  currentId: null,
  running: null, // {conversationId, controller, turn}
  attachments: [], // {id, url, name}
  me: null,
  divider: null, // the latest compact payload with a last_seq: where the divider goes
  meter: null, // the latest context reading of the conversation
};

// ------------------------------------------------------------------ helpers

let toastTimer = null;
function toast(message) {
  const box = $("#toast");
  box.textContent = message;
  box.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { box.hidden = true; }, 4000);
}

// ------------------------------------------------------------------ HTTP

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(path, { method = "GET", body, signal, raw = false } = {}) {
  const headers = {};
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  let payload = body;
  if (body !== undefined && !(body instanceof FormData)) {
    headers["Content-Type"] = "application/json";
    payload = JSON.stringify(body);
  }
  const response = await fetch(path, { method, headers, body: payload, signal });
  if (!response.ok) {
    let message = `${response.status} ${response.statusText}`;
    try {
      const data = await response.json();
      if (data?.detail) message = typeof data.detail === "string" ? data.detail : pretty(data.detail);
    } catch { /* not JSON */ }
    if (response.status === 401 && state.info?.auth_required) showLogin(message);
    throw new ApiError(response.status, message);
  }
  if (raw) return response;
  if (response.status === 204) return null;
  return response.json();
}

const imageUrls = new Map();
async function imageUrl(fileId) {
  if (!imageUrls.has(fileId)) {
    imageUrls.set(fileId, api(`/api/files/${encodeURIComponent(fileId)}`, { raw: true })
      .then((r) => r.blob())
      .then((b) => URL.createObjectURL(b))
      .catch(() => ""));
  }
  return imageUrls.get(fileId);
}

// ------------------------------------------------------------------ rendering

function messagesBox() {
  return $("#messages");
}

function isNearBottom() {
  const box = messagesBox();
  return box.scrollHeight - box.scrollTop - box.clientHeight < 120;
}

let stickToBottom = true;
function autoScroll(force = false) {
  const box = messagesBox();
  if (force || stickToBottom) box.scrollTop = box.scrollHeight;
}

function clearMessages() {
  const box = messagesBox();
  box.replaceChildren();
  const empty = el("div", "empty");
  empty.id = "empty";
  empty.append(el("h2", "", "Ask anything"));
  empty.append(el("p", "", "Long conversations stay inside the model's context window: older turns are "
    + "summarised when needed, and a dashed line marks where that happened."));
  box.append(empty);
}

function renderUser(text, images = []) {
  $("#empty")?.remove();
  const wrap = el("div", "msg user");
  if (images.length) {
    const strip = el("div", "images");
    for (const image of images) {
      const img = el("img");
      img.alt = "attached image";
      img.loading = "lazy";
      if (image.url) img.src = image.url;
      else imageUrl(image.file_id).then((url) => { if (url) img.src = url; });
      strip.append(img);
    }
    wrap.append(strip);
  }
  if (text) wrap.append(el("div", "bubble", text));
  messagesBox().append(wrap);
  return wrap;
}

function newTurn(question) {
  const turn = new AssistantTurn(messagesBox());
  turn.question = question;
  turn.hooks = {
    onDivider: (data) => showDivider(data),
    onContext: (data) => {
      state.meter = data;
      setComposerMeter($("#composer-meter"), data, state.info?.budget?.usable_input_tokens);
    },
    onRegenerate: (t) => regenerate(t),
    onRender: () => autoScroll(),
  };
  return turn;
}

/**
 * The divider from the stored summaries (GET /compactions) when the answers on the page
 * no longer carry it — the answer whose compaction drew it was regenerated — or after an
 * edit or regenerate dropped the summary it showed.
 */
async function refreshDivider(conversationId, { force = false } = {}) {
  if (!force && state.divider) return;
  const listed = await api(`/api/conversations/${encodeURIComponent(conversationId)}/compactions`);
  if (state.currentId !== conversationId) return;
  const last = Array.isArray(listed) ? listed[listed.length - 1] : null;
  if (!last) {
    state.divider = null;
    messagesBox().querySelector(":scope > .conversation-divider")?.remove();
    return;
  }
  if (force || !state.divider) showDivider(last);
}

function showDivider(data) {
  state.divider = data;
  placeDivider(messagesBox(), data, (d) => openRemembers($("#remembers"), d, () =>
    api(`/api/conversations/${encodeURIComponent(state.currentId)}/compactions`)));
}

/** Only the newest answer offers Regenerate (it asks the same question again). */
function pruneRegenerate() {
  const buttons = [...document.querySelectorAll("#messages .regen-btn")];
  buttons.slice(0, -1).forEach((b) => b.remove());
}

function renderHistory(messages) {
  clearMessages();
  state.divider = null;
  state.meter = null;
  if (messages.length) $("#empty")?.remove();
  let question = null;
  for (const m of messages) {
    if (m.role === "user") {
      if (m.kind === "inject") continue; // drawn inside the turn that consumed it
      const wrap = renderUser(m.content, m.images || []);
      wrap.dataset.seq = String(m.seq);
      wrap.dataset.id = String(m.id);
      if (m.kind === "query") addEditButton(wrap);
      question = m.content;
    } else if (m.role === "assistant") {
      const turn = newTurn(question);
      turn.root.dataset.seq = String(m.seq);
      turn.replay = true;
      const events = Array.isArray(m.events) ? m.events : [];
      const failed = m.status === "failed";
      const last = events.filter((ev) => ev.event === "done" || ev.event === "error").pop();
      for (const ev of events) {
        if (ev.event !== "done" && ev.event !== "error") turn.handle(ev.event, ev.data);
      }
      if (!failed) turn.setAnswer(m.content || "");
      if (last) turn.handle(last.event, last.data);
      else if (m.status === "stopped") turn.markStopped();
      turn.finish();
    }
  }
  setComposerMeter($("#composer-meter"), state.meter, state.info?.budget?.usable_input_tokens);
  if (state.divider) showDivider(state.divider);
  pruneRegenerate();
  autoScroll(true);
}

/** After a live turn: give the drawn messages their stored seq (the divider needs it). */
async function syncSeqs(conversationId) {
  const messages = await api(`/api/conversations/${encodeURIComponent(conversationId)}/messages`);
  if (state.currentId !== conversationId) return;
  const shown = messages.filter((m) => !(m.role === "user" && m.kind === "inject"));
  const nodes = [...messagesBox().querySelectorAll(":scope > .msg.user, :scope > .msg.assistant")];
  // A turn started meanwhile: its question is stored, its answer not yet (one node more).
  const extra = nodes.length - shown.length;
  if (extra < 0 || extra > 1) return;
  shown.forEach((m, i) => {
    if (nodes[i].classList.contains(m.role)) {
      nodes[i].dataset.seq = String(m.seq);
      nodes[i].dataset.id = String(m.id);
      if (m.role === "user" && m.kind === "query") addEditButton(nodes[i]);
    }
  });
  if (state.divider) showDivider(state.divider);
}

function renderConversationList() {
  const list = $("#conversation-list");
  list.replaceChildren();
  for (const conv of state.conversations) {
    const item = el("li");
    item.dataset.id = conv.id;
    if (conv.id === state.currentId) item.classList.add("active");
    const title = el("span", "title", conv.title || "New chat");
    title.title = conv.title || "New chat";
    const actions = el("span", "actions");
    const rename = el("button", "btn btn-icon btn-small rename-btn", "✎");
    rename.type = "button";
    rename.setAttribute("aria-label", "Rename conversation");
    const del = el("button", "btn btn-icon btn-small delete-btn", "×");
    del.type = "button";
    del.setAttribute("aria-label", "Delete conversation");
    actions.append(rename, del);
    item.append(title, actions);
    item.addEventListener("click", (e) => {
      if (e.target.closest(".actions") || e.target.closest("input")) return;
      selectConversation(conv.id);
    });
    rename.addEventListener("click", () => startRename(item, conv));
    del.addEventListener("click", () => deleteConversation(conv));
    list.append(item);
  }
}

function startRename(item, conv) {
  const input = el("input", "rename");
  input.value = conv.title || "";
  input.maxLength = 200;
  item.querySelector(".title").replaceWith(input);
  input.focus();
  input.select();
  let settled = false;
  const finish = async (save) => {
    if (settled) return;
    settled = true;
    const title = input.value.trim();
    if (save && title && title !== conv.title) {
      try {
        await api(`/api/conversations/${conv.id}`, { method: "PATCH", body: { title } });
      } catch (err) {
        toast(`Rename failed: ${err.message}`);
      }
    }
    await loadConversations();
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") finish(true);
    else if (e.key === "Escape") finish(false);
  });
  input.addEventListener("blur", () => finish(true));
}

async function deleteConversation(conv) {
  if (!window.confirm(`Delete "${conv.title || "New chat"}"? This cannot be undone.`)) return;
  try {
    await api(`/api/conversations/${conv.id}`, { method: "DELETE" });
  } catch (err) {
    toast(`Delete failed: ${err.message}`);
    return;
  }
  if (conv.id === state.currentId) newChat();
  await loadConversations();
}

function setTitle() {
  const conv = state.conversations.find((c) => c.id === state.currentId);
  $("#chat-title").textContent = conv?.title || "New chat";
}

// ------------------------------------------------------------------ actions

async function loadConversations() {
  state.conversations = await api("/api/conversations");
  renderConversationList();
  setTitle();
}

async function selectConversation(id) {
  closeSidebar();
  if (state.running && state.running.conversationId !== id) {
    toast("A turn is still running; stop it before switching conversations.");
    return;
  }
  state.currentId = id;
  renderConversationList();
  setTitle();
  if (state.running) return;
  history.replaceState(null, "", `#c=${encodeURIComponent(id)}`);
  try {
    const messages = await api(`/api/conversations/${id}/messages`);
    if (state.currentId === id) {
      renderHistory(messages);
      refreshDivider(id).catch(() => {});
      resumeRunning(id).catch(() => {});
    }
  } catch (err) {
    toast(`Could not load the conversation: ${err.message}`);
  }
}

function newChat() {
  if (state.running) return;
  state.currentId = null;
  state.divider = null;
  state.meter = null;
  setComposerMeter($("#composer-meter"), null, state.info?.budget?.usable_input_tokens);
  history.replaceState(null, "", location.pathname);
  clearMessages();
  renderConversationList();
  setTitle();
  closeSidebar();
  $("#query").focus();
}

function currentMode() {
  return document.querySelector('input[name="mode"]:checked')?.value || "react";
}

function setRunning(running) {
  $("#composer").hidden = running;
  $("#inject-form").hidden = !running;
  $("#attachments").hidden = running || state.attachments.length === 0;
  $("#new-chat").disabled = running;
  if (running) $("#inject-text").focus();
  else $("#query").focus();
}

/** Replace the newest answer: its question and images stay (POST …/regenerate). */
async function regenerate(turn) {
  const conversationId = state.currentId;
  if (state.running || !turn.question || !conversationId) return;
  removeFrom(turn.root);
  const next = newTurn(turn.question);
  await runStream(conversationId, next, `/api/conversations/${encodeURIComponent(conversationId)}/regenerate`, {});
}

/** Remove `node` and every message drawn after it. */
function removeFrom(node) {
  let cur = node;
  while (cur) {
    const next = cur.nextElementSibling;
    cur.remove();
    cur = next;
  }
}

/** Edit a sent question in place; saving replaces it and what followed, then answers. */
function startEdit(wrap) {
  const conversationId = state.currentId;
  const id = wrap.dataset.id;
  if (state.running || !conversationId || !id || wrap.querySelector(".edit-text")) return;
  const bubble = wrap.querySelector(".bubble");
  const area = el("textarea", "edit-text");
  area.value = bubble?.textContent || "";
  const save = el("button", "btn btn-small btn-primary edit-save", "Save & send");
  const cancel = el("button", "btn btn-small edit-cancel", "Cancel");
  save.type = cancel.type = "button";
  const box = el("div", "edit-box");
  box.append(area, save, cancel);
  wrap.append(box);
  if (bubble) bubble.hidden = true;
  area.focus();
  cancel.addEventListener("click", () => { box.remove(); if (bubble) bubble.hidden = false; });
  save.addEventListener("click", async () => {
    const query = area.value.trim();
    if (!query) return;
    box.remove();
    if (bubble) { bubble.hidden = false; bubble.textContent = query; }
    if (wrap.nextElementSibling) removeFrom(wrap.nextElementSibling);
    const turn = newTurn(query);
    await runStream(conversationId, turn,
      `/api/conversations/${encodeURIComponent(conversationId)}/messages/${encodeURIComponent(id)}/edit`,
      { query, mode: currentMode() });
  });
}

function addEditButton(wrap) {
  if (wrap.querySelector(".edit-btn")) return;
  const button = el("button", "btn btn-small edit-btn", "Edit");
  button.type = "button";
  button.title = "Edit this question (what followed it is replaced)";
  button.addEventListener("click", () => startEdit(wrap));
  wrap.append(button);
}

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });
const RECONNECT_ATTEMPTS = 8;

/**
 * Stream a turn into `turn`: POST `path` (or, with `path` null, GET the running turn's
 * stream), then — if the connection drops before `done`/`error` — reconnect with
 * Last-Event-ID, so the turn goes on wherever it runs.
 */
async function runStream(conversationId, turn, path, body) {
  const controller = new AbortController();
  state.running = { conversationId, controller, turn, stopped: false };
  document.querySelectorAll("#messages .regen-btn").forEach((b) => b.remove());
  stickToBottom = true;
  autoScroll(true);
  setRunning(true);
  let lastId = null;
  const streamPath = `/api/conversations/${encodeURIComponent(conversationId)}/stream`;
  try {
    for (let attempt = 0; attempt <= RECONNECT_ATTEMPTS && !turn.finished; attempt += 1) {
      let response;
      try {
        if (path && attempt === 0) {
          response = await api(path, { method: "POST", body, signal: controller.signal, raw: true });
        } else {
          if (attempt > 0) await sleep(Math.min(4000, 500 * attempt));
          const headers = {};
          if (state.token) headers.Authorization = `Bearer ${state.token}`;
          if (lastId) headers["Last-Event-ID"] = lastId;
          response = await fetch(streamPath, { headers, signal: controller.signal });
          if (response.status === 204) break;
          if (!response.ok) throw new ApiError(response.status, `${response.status}`);
        }
        for await (const { event, data, id } of readEventStream(response, controller.signal)) {
          if (id) lastId = id;
          turn.handle(event, data);
          autoScroll();
        }
      } catch (err) {
        if (controller.signal.aborted) break;
        if (err instanceof ApiError && attempt === 0 && path) throw err;
      }
    }
    if (!turn.finished && state.running?.stopped) turn.markStopped();
    else if (!turn.finished) turn.onError({ message: "The connection closed before the turn finished." });
  } catch (err) {
    turn.onError({ message: err.message });
  } finally {
    const stopped = state.running?.stopped;
    state.running = null;
    setRunning(false);
    pruneRegenerate();
    loadConversations().catch(() => {});
    const rewrote = Boolean(path) && path !== "/api/chat";
    setTimeout(() => syncSeqs(conversationId)
      .then(() => (rewrote ? refreshDivider(conversationId, { force: true }) : null))
      .catch(() => {}), stopped ? 800 : 0);
  }
}

/** After a reload: a turn still running in this conversation is shown and followed. */
async function resumeRunning(conversationId) {
  if (state.running) return;
  const headers = {};
  if (state.token) headers.Authorization = `Bearer ${state.token}`;
  const probe = await fetch(`/api/conversations/${encodeURIComponent(conversationId)}/stream`,
    { headers, method: "GET" });
  if (probe.status !== 200 || state.currentId !== conversationId) {
    probe.body?.cancel().catch(() => {});
    return;
  }
  const users = [...messagesBox().querySelectorAll(":scope > .msg.user .bubble")];
  const turn = newTurn(users.length ? users[users.length - 1].textContent : null);
  const controller = new AbortController();
  state.running = { conversationId, controller, turn, stopped: false };
  setRunning(true);
  try {
    for await (const { event, data } of readEventStream(probe, controller.signal)) {
      turn.handle(event, data);
      autoScroll();
    }
  } catch { /* dropped: the loop below reconnects */ }
  state.running = null;
  if (!turn.finished) {
    // continue like any dropped stream
    turn.root.remove();
    const again = newTurn(turn.question);
    await runStream(conversationId, again, null, null);
  } else {
    setRunning(false);
    pruneRegenerate();
  }
}

async function stopRunning() {
  const running = state.running;
  if (!running) return;
  running.stopped = true;
  try {
    await api(`/api/conversations/${encodeURIComponent(running.conversationId)}/stop`, { method: "POST" });
  } catch {
    running.controller.abort();
  }
}

/** The meter's "Compact now": show what would be summarised, then run it. */
async function compactNow() {
  const conversationId = state.currentId;
  const panel = $("#compact-panel");
  if (!conversationId || state.running || !panel) return;
  panel.hidden = false;
  panel.replaceChildren(el("span", "", "Looking at what could be summarised…"));
  let preview;
  try {
    preview = await api(`/api/conversations/${encodeURIComponent(conversationId)}/compact-preview`);
  } catch (err) {
    panel.replaceChildren(el("span", "", `Could not preview: ${err.message}`));
    return;
  }
  if (!preview.messages) {
    panel.replaceChildren(el("span", "compact-preview", "Nothing to summarise yet: the conversation is already short."));
    setTimeout(() => { panel.hidden = true; }, 3000);
    return;
  }
  const text = `Summarise ${preview.messages} earlier message${preview.messages === 1 ? "" : "s"} `
    + `(keeping the last ${preview.kept_messages} verbatim): ${preview.tokens_before.toLocaleString("en")} → `
    + `about ${preview.estimated_tokens_after.toLocaleString("en")} tokens, an estimated saving of `
    + `${preview.estimated_saving.toLocaleString("en")} tokens.`;
  const run = el("button", "btn btn-small btn-primary compact-run", "Compact");
  const cancel = el("button", "btn btn-small compact-cancel", "Cancel");
  run.type = cancel.type = "button";
  const actions = el("div", "actions");
  actions.append(run, cancel);
  panel.replaceChildren(el("div", "compact-preview", text), actions);
  cancel.addEventListener("click", () => { panel.hidden = true; });
  run.addEventListener("click", async () => {
    panel.replaceChildren(el("span", "summarising-state", "Summarising…"));
    try {
      const done = await api(`/api/conversations/${encodeURIComponent(conversationId)}/compact`, { method: "POST" });
      panel.replaceChildren(el("span", "compact-done",
        `Summarised ${done.compact.summarized_messages} messages: ${done.tokens_before.toLocaleString("en")} → ${done.tokens_after.toLocaleString("en")} tokens.`));
      if (state.currentId === conversationId) showDivider(done.compact);
    } catch (err) {
      panel.replaceChildren(el("span", "", `Compaction failed: ${err.message}`));
    }
    setTimeout(() => { panel.hidden = true; }, 4000);
  });
}

async function sendMessage(again = null) {
  const query = again ?? $("#query").value.trim();
  const attachments = again ? [] : state.attachments.slice();
  if (!query && !attachments.length) return;
  if (state.running) return;
  if (!query) {
    toast("Write a message to go with the image.");
    return;
  }
  let conversationId = state.currentId;
  if (!conversationId) {
    try {
      const conv = await api("/api/conversations", { method: "POST", body: {} });
      conversationId = conv.id;
      state.currentId = conv.id;
      history.replaceState(null, "", `#c=${encodeURIComponent(conv.id)}`);
    } catch (err) {
      toast(`Could not start a conversation: ${err.message}`);
      return;
    }
  }
  if (!again) {
    $("#query").value = "";
    resizeTextarea($("#query"));
    state.attachments = [];
    renderAttachments();
  }
  renderUser(query, attachments.map((a) => ({ file_id: a.id, url: a.url })));
  const turn = newTurn(query);
  await runStream(conversationId, turn, "/api/chat",
    { conversation_id: conversationId, query, mode: currentMode(), file_ids: attachments.map((a) => a.id) });
}

async function sendInject() {
  const box = $("#inject-text");
  const text = box.value.trim();
  if (!text || !state.running) return;
  try {
    await api("/api/chat/inject", {
      method: "POST",
      body: { conversation_id: state.running.conversationId, text },
    });
    box.value = "";
    resizeTextarea(box);
  } catch (err) {
    toast(err.status === 409 ? "The turn has already finished." : `Inject failed: ${err.message}`);
  }
}

async function attachFiles(files) {
  for (const file of files) {
    const form = new FormData();
    form.append("file", file, file.name);
    try {
      const meta = await api("/api/files", { method: "POST", body: form });
      state.attachments.push({ id: meta.id, url: URL.createObjectURL(file), name: file.name });
    } catch (err) {
      toast(`${file.name}: ${err.message}`);
    }
  }
  renderAttachments();
}

function renderAttachments() {
  const box = $("#attachments");
  box.replaceChildren();
  for (const a of state.attachments) {
    const chip = el("span", "chip");
    const img = el("img");
    img.src = a.url;
    img.alt = a.name;
    const remove = el("button", "btn btn-icon btn-small", "×");
    remove.type = "button";
    remove.setAttribute("aria-label", `Remove ${a.name}`);
    remove.addEventListener("click", () => {
      state.attachments = state.attachments.filter((x) => x !== a);
      renderAttachments();
    });
    chip.append(img, el("span", "", clip(a.name, 24)), remove);
    box.append(chip);
  }
  box.hidden = state.attachments.length === 0 || Boolean(state.running);
}

// ------------------------------------------------------------------ chrome

function resizeTextarea(area) {
  area.style.height = "auto";
  area.style.height = `${Math.min(area.scrollHeight, 200)}px`;
}

function openSidebar() {
  $("#app").classList.add("sidebar-open");
  $("#scrim").hidden = false;
}

function closeSidebar() {
  $("#app").classList.remove("sidebar-open");
  $("#scrim").hidden = true;
}

function showLogin(message) {
  $("#login").hidden = false;
  $("#messages").hidden = true;
  document.querySelector(".composer-wrap").hidden = true;
  const error = $("#login-error");
  error.hidden = !message || !state.token;
  error.textContent = message || "";
}

function hideLogin() {
  $("#login").hidden = true;
  $("#messages").hidden = false;
  document.querySelector(".composer-wrap").hidden = false;
}

function bind() {
  $("#composer").addEventListener("submit", (e) => { e.preventDefault(); sendMessage(); });
  $("#inject-form").addEventListener("submit", (e) => { e.preventDefault(); sendInject(); });
  $("#stop").addEventListener("click", () => { stopRunning(); });
  $("#composer-meter").addEventListener("click", (e) => {
    if (e.target.closest("#compact-now")) compactNow();
  });
  $("#new-chat").addEventListener("click", newChat);
  $("#toggle-sidebar").addEventListener("click", openSidebar);
  $("#scrim").addEventListener("click", closeSidebar);
  for (const id of ["#query", "#inject-text"]) {
    const area = $(id);
    area.addEventListener("input", () => resizeTextarea(area));
    area.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        area.form.requestSubmit();
      }
    });
  }
  $("#file-input").addEventListener("change", (e) => {
    const files = Array.from(e.target.files || []);
    e.target.value = "";
    attachFiles(files);
  });
  messagesBox().addEventListener("scroll", () => { stickToBottom = isNearBottom(); });
  const savedMode = localStorage.getItem(MODE_KEY);
  if (savedMode) syncModeInputs(savedMode === "dag" ? "dag" : "react");
  document.querySelectorAll('input[name="mode"], input[name="settings-mode"]').forEach((r) => {
    r.addEventListener("change", () => {
      syncModeInputs(r.value);
      localStorage.setItem(MODE_KEY, r.value);
    });
  });
  $("#open-settings").addEventListener("click", () => $("#settings").showModal());
  for (const dialog of document.querySelectorAll("dialog")) {
    dialog.querySelector(".dialog-close")?.addEventListener("click", () => dialog.close());
    dialog.addEventListener("click", (e) => { if (e.target === dialog) dialog.close(); });
  }
  $("#login-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    state.token = $("#token-input").value.trim();
    try {
      await api("/api/me");
      localStorage.setItem(TOKEN_KEY, state.token);
      hideLogin();
      await start();
    } catch (err) {
      showLogin(err.status === 401 ? "That token was not accepted." : err.message);
    }
  });
}

function signOut() {
  localStorage.removeItem(TOKEN_KEY);
  state.token = "";
  state.me = null;
  state.conversations = [];
  renderConversationList();
  newChat();
  renderAccount(state, signOut);
  showLogin("");
}

async function start() {
  state.me = await api("/api/me");
  renderAccount(state, signOut);
  await loadConversations();
  const match = location.hash.match(/^#c=(.+)$/);
  const wanted = match ? decodeURIComponent(match[1]) : null;
  if (wanted && state.conversations.some((c) => c.id === wanted)) await selectConversation(wanted);
  else clearMessages();
}

async function boot() {
  bind();
  try {
    state.info = await api("/api/info");
  } catch (err) {
    toast(`The server did not answer: ${err.message}`);
    return;
  }
  renderInfo(state.info);
  setComposerMeter($("#composer-meter"), null, state.info?.budget?.usable_input_tokens);
  if (state.info.auth_required && !state.token) {
    showLogin("");
    return;
  }
  try {
    await start();
  } catch (err) {
    if (err.status !== 401) toast(err.message);
  }
}

boot();
