// The live part of a page (<main id="live">) is fetched again every data-refresh
// seconds, rendered by the server (escaped there), and swapped in: no reload.
(function () {
  "use strict";
  var live = document.getElementById("live");
  var mark = document.getElementById("live-mark");
  if (!live || !mark) { return; }
  var every = Math.max(250, Number(document.body.dataset.refresh || "1") * 1000);
  var busy = false;

  function stale(yes) {
    mark.textContent = yes ? "not updating" : "live";
    mark.classList.toggle("stale", yes);
  }

  function tick() {
    if (busy || document.hidden) { return; }
    var url = new URL(window.location.href);
    url.searchParams.set("fragment", "1");
    busy = true;
    fetch(url.toString(), { credentials: "same-origin", cache: "no-store",
                            headers: { "Accept": "text/x-fragment" } })
      .then(function (reply) {
        if (reply.status === 401) { window.location.reload(); return null; }
        if (!reply.ok) { throw new Error(String(reply.status)); }
        return reply.text();
      })
      .then(function (html) {
        if (html === null) { return; }
        // A traceback the reader opened stays open across the swap.
        var open = Array.prototype.map.call(
          live.querySelectorAll("details[open][id]"), function (d) { return d.id; });
        live.innerHTML = html;
        open.forEach(function (id) {
          var again = document.getElementById(id);
          if (again) { again.open = true; }
        });
        stale(false);
      })
      .catch(function () { stale(true); })
      .finally(function () { busy = false; });
  }

  window.setInterval(tick, every);
  document.addEventListener("visibilitychange", tick);
})();
