// raftka console: the live parts of a page (elements with an id and data-live) are replaced
// by their fresh copies every few seconds while the tab is visible, so numbers move without a
// reload and forms elsewhere on the page keep what is typed; a part that did not change is
// left alone. Nothing is fetched from elsewhere.
"use strict";
(function () {
  const REFRESH_MS = 5000;
  if (!document.querySelector("[data-live][id]")) {
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
      for (const shown of document.querySelectorAll("[data-live][id]")) {
        const fresh = page.getElementById(shown.id);
        // Only what changed is replaced: a link or text being clicked or selected in an
        // unchanged part stays as it is.
        if (fresh && fresh.outerHTML !== shown.outerHTML) {
          shown.replaceWith(document.importNode(fresh, true));
        }
      }
    } catch (error) {
      // The broker may be restarting: keep what is shown and try again later.
    }
  }
  window.setInterval(refresh, REFRESH_MS);
})();
