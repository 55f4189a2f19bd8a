// Change notifications (SSE over fetch, so the token travels in a header, not the URL).
// A notification says only where something changed; the app fetches what is new. The stream
// reconnects by itself with backoff, and every (re)connection starts with a catch-up, so a
// notification lost while offline or during a server restart loses nothing.

import { Unauthorized, authHeaders } from "./api.js";

const DELAYS_MS = [250, 500, 1000, 2000, 4000, 5000];
const SILENCE_MS = 45000; // the server says something every 15 s; silence means a dead link

export class ChangeStream {
  constructor({ onOpen, onChange, onStatus, onUnauthorized }) {
    this.onOpen = onOpen;
    this.onChange = onChange;
    this.onStatus = onStatus;
    this.onUnauthorized = onUnauthorized;
    this.controller = null;
    this.stopped = false;
    this.wakeUp = null;
  }

  start() {
    this.stopped = false;
    this.loop();
  }

  stop() {
    this.stopped = true;
    this.controller?.abort();
    this.wakeUp?.();
  }

  // Try again now (the browser says it is back online, or the tab became visible).
  retryNow() {
    this.wakeUp?.();
  }

  async loop() {
    let attempt = 0;
    while (!this.stopped) {
      this.onStatus(attempt === 0 ? "connecting" : "reconnecting");
      try {
        await this.connectOnce(() => {
          attempt = 0;
        });
      } catch (error) {
        if (error instanceof Unauthorized) {
          this.onUnauthorized();
          return;
        }
      }
      if (this.stopped) return;
      this.onStatus("reconnecting");
      const delay = DELAYS_MS[Math.min(attempt, DELAYS_MS.length - 1)];
      attempt += 1;
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, delay);
        this.wakeUp = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.wakeUp = null;
    }
  }

  async connectOnce(connected) {
    this.controller = new AbortController();
    const response = await fetch("/v1/events", {
      headers: { ...authHeaders(), Accept: "text/event-stream" },
      cache: "no-store",
      signal: this.controller.signal,
    });
    if (response.status === 401) throw new Unauthorized(401, "unauthorized", "token refused");
    if (!response.ok || !response.body) throw new Error(`events: ${response.status}`);
    connected();
    this.onStatus("live");
    await this.onOpen();
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let watchdog = null;
    const arm = () => {
      clearTimeout(watchdog);
      watchdog = setTimeout(() => this.controller.abort(), SILENCE_MS);
    };
    arm();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        arm();
        buffer += value.replace(/\r\n?/g, "\n");
        let end;
        while ((end = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          this.dispatch(block);
        }
      }
    } finally {
      clearTimeout(watchdog);
    }
  }

  dispatch(block) {
    let event = "message";
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "event") event = value;
      else if (field === "data") data.push(value);
    }
    if (event !== "change" || !data.length) return;
    try {
      this.onChange(JSON.parse(data.join("\n")));
    } catch (error) {
      console.warn("ignored a malformed change notification", error);
    }
  }
}
