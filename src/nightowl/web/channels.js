// The channels page: the owner lists, adds, tests and removes e-mail and Matrix channels.
// Text is always set with textContent: a channel's error may quote a remote server.
// A password or token goes to the vault first (PUT /v1/secrets/NAME) and the channel's
// settings only name it: the credential is never sent, stored or shown as a setting.

import { ApiError, NetworkError, Unauthorized, request } from "/app/api.js";
import { $, actThenReload, button, element, showProblem } from "/app/page.js";

const REFRESH_MS = 5000; // a listener reports its state within seconds of starting
// The server's rule for a name (api/inputs.py), checked before the vault is touched.
const NAME = /^[a-z][a-z0-9_-]{0,39}$/;
const CREDENTIALS = {
  email: { setting: "password_secret", suffix: "PASSWORD", label: "Password" },
  matrix: { setting: "access_token_secret", suffix: "TOKEN", label: "Access token" },
};
const KIND_WORDS = { email: "e-mail", matrix: "Matrix" };
const STATUS_WORDS = { new: "starting…" };

const items = new Map(); // channel name -> its list item and the parts a refresh updates
let loads = 0; // only the newest list fetch is shown (an older one may answer later)
let refreshFailed = false;

// A problem said to the owner as is: what was typed, or what a refused add left behind.
class FormProblem extends Error {}

function reason(error) {
  if (error instanceof Unauthorized) {
    return "your sign-in has expired: open nightowl again and sign in";
  }
  if (error instanceof ApiError) return error.message.replace(/\.$/, "");
  if (error instanceof NetworkError) return "the server cannot be reached; try again in a moment";
  return String(error.message ?? error);
}

// -- the list -------------------------------------------------------------------------------

function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

function report(parts, className, text) {
  parts.report.replaceChildren(element("span", className, text));
}

async function test(name, parts, testButton) {
  testButton.disabled = true;
  report(parts, "memory-meta", "Testing… (up to 30 seconds)");
  try {
    const { body } = await request("POST", `/v1/channels/${encodeURIComponent(name)}/test`);
    if (body.ok) report(parts, "", `Works: ${body.detail}`);
    else report(parts, "error-text", `Failed: ${body.detail}`);
  } catch (error) {
    report(parts, "error-text", `Failed: ${reason(error)}`);
  } finally {
    testButton.disabled = false;
  }
  await refresh();
}

// Remove asks first: the actions give way to "Remove <name>?" with Yes and Cancel.
function removeControls(name, actions) {
  const confirm = element("span", "");
  confirm.hidden = true;
  const cancel = button("Cancel", () => {
    confirm.hidden = true;
    actions.hidden = false;
    remove.focus();
  });
  const yes = button("Yes, remove", () =>
    actThenReload(async () => {
      await request("DELETE", `/v1/channels/${encodeURIComponent(name)}`);
      items.get(name)?.item.remove();
      items.delete(name);
    }, load),
  );
  confirm.append(
    element("span", "memory-meta", `Remove ${name}? Its conversations stay. `),
    yes,
    cancel,
  );
  const remove = button("Remove", () => {
    actions.hidden = true;
    confirm.hidden = false;
    cancel.focus();
  });
  return { remove, confirm };
}

function channelItem(name) {
  const item = element("li", "memory-item");
  item.dataset.name = name;
  const parts = {
    item,
    state: element("span", "memory-meta"),
    counts: element("span", "memory-meta"),
    error: element("span", "memory-body error-text"),
    report: element("div", "connector-report"),
  };
  parts.report.setAttribute("role", "status");
  parts.error.hidden = true;
  const actions = element("span", "");
  const testButton = button("Test", () => test(name, parts, testButton));
  const { remove, confirm } = removeControls(name, actions);
  actions.append(testButton, remove);
  item.append(
    element("span", "memory-text", name),
    parts.state,
    parts.counts,
    parts.error,
    actions,
    confirm,
    parts.report,
  );
  return parts;
}

function update(parts, channel) {
  const where = channel.kind === "email" ? channel.settings.address : channel.settings.user_id;
  const status = STATUS_WORDS[channel.status] ?? channel.status;
  parts.item.dataset.status = channel.status;
  setText(
    parts.state,
    [KIND_WORDS[channel.kind] ?? channel.kind, where, status].filter(Boolean).join(" · "),
  );
  const d = channel.deliveries;
  const pending = (d.pending ?? 0) + (d.sending ?? 0);
  setText(
    parts.counts,
    `deliveries: ${d.sent ?? 0} sent · ${pending} pending · ${d.failed ?? 0} failed`,
  );
  const error = channel.status === "failed" ? channel.error : "";
  setText(parts.error, error);
  parts.error.hidden = !error;
}

// Update the list in place: a refresh must not take the focus or a pending "Remove?" away.
function show(channels) {
  const list = $("channels");
  const names = new Set(channels.map((c) => c.name));
  for (const [name, parts] of items) {
    if (!names.has(name)) {
      parts.item.remove();
      items.delete(name);
    }
  }
  list.querySelector(".empty")?.remove();
  channels.forEach((channel, index) => {
    let parts = items.get(channel.name);
    if (!parts) {
      parts = channelItem(channel.name);
      items.set(channel.name, parts);
    }
    update(parts, channel);
    const here = list.children[index] ?? null;
    if (here !== parts.item) list.insertBefore(parts.item, here);
  });
  if (!channels.length) list.replaceChildren(element("li", "empty", "No channels yet."));
}

async function load() {
  const mine = ++loads;
  const { body } = await request("GET", "/v1/channels");
  if (mine === loads) show(body);
}

