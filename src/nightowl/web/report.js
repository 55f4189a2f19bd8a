// The autonomy report: totals, a stacked bar plot of tokens per day by source (SVG built
// here: no inline style, no library), and a table of each day's actions and answers.

import { request } from "/app/api.js";
import { $, element, showProblem } from "/app/page.js";

const SVG = "http://www.w3.org/2000/svg";
const COLORS = {
  direct: "#4c78a8",
  routines: "#f58518",
  webhooks: "#54a24b",
  channels: "#b279a2",
  timers: "#eeca3b",
  helpers: "#72b7b2",
  background: "#9d755d",
  other: "#bab0ac",
};

function svg(tag, attributes) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  return node;
}

function seconds(value) {
  if (value === null) return "–";
  return value < 120 ? `${value.toFixed(0)} s` : `${(value / 60).toFixed(1)} min`;
}

function dollars(value) {
  return `$${value.toFixed(value < 1 ? 4 : 2)}`;
}

function renderSummary(total) {
  const a = total.actions;
  const rows = [
    ["Done without asking", a.without_asking],
    ["Held for you", a.held],
    ["Approved · denied · expired", `${a.approved} · ${a.denied} · ${a.expired}`],
    ["Median time to your answer", seconds(total.median_answer_s)],
    ["Tokens", total.tokens.toLocaleString()],
    ["Cost", dollars(total.cost_usd)],
  ];
  $("summary").replaceChildren(
    ...rows.map(([label, value]) => {
      const li = element("li", "memory-item");
      li.dataset.label = label;
      li.append(element("span", "memory-text", label), element("strong", "", String(value)));
      return li;
    }),
  );
}

function renderPlot(days) {
  const width = 640;
  const height = 200;
  const pad = 24;
  const most = Math.max(1, ...days.map((d) => d.tokens));
  const slot = (width - pad) / days.length;
  const plot = svg("svg", {
    viewBox: `0 0 ${width} ${height + pad}`,
    role: "img",
    "aria-label": `Tokens per day over ${days.length} days, at most ${most.toLocaleString()}`,
    class: "report-svg",
  });
  plot.append(svg("line", { x1: pad, y1: height, x2: width, y2: height, stroke: "currentColor" }));
  days.forEach((day, n) => {
    let top = height;
    const x = pad + n * slot + slot * 0.15;
    for (const [source, money] of Object.entries(day.by_source)) {
      if (!money.tokens) continue;
      const h = (money.tokens / most) * (height - 8);
      top -= h;
      const bar = svg("rect", {
        x,
        y: top,
        width: Math.max(1, slot * 0.7),
        height: h,
        fill: COLORS[source] ?? COLORS.other,
        "data-day": day.day,
        "data-source": source,
      });
      const title = svg("title", {});
      title.textContent = `${day.day} · ${source}: ${money.tokens.toLocaleString()} tokens`;
      bar.append(title);
      plot.append(bar);
    }
    if (days.length <= 14 || n % Math.ceil(days.length / 10) === 0) {
      const label = svg("text", { x: x, y: height + 16, "font-size": 10, fill: "currentColor" });
      label.textContent = day.day.slice(5);
      plot.append(label);
    }
  });
  $("plot").replaceChildren(plot);
  $("legend").replaceChildren(
    ...Object.keys(COLORS).map((source) => {
      const li = element("li", "report-key");
      const swatch = svg("svg", { width: 10, height: 10, "aria-hidden": "true" });
      swatch.append(svg("rect", { width: 10, height: 10, fill: COLORS[source] }));
      li.append(swatch, element("span", "", ` ${source}`));
      return li;
    }),
  );
}

function renderDays(days) {
  $("days-table").tBodies[0].replaceChildren(
    ...days
      .slice()
      .reverse()
      .map((day) => {
        const a = day.actions;
        const row = element("tr");
        row.dataset.day = day.day;
        for (const cell of [
          day.day,
          a.without_asking,
          a.held,
          a.approved,
          a.denied,
          a.expired,
          seconds(day.median_answer_s),
          day.tokens.toLocaleString(),
          dollars(day.cost_usd),
        ]) {
          row.append(element("td", "", String(cell)));
        }
        return row;
      }),
  );
}

async function load() {
  try {
    const { body } = await request("GET", `/v1/report?days=${$("days").value}`);
    renderSummary(body.total);
    renderPlot(body.days);
    renderDays(body.days);
  } catch (error) {
    showProblem(error);
  }
}

$("days").addEventListener("change", load);
load();
