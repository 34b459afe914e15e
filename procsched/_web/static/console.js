// procsched console: live updates. One event stream per page; on "change"
// the page's live parts (hx-trigger="pschange from:body") fetch themselves again.
(function () {
  "use strict";
  var dot = null;
  function live(on) {
    dot = dot || document.getElementById("live");
    if (dot) { dot.className = on ? "live on" : "live off"; }
  }
  function start() {
    if (!window.EventSource || !document.getElementById("live")) { return; }
    var source = new EventSource("/events");
    source.addEventListener("hello", function () { live(true); });
    source.addEventListener("change", function () {
      live(true);
      if (window.htmx) { window.htmx.trigger(document.body, "pschange"); }
    });
    source.onerror = function () { live(false); };
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
