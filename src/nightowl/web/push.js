// Notifications on this device when the app is closed: a Web Push subscription made with the
// server's VAPID key (GET /v1/push/key) and kept on the server per device.

import { api } from "./api.js";

const SUBSCRIPTION_KEY = "nightowl.push-subscription";

function keyBytes(base64url) {
  const padded = base64url.replace(/-/g, "+").replace(/_/g, "/").padEnd(Math.ceil(base64url.length / 4) * 4, "=");
  return Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
}

function deviceName() {
  const ua = navigator.userAgent;
  const os = /Android/.test(ua) ? "Android" : /iPhone|iPad/.test(ua) ? "iOS" : /Mac/.test(ua) ? "Mac" : /Windows/.test(ua) ? "Windows" : "Linux";
  const browser = /Firefox\//.test(ua) ? "Firefox" : /Edg\//.test(ua) ? "Edge" : /Chrom/.test(ua) ? "Chrome" : /Safari\//.test(ua) ? "Safari" : "browser";
  return `${browser} on ${os}`;
}

export function pushSupported() {
  return "serviceWorker" in navigator && "PushManager" in window && "Notification" in window;
}

// off | on | denied | unsupported
export async function pushState() {
  if (!pushSupported()) return "unsupported";
  if (Notification.permission === "denied") return "denied";
  const registration = await navigator.serviceWorker.getRegistration();
  const subscription = await registration?.pushManager.getSubscription();
  return subscription && localStorage.getItem(SUBSCRIPTION_KEY) ? "on" : "off";
}

export async function enablePush() {
  if ((await Notification.requestPermission()) !== "granted") {
    throw new Error("notifications are blocked for this site in the browser's settings");
  }
  const registration = await navigator.serviceWorker.ready;
  const { public_key: key } = await api.pushKey();
  const subscription = await registration.pushManager.subscribe({
    userVisibleOnly: true,
    applicationServerKey: keyBytes(key),
  });
  const { endpoint, keys } = subscription.toJSON();
  const saved = await api.subscribe({ endpoint, p256dh: keys.p256dh, auth: keys.auth, device: deviceName() });
  localStorage.setItem(SUBSCRIPTION_KEY, saved.id);
  return saved;
}

export async function disablePush() {
  const id = localStorage.getItem(SUBSCRIPTION_KEY);
  localStorage.removeItem(SUBSCRIPTION_KEY);
  if (id) await api.unsubscribe(id).catch(() => {});
  const registration = await navigator.serviceWorker.getRegistration();
  const subscription = await registration?.pushManager.getSubscription();
  await subscription?.unsubscribe();
}

export function registerServiceWorker() {
  if (!("serviceWorker" in navigator)) return;
  navigator.serviceWorker.register("/sw.js").catch((error) => {
    console.warn("nightowl: no offline shell or push on this device:", error);
  });
}
