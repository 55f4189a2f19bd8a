// The HTTP API with the bearer token. Network failures and server refusals are told apart:
// the first is worth retrying, the second carries the server's explanation.

const TOKEN_KEY = "nightowl.token";

export class NetworkError extends Error {}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
  get retryable() {
    return this.status >= 500 || this.status === 429;
  }
}

export class Unauthorized extends ApiError {}

export const token = {
  get: () => localStorage.getItem(TOKEN_KEY),
  set: (value) => localStorage.setItem(TOKEN_KEY, value),
  clear: () => localStorage.removeItem(TOKEN_KEY),
};

export function authHeaders() {
  return { Authorization: `Bearer ${token.get()}` };
}

async function failure(response) {
  let code = "http_error";
  let message = `${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    code = body.error?.code ?? code;
    message = body.error?.message ?? message;
  } catch {
    // not our error shape (a proxy's page, say): keep the status line
  }
  const Kind = response.status === 401 ? Unauthorized : ApiError;
  return new Kind(response.status, code, message);
}

export async function request(method, path, body, { signal } = {}) {
  let response;
  try {
    response = await fetch(path, {
      method,
      signal,
      cache: "no-store",
      headers: {
        ...authHeaders(),
        ...(body === undefined ? {} : { "Content-Type": "application/json" }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new NetworkError(error.message || "network error");
  }
  if (!response.ok) throw await failure(response);
  // A 204 (a delete, say) has no body to read.
  return { status: response.status, body: response.status === 204 ? null : await response.json() };
}

export const api = {
  conversations: () => request("GET", "/v1/conversations").then((r) => r.body),
  conversation: (id) => request("GET", `/v1/conversations/${id}`).then((r) => r.body),
  helpers: (id) => request("GET", `/v1/conversations/${id}/helpers`).then((r) => r.body),
  stopHelper: (id, helperId) =>
    request("POST", `/v1/conversations/${id}/helpers/${helperId}/stop`).then((r) => r.body),
  startConversation: () =>
    request("POST", "/v1/conversations", { kind: "direct" }).then((r) => r.body),
  messagesAfter: (id, after) =>
    request("GET", `/v1/conversations/${id}/messages?after=${after}`).then((r) => r.body),
  send: (id, clientId, text) =>
    request("POST", `/v1/conversations/${id}/messages`, { client_id: clientId, text }),
  answer: (id, messageId, answer) =>
    request("POST", `/v1/conversations/${id}/messages/${messageId}/answer`, answer),
  typing: (id) => request("POST", `/v1/conversations/${id}/typing`).then((r) => r.body),
  inbox: () => request("GET", "/v1/inbox").then((r) => r.body),
  status: () => request("GET", "/v1/status").then((r) => r.body),
  pushKey: () => request("GET", "/v1/push/key").then((r) => r.body),
  subscribe: (body) => request("POST", "/v1/push/subscriptions", body).then((r) => r.body),
  unsubscribe: (id) => request("DELETE", `/v1/push/subscriptions/${id}`),
  devices: () => request("GET", "/v1/push/subscriptions").then((r) => r.body),
  pushSettings: () => request("GET", "/v1/push/settings").then((r) => r.body),
  savePushSettings: (body) => request("PUT", "/v1/push/settings", body).then((r) => r.body),
  markRead: (id, seq) =>
    request("POST", `/v1/conversations/${id}/read`, { seq }).then((r) => r.body),
};

// A file of a message, fetched with the token (an <img src> or a plain link could not send it).
export async function fetchFile(url) {
  let response;
  try {
    response = await fetch(url, { headers: authHeaders() });
  } catch (error) {
    throw new NetworkError(error.message || "network error");
  }
  if (!response.ok) throw await failure(response);
  return response.blob();
}
