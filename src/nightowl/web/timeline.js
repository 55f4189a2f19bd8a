// A turn's timeline (/timeline#c=<conversation id>&t=<turn id>): why the agent did what it
// did. Text is set with textContent only: a model name or a safety reason can quote outside
// text.

import { request } from "/app/api.js";
import { $, element, showProblem } from "/app/page.js";

const KIND_WORDS = { model_call: "model call", tool_run: "tool", safety: "safety" };

function time(iso) {
  return new Date(iso).toLocaleTimeString([], {
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    fractionalSecondDigits: 3,
    hour12: false,
  });
}

function duration(ms) {
  if (ms === null || ms === undefined) return "—";
  return ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`;
}

function details(step) {
  const d = step.detail;
  if (step.kind === "model_call") {
    const parts = [
      d.purpose,
      `${d.input_tokens + d.cache_read_tokens + d.cache_write_tokens} in`,
      `${d.cache_read_tokens} cached`,
      `${d.output_tokens} out`,
      d.cost_usd === null ? "no price" : `$${d.cost_usd.toFixed(4)}`,
    ];
    if (d.cache_break) parts.push(`cache broke at ${d.cache_break}`);
    if (d.error) parts.push(`failed: ${d.error}`);
    return parts.join(" · ");
  }
  if (step.kind === "tool_run") return `${d.effect} · ${d.outcome}`;
  return `${d.event}: ${d.decision}${d.reason ? ` — ${d.reason}` : ""}`;
}

function row(step) {
  const tr = element("tr", `step ${step.kind}`);
  tr.append(
    element("td", "", time(step.at)),
    element("td", `kind ${step.kind === "safety" ? step.detail.decision : ""}`, KIND_WORDS[step.kind]),
    element("td", "", step.name),
    element("td", "", duration(step.duration_ms)),
    element("td", "", details(step)),
  );
  return tr;
}

function summary(timeline) {
  const t = timeline.totals;
  const woken = timeline.woken_by.map((w) => w.source).join(", ") || "—";
  const cost = `$${t.cost_usd.toFixed(4)}`;
  return (
    `Woken by ${woken}; ${timeline.status}` +
    `${timeline.error ? ` (${timeline.error})` : ""}; ` +
    `${t.agent_model_calls} model calls (${t.model_calls} with reviews and memory), ` +
    `${t.tool_runs} tool runs; ` +
    `${t.input_tokens + t.cache_read_tokens} tokens in (${t.cache_read_tokens} cached), ` +
    `${t.output_tokens} out; ${cost}; ${duration(t.duration_ms)} in all.`
  );
}

async function load() {
  const args = new URLSearchParams(window.location.hash.slice(1));
  const conversation = args.get("c") || "";
  const turn = args.get("t") || "";
  if (!conversation || !turn) {
    showProblem(new Error("Open this page from a reply's “How was this made?” link."));
    return;
  }
  try {
    const path =
      `/v1/conversations/${encodeURIComponent(conversation)}` +
      `/turns/${encodeURIComponent(turn)}/timeline`;
    const { body: timeline } = await request("GET", path);
    $("summary").textContent = summary(timeline);
    $("steps").tBodies[0].replaceChildren(...timeline.steps.map(row));
    $("steps").hidden = false;
  } catch (error) {
    showProblem(error);
  }
}

window.addEventListener("hashchange", load);
load();
