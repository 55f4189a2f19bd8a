// The connectors page: the owner lists, adds, tests, authorises and removes MCP connectors.
// Text is always set with textContent: a server's tool descriptions and errors are outside text.

import { request } from "/app/api.js";
import { $, actThenReload, button, element, showProblem } from "/app/page.js";

const reports = new Map(); // connector name -> what its last test or authorisation said

function act(work) {
  return actThenReload(work, load);
}

function reportOf(name) {
  const report = reports.get(name);
  if (!report) return null;
  const node = element("div", "connector-report");
  node.setAttribute("role", "status");
  if (report.authorize_url) {
    const link = element("a", "", "Open the service to authorise nightowl");
    link.href = report.authorize_url;
    link.target = "_blank";
    link.rel = "noopener noreferrer";
    node.append(link, element("span", "memory-meta", " then press Test."));
  } else if (report.ok) {
    node.append(
      element("span", "", `Works: ${report.tools.length} tools.`),
      element("span", "memory-meta", ` ${report.tools.map((t) => t.name).join(", ")}`),
    );
  } else {
    node.append(
      element("span", "error-text", `Failed: ${report.error}`),
      element("span", "memory-meta", ` What to do: ${report.advice}`),
    );
  }
  return node;
}

const diffs = new Map(); // connector name -> its shown diff

// What the server lists now against what the owner approved: its words are outside text,
// shown as text only.
async function showDiff(name) {
  const { body } = await request("GET", `/v1/connectors/${name}/diff`);
  const node = element("div", "connector-diff");
  node.setAttribute("aria-label", `Changes of ${name}`);
  for (const change of body) {
    const what = change.kind === "package" ? "package" : change.kind;
    node.append(
      element("strong", "", `${change.name} (${what})`),
      element("pre", "connector-diff-text", change.diff),
    );
  }
  diffs.set(name, node);
}

function connectorItem(connector) {
  const item = element("li", "memory-item");
  item.dataset.name = connector.name;
  const where = connector.transport === "stdio" ? connector.command.join(" ") : connector.url;
  item.append(
    element("span", "memory-text", connector.name),
    element(
      "span",
      "memory-meta",
      `${connector.status} · ${connector.tools.length} tools · ` +
        `${connector.trusted ? "trusted" : "untrusted output"} · ${where}`,
    ),
  );
  if (connector.description) item.append(element("span", "memory-body", connector.description));
  if (connector.error) item.append(element("span", "memory-meta", connector.error));
  const waiting = [
    ...connector.held,
    ...(connector.package_change ? ["its package"] : []),
  ];
  if (waiting.length) {
    item.append(
      element(
        "span",
        "error-text",
        `Changed since you approved it, not offered until you approve: ${waiting.join(", ")}`,
      ),
      button("Show the change", () => act(() => showDiff(connector.name))),
      button("Approve", () =>
        act(async () => {
          await request("POST", `/v1/connectors/${connector.name}/approve`, { tools: null });
          diffs.delete(connector.name);
        }),
      ),
    );
  }
  const diff = diffs.get(connector.name);
  if (diff) item.append(diff);
  item.append(
    button("Test", () =>
      act(async () => {
        const { body } = await request("POST", `/v1/connectors/${connector.name}/test`);
        reports.set(connector.name, body);
      }),
    ),
  );
  if (connector.auth === "oauth") {
    item.append(
      button("Authorise", () =>
        act(async () => {
          const { body } = await request("POST", `/v1/connectors/${connector.name}/authorize`);
          reports.set(
            connector.name,
            body.authorize_url
              ? { authorize_url: body.authorize_url }
              : { ok: true, tools: connector.tools },
          );
        }),
      ),
    );
  }
  item.append(
    button("Remove", () =>
      act(async () => {
        await request("DELETE", `/v1/connectors/${connector.name}`);
        reports.delete(connector.name);
      }),
    ),
  );
  const report = reportOf(connector.name);
  if (report) item.append(report);
  return item;
}

async function load() {
  const { body } = await request("GET", "/v1/connectors");
  const list = $("connectors");
  list.replaceChildren(
    ...(body.length ? body.map(connectorItem) : [element("li", "empty", "No connectors yet.")]),
  );
}

$("add-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const where = $("add-where").value.trim();
  const isUrl = /^https?:\/\//.test(where);
  const connector = {
    name: $("add-name").value.trim(),
    description: $("add-description").value.trim(),
    auth: $("add-oauth").checked ? "oauth" : "none",
    ...(isUrl ? { url: where } : { command: where.split(/\s+/).filter(Boolean) }),
  };
  act(async () => {
    await request("POST", "/v1/connectors", connector);
    $("add-form").reset();
  });
});

load().catch(showProblem);
