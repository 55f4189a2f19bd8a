// The nightowl web app: conversations, live sync, optimistic sending and the agent's controls.
// Sync rules (the same as `nightowl chat`): the server numbers each conversation's messages;
// the app holds a contiguous run 1..lastSeq, fetches after lastSeq whenever a notification
// arrives or it (re)connects, and reloads a conversation from the start if its run ever breaks.

import { ApiError, NetworkError, Unauthorized, api, fetchFile, token } from "./api.js";
import { showAudit } from "./audit.js";
import { renderHelpers } from "./helpers.js";
import { renderInbox, showCount, tickDeadlines } from "./inbox.js";
import { renderMarkdown } from "./markdown.js";
import { Outbox } from "./outbox.js";
import { disablePush, enablePush, pushState, pushSupported, registerServiceWorker } from "./push.js";
import { ChangeStream } from "./sync.js";
import { renderWrong } from "./wrong.js";
import { renderWelcome } from "./welcome.js";

const RETRY_DELAYS_MS = [1000, 2000, 4000, 8000, 15000, 30000];
const INLINE_IMAGES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);
const $ = (id) => document.getElementById(id);

const state = {
  conversations: new Map(), // id -> conversation (as the API returns it)
  current: null, // the open conversation's id
  views: new Map(), // id -> { lastSeq, byId: Map(message id -> message), syncing, again }
  outbox: new Outbox(),
  retryTimers: new Map(), // client id -> timer
  stream: null,
  target: null, // a message to show (the inbox links to `#c=<id>&m=<message>`)
};

// ---------- small DOM helpers ----------

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function button(label, className, onClick) {
  const b = el("button", className, label);
  b.type = "button";
  b.addEventListener("click", onClick);
  return b;
}

function timeOf(iso) {
  const date = new Date(iso);
  const sameDay = date.toDateString() === new Date().toDateString();
  return sameDay
    ? date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : date.toLocaleString([], { dateStyle: "medium", timeStyle: "short" });
}

function view(id) {
  if (!state.views.has(id)) {
    state.views.set(id, { lastSeq: 0, byId: new Map(), syncing: false, again: false });
  }
  return state.views.get(id);
}

// ---------- sign in ----------

function takeTokenFromUrl() {
  const params = new URLSearchParams(window.location.hash.slice(1));
  const given = params.get("token");
  if (given) {
    token.set(given);
    params.delete("token");
    const rest = params.toString();
    history.replaceState(null, "", window.location.pathname + (rest ? `#${rest}` : ""));
  }
}

function showSignIn(message) {
  state.stream?.stop();
  $("app").hidden = true;
  $("signin").hidden = false;
  $("signin-error").textContent = message || "";
  $("token-input").focus();
}

async function signIn(event) {
  event.preventDefault();
  const given = $("token-input").value.trim();
  if (!given) return;
  token.set(given);
  $("token-input").value = "";
  await start();
}

function signOut() {
  token.clear();
  navigator.serviceWorker?.controller?.postMessage({ type: "signed-out" });
  showSignIn("Signed out.");
}

// ---------- conversation list ----------

