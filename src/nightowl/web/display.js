// The live view of an agent's desktop (/display#agent=<conversation id>): noVNC over the
// server's websocket, whose first message is the access token. The owner watches; "Take
// control" lets them type and click (the agent's input waits) until they give it back.

import RFB from "/novnc/core/rfb.js";
import { token } from "/app/api.js";

const $ = (id) => document.getElementById(id);
const agent = new URLSearchParams(window.location.hash.slice(1)).get("agent") || "";
const base = `/v1/displays/${encodeURIComponent(agent)}`;
const state = { rfb: null, control: false, retry: null, busy: false };

function status(text) {
  $("status").textContent = text;
}

function problem(text = "") {
  $("problem").textContent = text;
  $("problem").hidden = !text;
}

async function call(method, path) {
  const response = await fetch(path, {
    method,
    cache: "no-store",
    headers: { Authorization: `Bearer ${token.get()}` },
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    throw new Error(body.error?.message || `${response.status} ${response.statusText}`);
  }
  return body;
}

function render(display) {
  state.control = display.owner_control;
  $("take").hidden = state.control;
  $("give").hidden = !state.control;
  if (state.rfb) state.rfb.viewOnly = !state.control;
  if (!state.busy) {
    status(state.control ? "You have control; the agent waits." : "Watching the agent's desktop.");
  }
}

function connect() {
  clearTimeout(state.retry);
  const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
  const socket = new WebSocket(`${scheme}//${window.location.host}${base}/vnc`, ["binary"]);
  socket.binaryType = "arraybuffer";
  socket.addEventListener("close", (event) => {
    state.rfb = null;
    if (event.code === 4401) return problem("Your access token was not accepted; sign in again.");
    if (event.code === 4404) return problem(event.reason);
    status("Reconnecting…");
    state.retry = setTimeout(connect, 2000);
  });
  socket.addEventListener("open", () => {
    socket.send(token.get() || "");
    const rfb = new RFB($("screen"), socket);
    rfb.scaleViewport = true;
    rfb.viewOnly = !state.control;
    rfb.addEventListener("connect", () => render({ owner_control: state.control }));
    state.rfb = rfb;
  });
}

async function refresh() {
  try {
    render(await call("GET", base));
  } catch (error) {
    problem(error.message);
  }
}

async function change(method, doing, failed) {
  state.busy = true;
  problem();
  status(doing);
  try {
    const display = await call(method, `${base}/control`);
    state.busy = false;
    render(display);
    if (display.owner_control) state.rfb?.focus();
  } catch (error) {
    state.busy = false;
    status(failed);
    problem(error.message);
  }
}

function setUp() {
  const screen = $("screen");
  screen.style.height = "calc(100vh - 4rem)";
  screen.style.background = "#000";
  if (!token.get()) return problem("Open the app and sign in first.");
  if (!agent) return problem("Open this page from a conversation.");
  $("take").addEventListener("click", () =>
    change("POST", "Taking control…", "Could not take control."),
  );
  $("give").addEventListener("click", () =>
    change("DELETE", "Giving control back…", "Could not give control back."),
  );
  refresh().then(connect);
  setInterval(refresh, 5000); // the owner's control lapses on the server after a while
}

setUp();
