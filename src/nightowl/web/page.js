// What the app's separate pages (memory, connectors) share: building elements (text always
// through textContent: what they show may quote outside text) and saying what went wrong.

import { ApiError, NetworkError, Unauthorized } from "/app/api.js";

export const $ = (id) => document.getElementById(id);

export function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

export function button(label, onClick, className = "link") {
  const node = element("button", className, label);
  node.type = "button";
  node.addEventListener("click", onClick);
  return node;
}

export function showProblem(error) {
  const problem = $("problem");
  if (error instanceof Unauthorized) {
    problem.textContent = "Your sign-in has expired: open nightowl again and sign in.";
  } else if (error instanceof NetworkError) {
    problem.textContent = "The server cannot be reached; try again in a moment.";
  } else {
    problem.textContent = error instanceof ApiError ? error.message : String(error);
  }
  problem.hidden = false;
}

// Run `work`, then `reload` the page's lists; a failure of either is shown, not thrown.
export async function actThenReload(work, reload) {
  $("problem").hidden = true;
  try {
    await work();
    await reload();
  } catch (error) {
    showProblem(error);
  }
}
