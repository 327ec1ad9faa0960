// raftka console: a live page (<main data-live>) replaces its content with a fresh copy
// every few seconds while the tab is visible; nothing is fetched from elsewhere.
"use strict";
(function () {
  const REFRESH_MS = 5000;
  const main = document.getElementById("content");
  if (!main || !main.dataset.live) {
    return;
  }
  async function refresh() {
    if (document.hidden) {
      return;
    }
    try {
      const response = await fetch(window.location.href, { cache: "no-store" });
      if (!response.ok) {
        return;
      }
      const page = new DOMParser().parseFromString(await response.text(), "text/html");
      const fresh = page.getElementById("content");
      if (fresh) {
        main.replaceChildren(...fresh.childNodes);
      }
    } catch (error) {
      // The broker may be restarting: keep what is shown and try again later.
    }
  }
  window.setInterval(refresh, REFRESH_MS);
})();
