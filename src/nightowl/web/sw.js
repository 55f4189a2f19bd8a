// The service worker: the app shell from a cache when the server cannot be reached (the app
// opens offline and shows what it last fetched), and Web Push when the app is closed.
// Online, everything comes from the network first, so a new version arrives with the next load.

const SHELL = "nightowl-shell-v1";
const DATA = "nightowl-data-v1";
const SHELL_FILES = [
  "/",
  "/manifest.webmanifest",
  "/app/app.js",
  "/app/api.js",
  "/app/audit.js",
  "/app/helpers.js",
  "/app/inbox.js",
  "/app/markdown.js",
  "/app/outbox.js",
  "/app/push.js",
  "/app/sync.js",
  "/app/welcome.js",
  "/app/wrong.js",
  "/app/page.js",
  "/app/style.css",
  "/app/icon.svg",
  "/app/icon-192.png",
];
// What the app reads to show its lists; kept so an offline start shows what it had.
const DATA_PATHS = [/^\/v1\/conversations/, /^\/v1\/inbox$/, /^\/v1\/status$/];

self.addEventListener("install", (event) => {
  event.waitUntil(
    caches
      .open(SHELL)
      .then((cache) => cache.addAll(SHELL_FILES))
      .then(() => self.skipWaiting()),
  );
});

self.addEventListener("activate", (event) => {
  event.waitUntil(
    caches
      .keys()
      .then((names) =>
        Promise.all(names.filter((n) => n !== SHELL && n !== DATA).map((n) => caches.delete(n))),
      )
      .then(() => self.clients.claim()),
  );
});

async function networkFirst(request, cacheName, key) {
  try {
    const response = await fetch(request);
    if (response.ok) {
      const cache = await caches.open(cacheName);
      await cache.put(key, response.clone());
    }
    return response;
  } catch (error) {
    const cached = await caches.match(key);
    if (cached) return cached;
    throw error;
  }
}

self.addEventListener("fetch", (event) => {
  const { request } = event;
  const url = new URL(request.url);
  if (request.method !== "GET" || url.origin !== self.location.origin) return;
  if (request.mode === "navigate" && (url.pathname === "/" || url.pathname === "/index.html")) {
    event.respondWith(networkFirst(request, SHELL, "/"));
    return;
  }
  if (url.pathname.startsWith("/app/") || url.pathname === "/manifest.webmanifest") {
    event.respondWith(networkFirst(request, SHELL, url.pathname));
    return;
  }
  if (DATA_PATHS.some((pattern) => pattern.test(url.pathname))) {
    // Keyed by path and query only: the token travels in a header, one per device.
    event.respondWith(networkFirst(request, DATA, url.pathname + url.search));
  }
});

// A push: "nightowl needs you" and the conversation's title (the text only if the owner
// opted in); a tap opens the item.
self.addEventListener("push", (event) => {
  let data = {};
  try {
    data = event.data ? event.data.json() : {};
  } catch {
    data = { body: event.data ? event.data.text() : "" };
  }
  const title = data.title || "nightowl needs you";
  event.waitUntil(
    self.registration.showNotification(title, {
      body: data.body || "",
      tag: data.tag,
      icon: "/app/icon-192.png",
      badge: "/app/icon-192.png",
      requireInteraction: Boolean(data.urgent),
      data: { url: data.url || "/#inbox" },
    }),
  );
});

self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const target = new URL(event.notification.data?.url || "/#inbox", self.location.origin).href;
  event.waitUntil(
    self.clients.matchAll({ type: "window", includeUncontrolled: true }).then((open) => {
      for (const client of open) {
        if ("focus" in client) {
          client.navigate(target);
          return client.focus();
        }
      }
      return self.clients.openWindow(target);
    }),
  );
});

// Signing out forgets what was kept for offline use.
self.addEventListener("message", (event) => {
  if (event.data?.type === "signed-out") event.waitUntil(caches.delete(DATA));
});
