// The channels page: the owner lists, adds, tests and removes e-mail, Matrix, Slack and
// Telegram channels. Text is always set with textContent: a channel's error may quote a remote
// server. Each password or token goes to the vault first (PUT /v1/secrets/NAME) and the
// channel's settings only name it: a credential is never sent, stored or shown as a setting.

import { ApiError, NetworkError, Unauthorized, request } from "/app/api.js";
import { $, actThenReload, button, element, showProblem } from "/app/page.js";

const REFRESH_MS = 5000; // a listener reports its state within seconds of starting
// The server's rule for a name (api/inputs.py), checked before the vault is touched.
const NAME = /^[a-z][a-z0-9_-]{0,39}$/;
// Each kind's credentials: the setting that names the vault secret, the secret's suffix
// (CHANNEL_<NAME>_<SUFFIX>), and the modes it is asked for in (none: always). Each one asked
// for is needed, typed here or named in the advanced JSON.
const CREDENTIALS = {
  email: [{ setting: "password_secret", suffix: "PASSWORD", label: "Password" }],
  matrix: [{ setting: "access_token_secret", suffix: "TOKEN", label: "Access token" }],
  slack: [
    {
      setting: "bot_token_secret",
      suffix: "BOT_TOKEN",
      label: "Bot token",
      placeholder: "bot token (xoxb-…)",
    },
    {
      setting: "app_token_secret",
      suffix: "APP_TOKEN",
      label: "App-level token",
      placeholder: "app-level token (xapp-…)",
      modes: ["socket", "both"],
    },
    {
      setting: "signing_secret_secret",
      suffix: "SIGNING_SECRET",
      label: "Signing secret",
      placeholder: "signing secret",
      modes: ["http", "both"],
    },
  ],
  telegram: [
    {
      setting: "bot_token_secret",
      suffix: "BOT_TOKEN",
      label: "Bot token",
      placeholder: "bot token (from @BotFather)",
    },
    {
      setting: "webhook_secret_secret",
      suffix: "WEBHOOK_SECRET",
      label: "Webhook secret token",
      placeholder: "secret token (you choose it)",
      modes: ["webhook"],
      // Telegram's rule for setWebhook's secret_token
      pattern: /^[A-Za-z0-9_-]{1,256}$/,
      rule: "1-256 letters, digits, '_' or '-'",
    },
  ],
};
const KIND_WORDS = { email: "e-mail", matrix: "Matrix", slack: "Slack", telegram: "Telegram" };
const TELEGRAM_MODES = { polling: "long polling", webhook: "webhook" };
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
    ingress: element("span", "memory-meta channel-url"),
    error: element("span", "memory-body error-text"),
    report: element("div", "connector-report"),
  };
  parts.report.setAttribute("role", "status");
  parts.ingress.hidden = true;
  parts.error.hidden = true;
  const actions = element("span", "");
  const testButton = button("Test", () => test(name, parts, testButton));
  const { remove, confirm } = removeControls(name, actions);
  actions.append(testButton, remove);
  item.append(
    element("span", "memory-text", name),
    parts.state,
    parts.counts,
    parts.ingress,
    parts.error,
    actions,
    confirm,
    parts.report,
  );
  return parts;
}

const owners = (owner) => (Array.isArray(owner) ? owner.join(", ") : owner);

// What tells the channel apart in the list: its address or account, or its owner and mode.
function where(channel) {
  const s = channel.settings;
  switch (channel.kind) {
    case "email":
      return [s.address];
    case "matrix":
      return [s.user_id];
    case "slack": {
      const ways = [s.app_token_secret && "Socket Mode", s.signing_secret_secret && "Events API"];
      return [s.owner && `owner ${owners(s.owner)}`, ways.filter(Boolean).join(" + ")];
    }
    case "telegram": {
      const mode = s.mode || "polling";
      return [s.owner && `owner ${s.owner}`, TELEGRAM_MODES[mode] ?? mode, s.alerts && "alerts"];
    }
    default:
      return [];
  }
}

// The URL the service pushes events to, where the channel takes them over HTTP.
function ingressNote(channel) {
  const s = channel.settings;
  if (!channel.ingress_url) return "";
  if (channel.kind === "slack" && s.signing_secret_secret) {
    return `Request URL for Slack (Event Subscriptions, Interactivity): ${channel.ingress_url}`;
  }
  if (channel.kind === "telegram" && s.mode === "webhook") {
    return `Webhook URL for Telegram (setWebhook, with the secret token): ${channel.ingress_url}`;
  }
  return "";
}

