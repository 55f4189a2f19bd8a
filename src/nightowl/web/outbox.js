// Messages on their way to the server. Each gets its client id before the first attempt and
// keeps it for every retry, so the server stores it once however often it is sent. The
// outbox lives in localStorage: a reload or a crashed tab does not lose an unsent message.

const KEY = "nightowl.outbox.v1";

function load() {
  try {
    const items = JSON.parse(localStorage.getItem(KEY) || "[]");
    return Array.isArray(items) ? items : [];
  } catch {
    return [];
  }
}

export class Outbox {
  constructor() {
    this.items = load();
  }

  save() {
    // `inFlight` belongs to this page only: after a reload nothing is in flight.
    const replacer = (key, value) => (key === "inFlight" ? undefined : value);
    localStorage.setItem(KEY, JSON.stringify(this.items, replacer));
  }

  add(conversationId, text) {
    const item = {
      client_id: `web-${crypto.randomUUID()}`,
      conversation_id: conversationId,
      text,
      created_at: new Date().toISOString(),
      state: "sending", // sending | retrying | failed
      attempts: 0,
      error: "",
    };
    this.items.push(item);
    this.save();
    return item;
  }

  update(item, changes) {
    Object.assign(item, changes);
    this.save();
  }

  remove(clientId) {
    this.items = this.items.filter((item) => item.client_id !== clientId);
    this.save();
  }

  find(clientId) {
    return this.items.find((item) => item.client_id === clientId);
  }

  of(conversationId) {
    return this.items.filter((item) => item.conversation_id === conversationId);
  }
}