function plain(text) {
  return (text || "").replace(/[*_`~#>]+/g, "").trim();
}

function conversationLabel(c) {
  return c.title || plain(c.preview) || "New conversation";
}

function renderList() {
  const list = $("conversation-list");
  const items = [...state.conversations.values()].sort((a, b) =>
    b.updated_at.localeCompare(a.updated_at),
  );
  list.replaceChildren(
    ...items.map((c) => {
      const li = el("li");
      const b = button("", "conversation-item", () => openConversation(c.id));
      b.dataset.id = c.id;
      if (c.id === state.current) b.setAttribute("aria-current", "true");
      const title = el("span", "title", conversationLabel(c));
      const sub = el("span", "sub", c.activity ? `working: ${c.activity}` : plain(c.preview));
      b.append(title, sub);
      if (c.unread > 0 && c.id !== state.current) {
        const badge = el("span", "unread", String(c.unread));
        badge.setAttribute("aria-label", `${c.unread} unread`);
        b.append(badge);
      }
      li.append(b);
      return li;
    }),
  );
}

let listTimer = null;
function refreshListSoon() {
  clearTimeout(listTimer);
  listTimer = setTimeout(refreshList, 150);
}

async function refreshList() {
  try {
    const conversations = await api.conversations();
    state.conversations = new Map(conversations.map((c) => [c.id, c]));
    renderList();
    if (state.current && state.conversations.has(state.current)) renderHeader();
  } catch (error) {
    handleError(error);
  }
}

async function refreshConversation(id) {
  try {
    const c = await api.conversation(id);
    state.conversations.set(id, c);
    renderList();
    if (id === state.current) {
      renderHeader();
      await refreshHelpers(id);
    }
  } catch (error) {
    handleError(error);
  }
}

// Helpers working for the open conversation: status, last step, cost, and Stop.
async function refreshHelpers(id) {
  const helpers = await api.helpers(id);
  if (id !== state.current) return;
  renderHelpers($("helpers"), helpers, async (helper) => {
    try {
      await api.stopHelper(id, helper.id);
      await refreshHelpers(id);
    } catch (error) {
      handleError(error);
    }
  });
}

async function newConversation() {
  try {
    const c = await api.startConversation();
    state.conversations.set(c.id, c);
    window.location.hash = `c=${c.id}`;
  } catch (error) {
    handleError(error);
  }
}

// ---------- the open conversation ----------

function renderHeader() {
  const c = state.conversations.get(state.current);
  $("conversation-title").textContent = c ? conversationLabel(c) : "nightowl";
  const screen = $("screen-link");
  screen.hidden = !c;
  if (c) screen.href = `/display#agent=${encodeURIComponent(c.id)}`;
  const activity = $("activity");
  if (c?.activity) {
    activity.hidden = false;
    activity.textContent = `nightowl is ${c.activity}…`;
    activity.dataset.waiting = c.activity.startsWith("waiting") ? "true" : "false";
  } else {
    activity.hidden = true;
    activity.textContent = "";
  }
}

function openConversation(id) {
  window.location.hash = `c=${id}`; // routed by onHashChange (no event if already open)
}

async function showConversation(id) {
  if (state.current !== id) {
    state.current = id;
    $("messages").replaceChildren();
    const v = view(id);
    v.lastSeq = 0;
    v.byId.clear();
  }
  document.body.classList.toggle("has-conversation", Boolean(id));
  $("empty").hidden = Boolean(id);
  if (!id) $("welcome").hidden = true;
  $("composer").hidden = !id;
  renderList();
  renderHeader();
  if (!id) return;
  renderPending();
  await syncMessages(id);
  await refreshConversation(id);
  if (window.matchMedia("(min-width: 720px)").matches) $("composer-input").focus();
}

function onHashChange() {
  const auditing = window.location.hash === "#audit";
  const inboxing = window.location.hash === "#inbox";
  const setting = window.location.hash === "#settings";
  document.body.classList.toggle("auditing", auditing);
  document.body.classList.toggle("inboxing", inboxing);
  document.body.classList.toggle("setting", setting);
  $("audit").hidden = !auditing;
  $("inbox").hidden = !inboxing;
  $("settings").hidden = !setting;
  $("conversation").hidden = auditing || inboxing || setting;
  if (setting) {
    document.body.classList.remove("has-conversation");
    showSettings();
    return;
  }
  if (auditing) {
    showAudit($("audit-table"), $("audit-status"));
    return;
  }
  if (inboxing) {
    document.body.classList.remove("has-conversation");
    refreshInbox();
    return;
  }
  const params = new URLSearchParams(window.location.hash.slice(1));
  state.target = params.get("m");
  showConversation(params.get("c"));
}

// ---------- the first screen of an empty conversation ----------

async function showWelcomeIfEmpty(id) {
  const box = $("welcome");
  const empty = id === state.current && view(id).lastSeq === 0 && !state.outbox.of(id).length;
  if (!empty) {
    box.hidden = true;
    return;
  }
  try {
    const status = await api.status();
    if (id !== state.current || view(id).lastSeq !== 0) return;
    renderWelcome(box, status, (text) => {
      $("composer-input").value = text;
      $("composer").requestSubmit();
    });
    // Still checking the model: look again shortly.
    if (status.model_state === "loading") setTimeout(() => showWelcomeIfEmpty(id), 2000);
  } catch (error) {
    handleError(error);
  }
}

// ---------- settings: notifications on this device, quiet hours, devices ----------

async function showSettings() {
  await renderPushState();
  try {
    const settings = await api.pushSettings();
    $("quiet-start").value = settings.quiet_start || "";
    $("quiet-end").value = settings.quiet_end || "";
    $("quiet-zone").value = settings.timezone;
    $("include-text").checked = settings.include_text;
    const devices = await api.devices();
    $("devices").replaceChildren(
      ...devices.map((d) => {
        const li = el("li", "", `${d.device || "a device"} (${d.service}) `);
        li.append(
          button("Remove", "link", async () => {
            await api.unsubscribe(d.id).catch(handleError);
            showSettings();
          }),
        );
        return li;
      }),
    );
    if (!devices.length) $("devices").replaceChildren(el("li", "hint", "none yet"));
  } catch (error) {
    handleError(error);
  }
}

async function renderPushState() {
  const stateNow = await pushState();
  const words = {
    on: "On: nightowl can reach this device when the app is closed.",
    off: "Off: you hear from nightowl only while the app is open.",
    denied: "Blocked in this browser's site settings.",
    unsupported: "This browser cannot take push notifications (on iPhone: add nightowl to the Home Screen first).",
  };
  $("push-state").textContent = words[stateNow];
  const toggle = $("push-toggle");
  toggle.hidden = stateNow === "unsupported" || stateNow === "denied";
  toggle.textContent = stateNow === "on" ? "Turn off" : "Turn on";
  toggle.dataset.state = stateNow;
}

async function togglePush() {
  const toggle = $("push-toggle");
  toggle.disabled = true;
  try {
    if (toggle.dataset.state === "on") await disablePush();
    else await enablePush();
  } catch (error) {
    $("push-state").textContent = `Not turned on: ${error.message}`;
    toggle.disabled = false;
    return;
  }
  toggle.disabled = false;
  showSettings();
}

async function savePushSettings(event) {
  event.preventDefault();
  const start = $("quiet-start").value;
  const end = $("quiet-end").value;
  try {
    await api.savePushSettings({
      quiet_start: start || null,
      quiet_end: end || null,
      timezone: $("quiet-zone").value.trim() || "UTC",
      include_text: $("include-text").checked,
    });
    $("push-settings-status").textContent = "Saved.";
  } catch (error) {
    $("push-settings-status").textContent = `Not saved: ${error.message}`;
  }
}

// ---------- the inbox ----------

let inboxTimer = null;
function refreshInboxSoon() {
  clearTimeout(inboxTimer);
  inboxTimer = setTimeout(refreshInbox, 120);
}

async function refreshInbox() {
  try {
    const kind = $("inbox-kind").value;
    const everything = await api.inbox();
    showCount(everything.total);
    if ($("inbox").hidden) return;
    const shown = kind
      ? { ...everything, items: everything.items.filter((i) => i.kind === kind) }
      : everything;
    shown.total = shown.items.length;
    renderInbox($("inbox-list"), $("inbox-status"), shown, {
      timeOf,
      renderBody: (message) => renderMarkdown(message.body),
      renderControls: (message) => renderControls(message, refreshInboxSoon),
      onRead: async (item) => {
        try {
          await api.markRead(item.conversation_id, item.message.seq);
        } catch (error) {
          handleError(error);
        }
        refreshInboxSoon();
      },
    });
  } catch (error) {
    handleError(error);
  }
}

function showTarget() {
  if (!state.target) return;
  const node = $("messages").querySelector(`li[data-id="${CSS.escape(state.target)}"]`);
  if (!node) return;
  state.target = null;
  node.classList.add("target");
  node.scrollIntoView({ block: "center" });
}

// Fetch everything after the last message held, in order; reload from scratch on a gap.
async function syncMessages(id) {
  const v = view(id);
  if (v.syncing) {
    v.again = true;
    return;
  }
  v.syncing = true;
  $("messages").setAttribute("aria-busy", "true");
  try {
    do {
      v.again = false;
      for (;;) {
        const page = await api.messagesAfter(id, v.lastSeq);
        if (id !== state.current) return;
        let broken = false;
        for (const message of page.messages) {
          if (message.seq <= v.lastSeq) continue;
          if (message.seq !== v.lastSeq + 1) {
            broken = true;
            break;
          }
          applyMessage(message);
        }
        if (broken) {
          reloadConversation(id);
          continue;
        }
        if (!page.messages.length || v.lastSeq >= page.last_seq) break;
      }
    } while (v.again);
    showTarget();
    showWelcomeIfEmpty(id);
    markReadSoon();
  } catch (error) {
    handleError(error);
  } finally {
    v.syncing = false;
    if (id === state.current) $("messages").setAttribute("aria-busy", "false");
  }
}

function reloadConversation(id) {
  console.info("nightowl: a gap in the conversation; reloading it");
  const v = view(id);
  v.lastSeq = 0;
  v.byId.clear();
  $("messages").replaceChildren();
  renderPending();
}

function applyMessage(message) {
  const v = view(message.conversation_id);
  v.lastSeq = message.seq;
  v.byId.set(message.id, message);
  const list = $("messages");
  // The server's copy replaces our pending one.
  if (message.client_id) {
    list.querySelector(`li[data-client-id="${CSS.escape(message.client_id)}"]`)?.remove();
    state.outbox.remove(message.client_id);
    clearTimeout(state.retryTimers.get(message.client_id));
  }
  const item = renderMessage(message);
  const firstPending = list.querySelector("li.pending");
  list.insertBefore(item, firstPending);
  if (message.answer_to) {
    const question = v.byId.get(message.answer_to);
    if (question?.controls) {
      question.controls.state = "answered";
      question.answered_with = message.answer;
      rerender(question);
    }
  }
  scrollToEnd();
}

function rerender(message) {
  const old = $("messages").querySelector(`li[data-id="${CSS.escape(message.id)}"]`);
  if (old) old.replaceWith(renderMessage(message));
}

function scrollToEnd() {
  const list = $("messages");
  list.scrollTop = list.scrollHeight;
}

function who(message) {
  if (message.role === "agent") return "nightowl";
  if (message.role === "notice") return "notice";
  if (message.trust === "owner") return "you";
  if (message.trust === "untrusted") return "from outside";
  return "member";
}

function renderMessage(message) {
  const li = el("li", `msg ${message.role}`);
  li.dataset.id = message.id;
  li.dataset.seq = String(message.seq);
  if (message.trust === "owner") li.classList.add("own");
  if (message.trust === "untrusted") li.classList.add("untrusted");
  const meta = el("div", "meta");
  meta.append(el("span", "who", who(message)), el("time", "", timeOf(message.created_at)));
  if (message.important) meta.append(el("span", "badge", "important"));
  if (message.trust === "untrusted") meta.append(el("span", "badge warn", "untrusted content"));
  if (message.turn_id) {
    const how = el("a", "how", "How was this made?");
    how.href =
      `/timeline#c=${encodeURIComponent(message.conversation_id)}` +
      `&t=${encodeURIComponent(message.turn_id)}`;
    how.target = "_blank";
    how.rel = "noopener";
    meta.append(how);
  }
  li.append(meta);
  const body = el("div", "body");
  if (message.trust === "untrusted") {
    body.classList.add("plain");
    body.textContent = message.body; // outside text is shown as it is, never formatted
  } else {
    body.append(renderMarkdown(message.body));
  }
  li.append(body);
  if (message.files?.length) li.append(renderFiles(message));
  if (message.controls) li.append(renderControls(message));
  if (message.role === "agent") li.append(renderWrong(message));
  return li;
}

// ---------- attachments ----------

function renderFiles(message) {
  const box = el("ul", "files");
  for (const file of message.files) {
    const item = el("li", "file");
    if (INLINE_IMAGES.has(file.content_type)) {
      const img = el("img");
      img.alt = file.name;
      img.loading = "lazy";
      fetchFile(file.url)
        .then((blob) => {
          img.src = URL.createObjectURL(blob);
        })
        .catch(() => img.replaceWith(el("span", "error", `(${file.name} could not be loaded)`)));
      item.append(img);
    }
    const size = file.size >= 1024 ? `${Math.round(file.size / 1024)} KB` : `${file.size} B`;
    item.append(button(`Download ${file.name} (${size})`, "link", () => download(file)));
    box.append(item);
  }
  return box;
}

async function download(file) {
  try {
    const blob = await fetchFile(file.url);
    const a = el("a");
    a.href = URL.createObjectURL(blob);
    a.download = file.name;
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  } catch (error) {
    handleError(error);
  }
}

// ---------- questions: buttons and drafts ----------

function answerLabel(message) {
  const answer = message.answered_with;
  if (!answer) return "Answered.";
  if (answer.label) return `Answered: ${answer.label}`;
  return answer.action === "send" ? "Sent." : "Discarded.";
}

function renderControls(message, onAnswered) {
  const { controls } = message;
  const box = el("div", `controls ${controls.state}`);
  const open = controls.state === "open";
  const status = el("p", "control-status");
  status.setAttribute("role", "status");
  if (controls.state === "answered") status.textContent = answerLabel(message);
  if (controls.state === "closed") status.textContent = "This question is closed.";

  const submit = async (answer, controlsToLock) => {
    controlsToLock.forEach((c) => {
      c.disabled = true;
    });
    status.textContent = "Sending your answer…";
    const payload = { client_id: `answer-${crypto.randomUUID()}`, ...answer };
    for (let attempt = 0; ; attempt += 1) {
      try {
        const { body } = await api.answer(message.conversation_id, message.id, payload);
        message.controls.state = "answered";
        message.answered_with = body.answer;
        status.textContent = answerLabel(message);
        syncMessages(message.conversation_id);
        onAnswered?.();
        return;
      } catch (error) {
        if (error instanceof NetworkError && attempt < RETRY_DELAYS_MS.length) {
          status.textContent = "Connection lost; trying again…";
          await new Promise((r) => setTimeout(r, RETRY_DELAYS_MS[attempt]));
          continue;
        }
        if (error instanceof ApiError && error.status === 409) {
          message.controls.state = "closed";
          status.textContent = error.message;
          onAnswered?.();
          return;
        }
        status.textContent = `Not sent: ${error.message}`;
        controlsToLock.forEach((c) => {
          c.disabled = false;
        });
        return;
      }
    }
  };

  if (controls.action?.cut) box.append(renderAction(controls.action));
  if (controls.buttons?.length) {
    const group = el("div", "buttons");
    group.setAttribute("role", "group");
    group.setAttribute("aria-label", controls.ask === "approval" ? "Approval" : "Answers");
    const all = [];
    for (const choice of controls.buttons) {
      const b = button(choice.label, "choice", () => submit({ value: choice.value }, all));
      b.dataset.value = choice.value;
      b.disabled = !open;
      if (message.answered_with?.value === choice.value) b.setAttribute("aria-pressed", "true");
      all.push(b);
      group.append(b);
    }
    box.append(group);
  } else if (controls.draft !== null && controls.draft !== undefined) {
    const label = el("label", "draft-label", "Draft");
    const area = el("textarea", "draft");
    area.id = `draft-${message.id}`;
    label.htmlFor = area.id;
    area.value = message.answered_with?.text ?? controls.draft;
    area.rows = Math.min(12, Math.max(3, area.value.split("\n").length + 1));
    area.readOnly = !open;
    const send = button("Send", "choice primary", () =>
      submit({ action: "send", text: area.value }, [send, discard, area]),
    );
    const discard = button("Discard", "choice", () =>
      submit({ action: "discard" }, [send, discard, area]),
    );
    send.disabled = discard.disabled = !open;
    const row = el("div", "buttons");
    row.append(send, discard);
    box.append(label, area, row);
  }
  box.append(status);
  return box;
}

// The whole action an approval is about, when its text shows only the start of the
// arguments: behind "Show all", as plain text (never formatted), exactly what will run.
function renderAction(action) {
  const box = el("div", "action");
  const count = action.chars.toLocaleString("en");
  const pre = el("pre", "action-arguments");
  pre.id = `action-${crypto.randomUUID()}`;
  pre.textContent = action.arguments;
  pre.hidden = true;
  const toggle = button(`Show all ${count} characters`, "link show-all", () => {
    pre.hidden = !pre.hidden;
    toggle.setAttribute("aria-expanded", String(!pre.hidden));
    toggle.textContent = pre.hidden ? `Show all ${count} characters` : "Show less";
  });
  toggle.setAttribute("aria-expanded", "false");
  toggle.setAttribute("aria-controls", pre.id);
  box.append(toggle, pre);
  return box;
}

// ---------- sending ----------

function renderPending() {
  const list = $("messages");
  list.querySelectorAll("li.pending").forEach((li) => li.remove());
  for (const item of state.outbox.of(state.current)) list.append(renderPendingItem(item));
  scrollToEnd();
}

function renderPendingItem(item) {
  const li = el("li", `msg user own pending ${item.state}`);
  li.dataset.clientId = item.client_id;
  const meta = el("div", "meta");
  const labels = {
    sending: "sending…",
    retrying: "not sent yet — retrying",
    failed: "not sent",
  };
  meta.append(el("span", "who", "you"), el("span", "send-state", labels[item.state]));
  const body = el("div", "body");
  body.append(renderMarkdown(item.text));
  li.append(meta, body);
  if (item.state !== "sending") {
    const actions = el("div", "pending-actions");
    if (item.error) actions.append(el("span", "error", item.error));
    actions.append(
      button("Retry", "link retry", () => {
        state.outbox.update(item, { attempts: 0, refused: false });
        attemptSend(item.client_id);
      }),
    );
    if (item.state === "failed") {
      actions.append(button("Discard", "link", () => discardPending(item.client_id)));
    }
    li.append(actions);
  }
  return li;
}

function updatePending(item) {
  const old = $("messages").querySelector(`li[data-client-id="${CSS.escape(item.client_id)}"]`);
  if (old) old.replaceWith(renderPendingItem(item));
}

function discardPending(clientId) {
  clearTimeout(state.retryTimers.get(clientId));
  state.outbox.remove(clientId);
  $("messages").querySelector(`li[data-client-id="${CSS.escape(clientId)}"]`)?.remove();
}

function send(event) {
  event.preventDefault();
  const input = $("composer-input");
  const text = input.value;
  if (!text.trim() || !state.current) return;
  input.value = "";
  autosize();
  $("welcome").hidden = true;
  const item = state.outbox.add(state.current, text);
  $("messages").append(renderPendingItem(item));
  scrollToEnd();
  attemptSend(item.client_id);
}

async function attemptSend(clientId) {
  const item = state.outbox.find(clientId);
  if (!item || item.inFlight) return;
  clearTimeout(state.retryTimers.get(clientId));
  item.inFlight = true;
  state.outbox.update(item, { state: "sending", error: "" });
  updatePending(item);
  try {
    const { body } = await api.send(item.conversation_id, item.client_id, item.text);
    // Sent (201) or already there from an attempt whose answer we never heard (200).
    item.inFlight = false;
    state.outbox.remove(clientId);
    if (body.conversation_id === state.current) {
      const v = view(body.conversation_id);
      if (body.seq === v.lastSeq + 1) applyMessage(body);
      else syncMessages(body.conversation_id);
    }
    refreshListSoon();
  } catch (error) {
    item.inFlight = false;
    if (error instanceof Unauthorized) return handleError(error);
    const retryable =
      error instanceof NetworkError || (error instanceof ApiError && error.retryable);
    const attempts = item.attempts + 1;
    if (retryable && attempts <= RETRY_DELAYS_MS.length) {
      state.outbox.update(item, { state: "retrying", attempts, error: "" });
      state.retryTimers.set(
        clientId,
        setTimeout(() => attemptSend(clientId), RETRY_DELAYS_MS[attempts - 1]),
      );
    } else {
      state.outbox.update(item, {
        state: "failed",
        attempts,
        error: error.message,
        refused: !retryable, // the server said no: only the owner's Retry sends it again
      });
    }
    updatePending(item);
  }
}

// Back online: send what is waiting now (a refused message waits for the owner's Retry).
function retryAllPending() {
  for (const item of state.outbox.items) {
    if (!item.inFlight && !item.refused) attemptSend(item.client_id);
  }
}

// ---------- read state, notifications, errors ----------

let readTimer = null;
function markReadSoon() {
  clearTimeout(readTimer);
  readTimer = setTimeout(async () => {
    const id = state.current;
    if (!id || document.hidden) return;
    const seq = view(id).lastSeq;
    const c = state.conversations.get(id);
    if (!c || (c.read_seq >= seq && !c.unread)) return;
    try {
      const updated = await api.markRead(id, seq);
      state.conversations.set(id, updated);
      renderList();
    } catch (error) {
      handleError(error);
    }
  }, 300);
}

function notify(change) {
  if (!("Notification" in window) || Notification.permission !== "granted") return;
  if (!document.hidden && change.conversation_id === state.current) return;
  const c = state.conversations.get(change.conversation_id);
  new Notification("nightowl", { body: c ? conversationLabel(c) : "Something needs you." });
}

function setupNotificationButton() {
  const b = $("enable-notifications");
  if (!("Notification" in window) || Notification.permission !== "default") return;
  b.hidden = false;
  b.addEventListener("click", async () => {
    // With push, the phone hears of approvals even when the app is closed.
    if (pushSupported()) await enablePush().catch((error) => console.warn("nightowl:", error));
    else await Notification.requestPermission();
    b.hidden = true;
  });
}

function handleError(error) {
  if (error instanceof Unauthorized) {
    showSignIn("Your access token was not accepted. Sign in again.");
    return;
  }
  if (error instanceof NetworkError) return; // the stream reconnects and catches up
  console.warn("nightowl:", error);
}

function setConnection(status) {
  const node = $("connection");
  node.dataset.state = status;
  node.textContent = { live: "live", connecting: "connecting…", reconnecting: "offline — reconnecting…" }[status];
}

// ---------- composer ----------

function autosize() {
  const input = $("composer-input");
  input.style.height = "auto";
  input.style.height = `${Math.min(input.scrollHeight, 200)}px`;
}

// While the owner types, the server may warm the model's cache so the reply comes sooner and
// cheaper; it decides how often (once per cache lifetime), this only avoids chatter.
const TYPING_EVERY_MS = 30_000;
const typingSent = new Map();

function onComposerInput() {
  autosize();
  const id = state.current;
  if (!id || !$("composer-input").value.trim()) return;
  const last = typingSent.get(id) || 0;
  if (Date.now() - last < TYPING_EVERY_MS) return;
  typingSent.set(id, Date.now());
  api.typing(id).catch(() => {}); // best effort: a cold cache only costs a little
}

function onComposerKey(event) {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("composer").requestSubmit();
  }
}

// ---------- start ----------

async function onOpen() {
  // Every (re)connection: catch up on everything that happened while we were away.
  await refreshList();
  if (state.current) await syncMessages(state.current);
  refreshInbox();
  retryAllPending();
}

function onChange(change) {
  refreshInboxSoon(); // any change may add or take an item (a question, a read, a turn's end)
  if (change.kind === "activity") {
    refreshConversation(change.conversation_id);
    return;
  }
  if (change.kind === "notify") notify(change);
  if (change.conversation_id === state.current) {
    const v = view(state.current);
    if (change.seq > v.lastSeq + 1) console.info("nightowl: missed notifications; catching up");
    if (change.seq > v.lastSeq) syncMessages(state.current);
  }
  refreshListSoon();
}

async function start() {
  try {
    await api.conversations();
  } catch (error) {
    if (error instanceof Unauthorized) return showSignIn("That token was not accepted.");
    if (!(error instanceof NetworkError)) throw error;
  }
  $("signin").hidden = true;
  $("app").hidden = false;
  state.stream?.stop();
  state.stream = new ChangeStream({
    onOpen,
    onChange,
    onStatus: setConnection,
    onUnauthorized: () => showSignIn("Your access token was not accepted. Sign in again."),
  });
  state.stream.start();
  await refreshList();
  if (!window.location.hash.includes("c=") && state.conversations.size === 0) {
    await newConversation();
  }
  onHashChange();
}

function init() {
  takeTokenFromUrl();
  $("signin-form").addEventListener("submit", signIn);
  $("signout").addEventListener("click", signOut);
  $("new-conversation").addEventListener("click", newConversation);
  $("back").addEventListener("click", () => {
    window.location.hash = "";
  });
  $("composer").addEventListener("submit", send);
  $("composer-input").addEventListener("keydown", onComposerKey);
  $("composer-input").addEventListener("input", onComposerInput);
  window.addEventListener("hashchange", onHashChange);
  window.addEventListener("online", () => {
    state.stream?.retryNow();
    retryAllPending();
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) {
      state.stream?.retryNow();
      markReadSoon();
    }
  });
  document.addEventListener("keydown", (event) => {
    const narrow = window.matchMedia("(max-width: 719px)").matches;
    if (event.key === "Escape" && narrow && document.body.classList.contains("has-conversation")) {
      if (document.activeElement?.classList.contains("draft")) return;
      window.location.hash = "";
    }
  });
  setupNotificationButton();
  $("inbox-kind").addEventListener("change", refreshInbox);
  $("push-toggle").addEventListener("click", togglePush);
  $("push-settings").addEventListener("submit", savePushSettings);
  if (!$("quiet-zone").value) $("quiet-zone").value = Intl.DateTimeFormat().resolvedOptions().timeZone;
  registerServiceWorker();
  setInterval(() => tickDeadlines($("inbox-list"), refreshInboxSoon), 1000);
  if (!token.get()) showSignIn("");
  else start();
}

init();