async function refresh() {
  if (document.hidden) return;
  try {
    await load();
    if (refreshFailed) $("problem").hidden = true;
    refreshFailed = false;
  } catch (error) {
    refreshFailed = true;
    showProblem(error);
  }
}

// -- adding ---------------------------------------------------------------------------------

const kindOf = () => $("add-kind").value;
const secretName = (name, kind) => `CHANNEL_${name.toUpperCase()}_${CREDENTIALS[kind].suffix}`;

function showSecretName() {
  $("credential-name").textContent = secretName($("add-name").value.trim() || "…", kindOf());
}

function showKind() {
  const kind = kindOf();
  for (const fieldset of document.querySelectorAll("fieldset[data-kind]")) {
    const shown = fieldset.dataset.kind === kind;
    fieldset.hidden = !shown;
    fieldset.disabled = !shown; // a hidden kind's fields are neither sent nor checked
  }
  const { label } = CREDENTIALS[kind];
  $("add-credential").setAttribute("aria-label", label);
  $("add-credential").placeholder = `${label.toLowerCase()} (kept in the vault)`;
  showSecretName();
}

function advancedSettings() {
  const text = $("add-advanced").value.trim();
  if (!text) return {};
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new FormProblem(`Advanced settings are not valid JSON: ${error.message}`);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new FormProblem('Advanced settings must be a JSON object, such as {"idle_s": 10}');
  }
  return value;
}

function fieldValue(field) {
  const label = field.getAttribute("aria-label") ?? field.dataset.setting;
  if (field.dataset.number !== undefined) {
    if (field.validity.badInput || (field.value !== "" && !Number.isInteger(field.valueAsNumber))) {
      throw new FormProblem(`${label}: give a whole number`);
    }
    return field.value === "" ? undefined : field.valueAsNumber;
  }
  const value = field.value.trim();
  if (!value) return undefined;
  if (field.dataset.setting !== "owner") return value;
  const owners = value.split(",").map((o) => o.trim()).filter(Boolean);
  return owners.length === 1 ? owners[0] : owners;
}

// The settings the form gives for the kind, numbers as numbers, the advanced JSON on top.
function settingsOf(kind) {
  const settings = {};
  for (const field of document.querySelectorAll(`#${kind}-settings [data-setting]`)) {
    const value = fieldValue(field);
    if (value !== undefined) settings[field.dataset.setting] = value;
  }
  return { ...settings, ...advancedSettings() };
}

// After a refused add, take back a secret this form made; one that was there before stays.
async function undoSecret(name, existed, label) {
  if (!existed) {
    try {
      await request("DELETE", `/v1/secrets/${name}`);
      return "Nothing was saved.";
    } catch {
      // say what stayed behind
    }
  }
  return `The ${label.toLowerCase()} was stored in the vault as ${name}; nothing else was saved.`;
}

// Store the credential, then add the channel naming it. Returns the secret's name, if any.
async function addChannel() {
  const kind = kindOf();
  const name = $("add-name").value.trim();
  const credential = $("add-credential").value;
  const { setting, label } = CREDENTIALS[kind];
  if (!NAME.test(name)) {
    throw new FormProblem(
      "Name: 1-40 lowercase letters, digits, '_' or '-', starting with a letter",
    );
  }
  const settings = settingsOf(kind);
  const { body: current } = await request("GET", "/v1/channels");
  if (current.some((c) => c.name === name)) {
    throw new FormProblem(
      `You already have a channel named ${name}: remove it first, or pick another name`,
    );
  }
  if (!credential) {
    if (setting in settings) {
      await request("POST", "/v1/channels", { name, kind, settings });
      return null;
    }
    throw new FormProblem(
      `Give the ${label.toLowerCase()}, or name a vault secret as ${setting} (advanced settings)`,
    );
  }
  if (setting in settings) {
    throw new FormProblem(`Give the ${label.toLowerCase()} or ${setting}, not both`);
  }
  const secret = secretName(name, kind);
  const { body: secrets } = await request("GET", "/v1/secrets");
  const existed = secrets.some((s) => s.name === secret);
  await request("PUT", `/v1/secrets/${secret}`, { value: credential });
  try {
    await request("POST", "/v1/channels", {
      name,
      kind,
      settings: { ...settings, [setting]: secret },
    });
  } catch (error) {
    const undone = await undoSecret(secret, existed, label);
    throw new FormProblem(`Not added: ${reason(error)}. ${undone}`);
  }
  return secret;
}

function say(id, text) {
  $("add-error").hidden = true;
  $("add-done").hidden = true;
  if (text) {
    $(id).textContent = text;
    $(id).hidden = false;
  }
}

$("add-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const addButton = $("add-button");
  const name = $("add-name").value.trim();
  const { label } = CREDENTIALS[kindOf()];
  say("add-done", "");
  addButton.disabled = true;
  try {
    const secret = await addChannel();
    $("add-form").reset();
    showKind();
    const kept = secret ? ` Its ${label.toLowerCase()} is in the vault as ${secret}.` : "";
    say("add-done", `Added ${name}: it connects within a few seconds.${kept}`);
    await refresh();
  } catch (error) {
    const text = error instanceof FormProblem ? error.message : `Not added: ${reason(error)}.`;
    say("add-error", text);
  } finally {
    addButton.disabled = false;
  }
});
$("add-kind").addEventListener("change", showKind);
$("add-name").addEventListener("input", showSecretName);

showKind();
refresh();
setInterval(refresh, REFRESH_MS);
document.addEventListener("visibilitychange", refresh);
