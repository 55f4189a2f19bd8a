// The evals page: the owner's cases and the shipped starter set, each with its latest result
// per model and a trend (its recent results, oldest first); a draft is kept or dropped here
// and its checker edited as JSON (the server checks it and says what is wrong).
// Text is always set with textContent: a case quotes conversations, outside text included.

import { request } from "/app/api.js";
import { $, actThenReload, button, element, showProblem } from "/app/page.js";

const SOURCE_WORDS = {
  shipped: "starter set",
  marked: "marked wrong",
  guard_stop: "guard stop",
  tool_error_loop: "tool errors in a row",
  approved_block: "approved after a block",
  denied_approval: "approval denied",
  misunderstood: "misunderstood",
};

function latestByModel(results) {
  const latest = new Map();
  for (const result of results) latest.set(result.model, result); // oldest first: last wins
  return latest;
}

function renderModels(cases, models) {
  const list = $("models");
  list.replaceChildren();
  $("no-runs").hidden = models.length > 0;
  for (const model of models) {
    let passed = 0;
    let run = 0;
    for (const item of cases) {
      const last = latestByModel(item.results).get(model);
      if (!last) continue;
      run += 1;
      if (last.passed) passed += 1;
    }
    const li = element("li", "memory-item");
    li.dataset.model = model;
    li.append(
      element("strong", "", model),
      element("span", "memory-meta", ` ${passed} of ${run} cases pass on their latest run`),
    );
    list.append(li);
  }
}

function renderResults(item) {
  const box = element("div", "eval-results");
  const latest = latestByModel(item.results);
  if (!latest.size) box.append(element("span", "memory-meta", "not run yet"));
  for (const [model, last] of latest) {
    const trend = item.results
      .filter((r) => r.model === model)
      .map((r) => (r.passed ? "✓" : "✗"))
      .join("");
    const line = element("p", "memory-meta");
    line.dataset.model = model;
    line.append(
      element("span", last.passed ? "badge" : "badge warn", last.passed ? "pass" : "fail"),
      element("span", "", ` ${model} · trend ${trend}`),
    );
    box.append(line);
  }
  return box;
}

function renderChecker(item) {
  const details = element("details");
  details.append(element("summary", "link", "Checker"));
  const text = element("textarea");
  text.rows = 6;
  text.spellcheck = false;
  text.value = JSON.stringify(item.checker, null, 1);
  text.setAttribute("aria-label", `Checker of ${item.title}`);
  details.append(text);
  if (item.source !== "shipped") {
    details.append(
      button("Save checker", () =>
        actThenReload(async () => {
          let checker;
          try {
            checker = JSON.parse(text.value);
          } catch {
            throw new Error("the checker is not valid JSON");
          }
          await request("PATCH", `/v1/evals/cases/${encodeURIComponent(item.id)}`, { checker });
        }, load),
      ),
    );
  }
  return details;
}

function renderCase(item) {
  const li = element("li", "memory-item");
  li.dataset.id = item.id;
  li.dataset.status = item.status;
  const head = element("p");
  head.append(
    element("strong", "", item.title),
    element("span", "memory-meta", ` · ${SOURCE_WORDS[item.source] ?? item.source}`),
    element("span", item.status === "draft" ? "badge warn" : "badge", item.status),
  );
  li.append(head);
  if (item.owner_words) li.append(element("p", "hint", `Should: ${item.owner_words}`));
  if (item.failed_reply) li.append(element("p", "hint", `Did: ${item.failed_reply}`));
  li.append(renderResults(item), renderChecker(item));
  if (item.source !== "shipped") {
    const actions = element("p");
    for (const [label, status] of [["Keep", "kept"], ["Drop", "dropped"]]) {
      if (item.status === status) continue;
      actions.append(
        button(label, () =>
          actThenReload(
            () => request("PATCH", `/v1/evals/cases/${encodeURIComponent(item.id)}`, { status }),
            load,
          ),
        ),
        " ",
      );
    }
    li.append(actions);
  }
  return li;
}

async function load() {
  const status = $("filter").value;
  const query = status ? `?status=${status}` : "";
  try {
    const { body } = await request("GET", `/v1/evals/cases${query}`);
    renderModels(body.cases, body.models);
    $("cases").replaceChildren(...body.cases.map(renderCase));
  } catch (error) {
    showProblem(error);
  }
}

$("filter").addEventListener("change", load);
load();
