// The lab page keeps itself current: every two seconds it asks bootd for the lab's part of the
// page, rendered by the server (the same template as the first load), and puts it in place. No
// build step, no library: bootd serves this file as it is.
"use strict";
(function () {
  const every = 2000;
  const lab = document.getElementById("lab");
  const live = document.getElementById("live");
  const updated = document.getElementById("updated");
  let failingSince = null;

  async function refresh() {
    try {
      const resp = await fetch("/?part=lab", { cache: "no-store" });
      if (!resp.ok) throw new Error("HTTP " + resp.status);
      const html = await resp.text();
      lab.innerHTML = html; // bootd's html/template output: escaped there
      const now = new Date();
      updated.textContent = now.toLocaleTimeString();
      updated.dateTime = now.toISOString();
      live.dataset.state = "live";
      live.firstChild.textContent = "live: updated ";
      failingSince = null;
    } catch (e) {
      failingSince = failingSince || new Date();
      live.dataset.state = "stale";
      live.firstChild.textContent = "bootd not answering since " + failingSince.toLocaleTimeString() + " (" + e.message + "); last update ";
    } finally {
      setTimeout(refresh, every);
    }
  }
  setTimeout(refresh, every);
})();
