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
  source.onerror = function () { live.textContent = "live: reconnecting…"; live.className = "live stale"; };
})();
