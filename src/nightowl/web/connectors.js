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
