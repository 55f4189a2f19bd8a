// The inbox: everything that waits on you across conversations (GET /v1/inbox), answered in
// place with the same calls the conversation uses. The server computes it on every fetch, so
// an item answered on another device is simply absent from the next one.

const LABELS = {
  approval: "Approval",
  question: "Question",
  draft: "Draft",
  helper_report: "Helper report",
  failed_turn: "Failed",
  stopped_turn: "Stopped",
  budget_stop: "Budget stop",
  connector_change: "Connector changed",
  memory_suggestion: "Memory suggestion",
};

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function secondsLeft(deadline) {
  return Math.max(0, Math.round((new Date(deadline) - Date.now()) / 1000));
}

function countdownText(deadline) {
  const left = secondsLeft(deadline);
  if (left === 0) return "window closed";
  return left >= 120 ? `closes in ${Math.round(left / 60)} min` : `closes in ${left} s`;
}

// `hooks`: renderBody(message) -> node, renderControls(message) -> node, onRead(item),
// timeOf(iso) -> text.
function renderItem(item, hooks) {
  const li = el("li", `inbox-item ${item.kind}`);
  li.dataset.id = item.id;
  li.dataset.kind = item.kind;
  const head = el("div", "meta");
  head.append(el("span", "badge kind", LABELS[item.kind] || item.kind));
  const where = el("a", "link inbox-where", item.conversation_title || "New conversation");
  where.href = item.link.replace(/^\//, "");
  head.append(where, el("time", "", hooks.timeOf(item.created_at)));
  if (item.deadline) {
    const countdown = el("span", "countdown", countdownText(item.deadline));
    countdown.dataset.deadline = item.deadline;
    countdown.setAttribute("role", "timer");
    head.append(countdown);
  }
  li.append(head);
  const body = el("div", "body");
  body.append(hooks.renderBody(item.message));
  li.append(body);
  if (item.message.controls) {
    li.append(hooks.renderControls(item.message));
  } else {
    const actions = el("div", "buttons");
    const read = el("button", "choice", "Mark read");
    read.type = "button";
    read.addEventListener("click", () => {
      read.disabled = true;
      hooks.onRead(item);
    });
    actions.append(read);
    li.append(actions);
  }
  return li;
}

export function renderInbox(list, status, inbox, hooks) {
  const byId = new Map([...list.children].map((li) => [li.dataset.id, li]));
  const fresh = [];
  for (const item of inbox.items) {
    // An item already shown keeps its node (a draft being edited is not reset).
    fresh.push(byId.get(item.id) || renderItem(item, hooks));
  }
  list.replaceChildren(...fresh);
  status.textContent = inbox.total ? "" : "Nothing waits on you.";
  status.hidden = Boolean(inbox.total);
}

// Tick the deadlines every second; an item whose window closed asks for a refresh.
export function tickDeadlines(list, onClosed) {
  let closed = false;
  for (const node of list.querySelectorAll(".countdown")) {
    node.textContent = countdownText(node.dataset.deadline);
    if (secondsLeft(node.dataset.deadline) === 0) closed = true;
  }
  if (closed) onClosed();
}

// The count in the title and, where the browser has one, on the installed app's icon.
export function showCount(total) {
  document.title = total ? `(${total}) nightowl` : "nightowl";
  const badge = document.getElementById("inbox-count");
  if (badge) {
    badge.textContent = total ? String(total) : "";
    badge.hidden = !total;
  }
  try {
    if (total && navigator.setAppBadge) navigator.setAppBadge(total).catch(() => {});
    else if (navigator.clearAppBadge) navigator.clearAppBadge().catch(() => {});
  } catch {
    // no badge here: the title carries the count
  }
}
