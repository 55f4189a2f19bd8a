// The audit log page: every reviewed action, decision, approval, denial and send, newest first.

import { request } from "./api.js";

function cell(text, className) {
  const td = document.createElement("td");
  if (className) td.className = className;
  td.textContent = text;
  return td;
}

export async function showAudit(table, status) {
  status.textContent = "Loading…";
  let entries;
  try {
    ({ body: entries } = await request("GET", "/v1/audit?limit=200"));
  } catch (error) {
    status.textContent = `Could not load the audit log: ${error.message}`;
    return;
  }
  const body = table.tBodies[0];
  body.replaceChildren();
  for (const entry of entries) {
    const row = document.createElement("tr");
    row.dataset.kind = entry.kind;
    row.append(
      cell(new Date(entry.at).toLocaleString()),
      cell(entry.kind.replaceAll("_", " "), `kind ${entry.decision}`),
      cell(`${entry.tool} (${entry.effect})`),
      cell(entry.reason),
      cell(entry.turn_id, "turn"),
    );
    body.append(row);
  }
  status.textContent = entries.length ? "" : "Nothing reviewed yet.";
}
