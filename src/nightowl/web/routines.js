// The routines page: each routine with its schedule, what it watches and what done means, how
// many due times ran, were skipped or failed, and its due times one by one; approve, pause,
// resume or delete it. Text is always set with textContent: a routine the agent proposed may
// quote outside content.

import { request } from "/app/api.js";
import { $, actThenReload, button, element, showProblem } from "/app/page.js";

const act = (work) => actThenReload(work, load);

function describe(routine) {
  const parts = [`${routine.cron} (${routine.timezone})`, `catch-up ${routine.catch_up}`];
  if (routine.watch) {
    const via = routine.watch.via ? ` via ${routine.watch.via}` : "";
    parts.push(`watches ${routine.watch.kind} ${routine.watch.target}${via}`);
  }
  if (routine.done_when) {
    parts.push(
      routine.done_when.kind === "sent"
        ? "done when it sends you a message"
        : `done when it writes ${routine.done_when.path}`,
    );
  }
  if (routine.quiet_hours === "skip") parts.push("skips your quiet hours");
  if (routine.trust === "untrusted") parts.push("runs as outside content");
  return parts.join(" · ");
}

function counts(routine) {
  const o = routine.outcomes;
  return `ran ${o.ran} · skipped ${o.skipped} · failed ${o.failed}` +
    (o.pending ? ` · running ${o.pending}` : "");
}

async function showFirings(routine, box) {
  try {
    const { body } = await request(
      "GET",
      `/v1/routines/${encodeURIComponent(routine.id)}/firings?limit=50`,
    );
    const list = element("ul", "memory-list");
    list.setAttribute("aria-label", `Due times of ${routine.name}`);
    for (const firing of body) {
      const li = element("li", "memory-meta");
      li.dataset.outcome = firing.outcome;
      const when = new Date(firing.due_at).toLocaleString();
      const missed = firing.missed ? ` (stood for ${firing.missed} missed)` : "";
      li.append(
        element("span", firing.outcome === "failed" ? "badge warn" : "badge", firing.outcome),
        element("span", "", ` ${when}${missed}${firing.reason ? ` — ${firing.reason}` : ""}`),
      );
      list.append(li);
    }
    if (!body.length) list.append(element("li", "memory-meta", "no due time yet"));
    box.replaceChildren(list);
  } catch (error) {
    showProblem(error);
  }
}

function routineItem(routine) {
  const li = element("li", "memory-item");
  li.dataset.id = routine.id;
  li.dataset.status = routine.status;
  const head = element("p", "memory-text");
  head.append(
    element("strong", "", routine.name),
    " ",
    element("span", routine.status === "active" ? "badge" : "badge warn", routine.status),
  );
  li.append(
    head,
    element("p", "memory-body", routine.prompt),
    element("p", "memory-meta", describe(routine)),
    element("p", "memory-meta outcomes", counts(routine)),
  );
  const details = element("details");
  const box = element("div");
  details.append(element("summary", "link", "Due times"), box);
  details.addEventListener("toggle", () => {
    if (details.open) showFirings(routine, box);
  });
  li.append(details);
  const base = `/v1/routines/${encodeURIComponent(routine.id)}`;
  const actions = element("p");
  if (routine.status === "pending_approval") {
    actions.append(button("Approve", () => act(() => request("POST", `${base}/approve`))), " ");
  } else if (routine.status === "active") {
    actions.append(button("Pause", () => act(() => request("POST", `${base}/pause`))), " ");
  } else if (routine.status === "paused") {
    actions.append(button("Resume", () => act(() => request("POST", `${base}/resume`))), " ");
  }
  actions.append(
    button("Delete", () => {
      if (window.confirm(`Delete the routine ${routine.name}?`)) {
        act(() => request("DELETE", base));
      }
    }),
  );
  li.append(actions);
  return li;
}

async function load() {
  try {
    const { body } = await request("GET", "/v1/routines");
    $("none").hidden = body.length > 0;
    $("routines").replaceChildren(...body.map(routineItem));
  } catch (error) {
    showProblem(error);
  }
}

load();
