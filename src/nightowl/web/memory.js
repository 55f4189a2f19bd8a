// The memory page: the owner sees, searches and corrects facts, skills, notes and the work log.
// Text is always set with textContent: remembered text may quote outside content.

import { request } from "/app/api.js";
import { $, actThenReload, button, element, showProblem } from "/app/page.js";

function act(work) {
  return actThenReload(work, load);
}

const get = (path) => request("GET", path).then((r) => r.body);
const del = (path) => request("DELETE", path);

function editInPlace(item, current, save) {
  const input = element("input", "memory-edit");
  input.value = current;
  input.setAttribute("aria-label", "Edit");
  const form = element("form", "memory-add");
  form.append(input, element("button", "", "Save"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    act(() => save(input.value));
  });
  item.replaceChildren(form);
  input.focus();
}

// Memory made from outside text is shown to the model as data and taints the turn that sees
// it; the owner's edit makes an item theirs.
function fromOutside(item) {
  return item.trust === "untrusted" ? "from untrusted content · " : "";
}

function factItem(fact) {
  const item = element("li", "memory-item");
  item.dataset.id = fact.id;
  const text = element("span", "memory-text", fact.text);
  const meta = element(
    "span",
    "memory-meta",
    `${fromOutside(fact)}used ${fact.use_count}×`,
  );
  item.append(
    text,
    meta,
    button("Edit", () =>
      editInPlace(item, fact.text, (value) =>
        request("PATCH", `/v1/memory/facts/${fact.id}`, { text: value }),
      ),
    ),
    button("Delete", () => act(() => del(`/v1/memory/facts/${fact.id}`))),
  );
  return item;
}

function skillItem(skill) {
  const item = element("li", "memory-item");
  item.dataset.id = skill.id;
  item.append(
    element("span", "memory-text", `${skill.name}: ${skill.description}`),
    element(
      "span",
      "memory-meta",
      `${fromOutside(skill)}${skill.approved ? "approved" : "needs your review"}`,
    ),
  );
  const details = element("details");
  details.append(element("summary", "", "Steps"), element("pre", "memory-body", skill.body));
  item.append(details);
  if (!skill.approved) {
    item.append(
      button("Approve", () =>
        act(() => request("PATCH", `/v1/memory/skills/${skill.id}`, { approved: true })),
      ),
    );
  }
  item.append(button("Delete", () => act(() => del(`/v1/memory/skills/${skill.id}`))));
  return item;
}

function logItem(entry) {
  const item = element("li", "memory-item");
  item.dataset.id = entry.id;
  item.append(
    element(
      "span",
      "memory-meta",
      `${fromOutside(entry)}${new Date(entry.created_at).toLocaleString()}`,
    ),
    element("span", "memory-text", entry.summary),
    button("Edit", () =>
      editInPlace(item, entry.summary, (value) =>
        request("PATCH", `/v1/memory/log/${entry.id}`, { summary: value }),
      ),
    ),
    button("Delete", () => act(() => del(`/v1/memory/log/${entry.id}`))),
  );
  return item;
}

function noteItem(note) {
  const item = element("li", "memory-item");
  item.append(
    element("span", "memory-text", note.text),
    element(
      "span",
      "memory-meta",
      `${fromOutside(note)}until ${new Date(note.expires_at).toLocaleTimeString()}`,
    ),
    button("Delete", () => act(() => del(`/v1/memory/notes/${note.id}`))),
  );
  return item;
}

function said(state) {
  if (!state) return "(none)";
  const text = String(state.text || state.name || "").replace(/\s+/g, " ");
  return `“${text.length > 80 ? `${text.slice(0, 79)}…` : text}”`;
}

const ACTIONS = {
  added: (c) => `added ${said(c.after)}`,
  removed: (c) => `removed ${said(c.before)}`,
  archived: (c) => `archived ${said(c.before)}`,
  restored: (c) => `brought back ${said(c.after)}`,
};

function changeItem(change) {
  const item = element("li", "memory-item");
  item.dataset.id = String(change.id);
  const what = (ACTIONS[change.action] || ((c) => `${c.action} ${said(c.before)} → ${said(c.after)}`))(change);
  const who = change.author === "memory_pass" ? "memory pass" : change.author;
  const from = change.trust === "untrusted" ? " · from untrusted content" : "";
  const when = new Date(change.created_at).toLocaleString();
  item.append(
    element("span", "memory-text", `${change.kind}: ${what}`),
    element("span", "memory-meta", `#${change.id} · ${when} · by ${who}${from}`),
  );
  if (change.reverted_by) {
    item.append(element("span", "memory-meta", `reverted by #${change.reverted_by}`));
    return item;
  }
  item.append(
    button("Revert", () =>
      act(() => request("POST", "/v1/memory/revert", { change: change.id })),
    ),
  );
  if (change.turn_id) {
    item.append(
      button("Revert turn", () =>
        act(() => request("POST", "/v1/memory/revert", { turn_id: change.turn_id })),
      ),
    );
  }
  return item;
}

function fill(list, items, render, empty) {
  list.replaceChildren(...(items.length ? items.map(render) : [element("li", "empty", empty)]));
}

async function load() {
  const [summary, facts, skills, notes, log, history] = await Promise.all([
    get("/v1/memory"),
    get("/v1/memory/facts"),
    get("/v1/memory/skills"),
    get("/v1/memory/notes"),
    get("/v1/memory/log?limit=100"),
    get("/v1/memory/history?limit=100"),
  ]);
  $("profile-size").textContent =
    `${summary.facts}/${summary.max_facts} facts · ` +
    `${summary.characters}/${summary.max_characters} characters`;
  fill($("facts"), facts, factItem, "Nothing remembered yet.");
  fill($("skills"), skills, skillItem, "No skills yet.");
  fill($("notes"), notes, noteItem, "No live notes.");
  fill($("log"), log, logItem, "No work logged yet.");
  fill($("history"), history, changeItem, "No changes yet.");
}

$("fact-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("fact-input").value.trim();
  if (!text) return;
  act(async () => {
    await request("POST", "/v1/memory/facts", { text });
    $("fact-input").value = "";
  });
});

$("search-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const query = $("search-input").value.trim();
  if (!query) return;
  $("problem").hidden = true;
  try {
    const hits = await get(`/v1/memory/search?q=${encodeURIComponent(query)}`);
    fill(
      $("search-results"),
      hits,
      (hit) => {
        const item = element("li", "memory-item");
        item.append(
          element("span", "memory-meta", `${hit.kind} · ${new Date(hit.at).toLocaleDateString()}`),
          element("span", "memory-text", hit.text),
        );
        return item;
      },
      "Nothing matches.",
    );
  } catch (error) {
    showProblem(error);
  }
});

load().catch(showProblem);
