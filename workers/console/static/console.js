// Live incident list: the server pushes the rendered rows and counts over server-sent events
// whenever they change, so an operator never reloads. No inline script (the CSP forbids it).
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource) { return; }
  var source = new EventSource(live.dataset.stream);
  source.addEventListener("incidents", function (event) {
    var data = JSON.parse(event.data);
    if (data.error) { live.textContent = "live: " + data.error; live.className = "live stale"; return; }
    document.getElementById("incident-rows").innerHTML = data.rows;
    document.getElementById("counts").innerHTML = data.counts;
    live.textContent = "live · updated " + new Date().toLocaleTimeString();
    live.className = "live on";
  });
  // The server ends a stream whose session ended (logout, expiry): stop, do not reconnect.
  source.addEventListener("ended", function (event) {
    source.close();
    live.textContent = "live: " + JSON.parse(event.data).error;
    live.className = "live stale";
  });
  // A refused stream (401, or 429: too many open for this user) is closed for good by the browser.
  source.onerror = function () {
    live.textContent = source.readyState === EventSource.CLOSED ? "live: stopped (reload the page)"
                                                                 : "live: reconnecting…";
    live.className = "live stale";
  };
})();
