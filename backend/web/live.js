// fleetdeck web view: the page's live part, replaced at each poll from the same-origin event
// stream named by its data-events attribute. The server escaped every host string in it.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live || !window.EventSource) {
    return;
  }
  var source = new EventSource(live.getAttribute("data-events"));
  source.onmessage = function (event) {
    var open = {};
    live.querySelectorAll("details[open]").forEach(function (d, i) { open[i] = true; });
    live.innerHTML = event.data;
    live.querySelectorAll("details").forEach(function (d, i) { if (open[i]) { d.open = true; } });
  };
})();
