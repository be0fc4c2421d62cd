// The operators' dashboard (console_app/dashboard.py): fetch the figures again every few seconds
// and put them in place; a failed fetch keeps the figures shown and tries again at the next tick.
(function () {
  "use strict";
  const box = document.getElementById("dashboard-figures");
  if (!box) {
    return;
  }
  const every = Math.max(5, Number(box.dataset.refresh) || 15) * 1000;
  async function refresh() {
    try {
      const answer = await fetch(box.dataset.url, { credentials: "same-origin" });
      if (answer.ok) {
        box.innerHTML = await answer.text();
        box.dataset.refreshed = String(Date.now());
      }
    } catch (error) {
      // the next tick tries again
    }
  }
  window.setInterval(refresh, every);
})();
