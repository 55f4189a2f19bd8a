// The first screen of an empty conversation: which model answers and whether it is ready,
// three requests to try, and where the inbox and the settings are.

const STATES = {
  loading: "getting ready…",
  ready: "ready",
  failed: "not working",
  none: "no model configured",
};

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export function renderWelcome(box, status, onExample) {
  const title = el("h3", "", "Hello — what can nightowl do for you?");
  const model = el("p", "model-line");
  const state = el("strong", "model-state", STATES[status.model_state] || status.model_state);
  state.dataset.state = status.model_state;
  model.append(`Answering: ${status.model}, `, state);
  const parts = [title, model];
  if (status.model_state !== "ready") parts.push(el("p", "model-detail", status.model_detail));
  if (status.model_fix) parts.push(el("p", "model-fix", `To fix: ${status.model_fix}`));
  parts.push(
    el(
      "p",
      "",
      "It works in the background on its own computer, remembers what matters, and asks " +
        "before anything risky. Try:",
    ),
  );
  const examples = el("div", "examples");
  for (const text of status.examples) {
    const b = el("button", "example", text);
    b.type = "button";
    b.addEventListener("click", () => onExample(text));
    examples.append(b);
  }
  parts.push(examples);
  const links = el("p", "welcome-links");
  const inbox = el("a", "link", "Inbox: what waits on you");
  inbox.href = "#inbox";
  const settings = el("a", "link", "Settings: notifications, tokens");
  settings.href = "#settings";
  links.append(inbox, settings);
  parts.push(links);
  box.replaceChildren(...parts);
  box.hidden = false;
}
