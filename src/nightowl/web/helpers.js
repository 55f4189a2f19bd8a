// The helpers of the open conversation: what each works on, how far it got, what it cost,
// and a Stop button while it works. Finished ones stay listed with how they ended.

const ACTIVE = new Set(["queued", "running"]);

function item(helper, onStop) {
  const li = document.createElement("li");
  li.className = "helper";
  li.dataset.status = helper.status;
  const name = document.createElement("strong");
  name.textContent = helper.name || "helper";
  const what = document.createElement("span");
  what.className = "helper-task";
  what.textContent = helper.task;
  what.title = helper.task;
  const state = document.createElement("span");
  state.className = "helper-state";
  const step = helper.progress ? ` · ${helper.progress}` : "";
  state.textContent = `${helper.status}${step} · $${helper.cost_usd.toFixed(2)}`;
  li.append(name, what, state);
  if (ACTIVE.has(helper.status)) {
    const stop = document.createElement("button");
    stop.type = "button";
    stop.className = "helper-stop";
    stop.textContent = "Stop";
    stop.setAttribute("aria-label", `Stop the helper ${helper.name || helper.id}`);
    stop.addEventListener("click", () => {
      stop.disabled = true;
      onStop(helper);
    });
    li.append(stop);
  }
  return li;
}

export function renderHelpers(list, helpers, onStop) {
  list.replaceChildren(...helpers.map((helper) => item(helper, onStop)));
  list.hidden = helpers.length === 0;
}