function update(parts, channel) {
  const status = STATUS_WORDS[channel.status] ?? channel.status;
  parts.item.dataset.status = channel.status;
  setText(
    parts.state,
    [KIND_WORDS[channel.kind] ?? channel.kind, ...where(channel), status]
      .filter(Boolean)
      .join(" · "),
  );
  const ingress = ingressNote(channel);
  setText(parts.ingress, ingress);
  parts.ingress.hidden = !ingress;
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
const lower = (label) => label.toLowerCase();
const secretName = (name, credential) => `CHANNEL_${name.toUpperCase()}_${credential.suffix}`;
// The shown kind's mode (Slack: how events come; Telegram: polling or webhook), if it has one.
const modeOf = (kind) => document.querySelector(`#${kind}-settings [data-mode]`)?.value ?? "";
const asked = (credential, mode) => !credential.modes || credential.modes.includes(mode);

let credentialFields = []; // the shown kind's: { credential, input, name (its <code>), row }

function showSecretNames() {
  const name = $("add-name").value.trim() || "…";
  for (const field of credentialFields) field.name.textContent = secretName(name, field.credential);
}

// One password field per credential of the kind, each saying the vault name it will have.
// The first keeps the page's original ids (add-credential, credential-name).
function showCredentials(kind) {
  credentialFields = CREDENTIALS[kind].map((credential, index) => {
    const id = index ? `-${index + 1}` : "";
    const input = element("input");
    Object.assign(input, {
      id: `add-credential${id}`,
      type: "password",
      autocomplete: "new-password",
      spellcheck: false,
      placeholder: credential.placeholder ?? `${lower(credential.label)} (kept in the vault)`,
    });
    input.setAttribute("aria-label", credential.label);
    input.setAttribute("aria-describedby", `credential-hint${id}`);
    const name = element("code", "");
    name.id = `credential-name${id}`;
    const hint = element("p", "hint", `${credential.label}: kept in the vault as `);
    hint.id = `credential-hint${id}`;
    hint.append(name, `; the channel's settings only name it (${credential.setting}).`);
    const box = element("div", "memory-add");
    box.append(input);
    const row = element("div", "channel-credential");
    row.dataset.setting = credential.setting;
    row.append(box, hint);
    return { credential, input, name, row };
  });
  $("credentials").replaceChildren(...credentialFields.map((field) => field.row));
  showSecretNames();
}

// Show (and enable) what the chosen mode asks for; hide and disable the rest.
function showMode() {
  const kind = kindOf();
  const mode = modeOf(kind);
  for (const node of document.querySelectorAll(`#${kind}-settings [data-modes]`)) {
    const shown = node.dataset.modes.split(" ").includes(mode);
    node.hidden = !shown;
    if ("disabled" in node) node.disabled = !shown; // neither sent nor checked
  }
  for (const { credential, input, row } of credentialFields) {
    row.hidden = !asked(credential, mode);
    input.disabled = row.hidden;
  }
}

function showKind() {
  const kind = kindOf();
  for (const fieldset of document.querySelectorAll("fieldset[data-kind]")) {
    const shown = fieldset.dataset.kind === kind;
    fieldset.hidden = !shown;
    fieldset.disabled = !shown; // a hidden kind's fields are neither sent nor checked
  }
  showCredentials(kind);
  showMode();
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
  if (field.dataset.flag !== undefined) return field.checked;
  if (field.dataset.number !== undefined) {
    if (field.validity.badInput || (field.value !== "" && !Number.isInteger(field.valueAsNumber))) {
      throw new FormProblem(`${label}: give a whole number`);
    }
    return field.value === "" ? undefined : field.valueAsNumber;
  }
  const value = field.value.trim();
  if (!value) return undefined;
  if (field.dataset.list === undefined) return value;
  const listed = value.split(",").map((o) => o.trim()).filter(Boolean);
  return listed.length === 1 ? listed[0] : listed;
}

// The settings the form gives for the kind, numbers as numbers, flags as true or false, the
// advanced JSON on top. A field the chosen mode does not ask for is left out.
function settingsOf(kind) {
  const settings = {};
  for (const field of document.querySelectorAll(`#${kind}-settings [data-setting]`)) {
    if (field.matches(":disabled")) continue;
    const value = fieldValue(field);
    if (value !== undefined) settings[field.dataset.setting] = value;
  }
  return { ...settings, ...advancedSettings() };
}

// The credentials typed for the kind's mode, each with its vault name. One asked for and
// neither typed nor named in the advanced JSON is a problem of the form.
function credentialsOf(kind, name, settings) {
  const mode = modeOf(kind);
  const given = [];
  for (const { credential, input } of credentialFields) {
    if (!asked(credential, mode)) continue;
    const { setting, label } = credential;
    const value = input.value;
    if (!value) {
      if (setting in settings) continue;
      throw new FormProblem(
        `Give the ${lower(label)}, or name a vault secret as ${setting} (advanced settings)`,
      );
    }
    if (setting in settings) {
      throw new FormProblem(`Give the ${lower(label)} or ${setting}, not both`);
    }
    if (credential.pattern && !credential.pattern.test(value)) {
      throw new FormProblem(`${label}: ${credential.rule}`);
    }
    given.push({ ...credential, value, secret: secretName(name, credential) });
  }
  return given;
}

// After a refused add, take back a secret this form made; one that was there before stays.
// Returns what stayed in the vault, or "" when the secret is gone again.
async function undoSecret(name, existed, label) {
  if (!existed) {
    try {
      await request("DELETE", `/v1/secrets/${name}`);
      return "";
    } catch {
      return `The ${lower(label)} is still in the vault as ${name} (deleting it failed).`;
    }
  }
  return (
    `The ${lower(label)} was stored in the vault as ${name} (a secret of that name was there ` +
    "before: it keeps the new value)."
  );
}

async function undoSecrets(made, existing) {
  const kept = [];
  for (const { secret, label } of made) {
    const stayed = await undoSecret(secret, existing.has(secret), label);
    if (stayed) kept.push(stayed);
  }
  return kept.length ? `${kept.join(" ")} Nothing else was saved.` : "Nothing was saved.";
}

// Store the credentials, then add the channel naming them. Returns the credentials stored
// (with their vault names) and the channel as the server made it.
async function addChannel() {
  const kind = kindOf();
  const name = $("add-name").value.trim();
  if (!NAME.test(name)) {
    throw new FormProblem(
      "Name: 1-40 lowercase letters, digits, '_' or '-', starting with a letter",
    );
  }
  const settings = settingsOf(kind);
  const given = credentialsOf(kind, name, settings);
  const { body: current } = await request("GET", "/v1/channels");
  if (current.some((c) => c.name === name)) {
    throw new FormProblem(
      `You already have a channel named ${name}: remove it first, or pick another name`,
    );
  }
  if (!given.length) {
    const { body: channel } = await request("POST", "/v1/channels", { name, kind, settings });
    return { given, channel };
  }
  const { body: secrets } = await request("GET", "/v1/secrets");
  const existing = new Set(secrets.map((s) => s.name));
  const made = []; // stored in this attempt: taken back if the channel is not added
  try {
    for (const credential of given) {
      await request("PUT", `/v1/secrets/${credential.secret}`, { value: credential.value });
      made.push(credential);
    }
    const named = Object.fromEntries(given.map((c) => [c.setting, c.secret]));
    const { body: channel } = await request("POST", "/v1/channels", {
      name,
      kind,
      settings: { ...settings, ...named },
    });
    return { given, channel };
  } catch (error) {
    const undone = await undoSecrets(made, existing);
    throw new FormProblem(`Not added: ${reason(error)}. ${undone}`);
  }
}

// "Its password is in the vault as A." / "Its bot token is in the vault as A, its … as B."
function keptWords(given) {
  if (!given.length) return "";
  const [first, ...rest] = given;
  const others = rest.map((c) => `, its ${lower(c.label)} as ${c.secret}`).join("");
  return ` Its ${lower(first.label)} is in the vault as ${first.secret}${others}.`;
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
  say("add-done", "");
  addButton.disabled = true;
  try {
    const { given, channel } = await addChannel();
    $("add-form").reset();
    showKind();
    const ingress = ingressNote(channel);
    say(
      "add-done",
      `Added ${name}: it connects within a few seconds.${keptWords(given)}` +
        (ingress ? ` ${ingress}` : ""),
    );
    await refresh();
  } catch (error) {
    const text = error instanceof FormProblem ? error.message : `Not added: ${reason(error)}.`;
    say("add-error", text);
  } finally {
    addButton.disabled = false;
  }
});
$("add-kind").addEventListener("change", showKind);
for (const select of document.querySelectorAll("[data-mode]")) {
  select.addEventListener("change", showMode);
}
$("add-name").addEventListener("input", showSecretNames);

showKind();
refresh();
setInterval(refresh, REFRESH_MS);
document.addEventListener("visibilitychange", refresh);
