// "Wrong?" under each of the agent's messages: the owner says what should have happened and
// the server keeps the conversation up to that turn as a draft eval case (secrets redacted).
// The cases are on the Evals page (/evals), where the owner edits a case's checker and keeps it.

import { ApiError, NetworkError, request } from "/app/api.js";
import { element } from "/app/page.js";

export function renderWrong(message) {
  const box = element("details", "wrong");
  box.append(element("summary", "link", "Wrong?"));
  const form = element("form", "wrong-form");
  const expected = element("textarea");
  expected.rows = 2;
  expected.maxLength = 4000;
  expected.placeholder = "What should have happened?";
  expected.setAttribute("aria-label", "What should have happened?");
  const send = element("button", "secondary", "Make it an eval case");
  send.type = "submit";
  const status = element("p", "hint");
  status.setAttribute("role", "status");
  form.append(expected, send, status);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!expected.value.trim()) {
      status.textContent = "Say what should have happened first.";
      return;
    }
    send.disabled = true;
    status.textContent = "Saving…";
    const path =
      `/v1/conversations/${encodeURIComponent(message.conversation_id)}` +
      `/messages/${encodeURIComponent(message.id)}/wrong`;
    try {
      const { body } = await request("POST", path, { expected: expected.value });
      status.textContent = `Saved as a draft eval case (${body.id}); see Evals.`;
    } catch (error) {
      send.disabled = false;
      if (error instanceof NetworkError) status.textContent = "The server cannot be reached.";
      else status.textContent = error instanceof ApiError ? error.message : String(error);
    }
  });
  box.append(form);
  return box;
}
