// procsched console: live updates. One event stream per page; on "change"
// the page's live parts (hx-trigger="pschange from:body") fetch themselves again,
// keeping the details the reader opened.
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
  // A live part fetched again keeps what the reader opened: its <details data-keep=...>
  // open before the swap are open after it (a run's traceback stays in view as runs come in).
  var kept = [];
  function within(e, selector) {
    var target = e.detail && e.detail.target;
    return target && target.querySelectorAll ? target.querySelectorAll(selector) : [];
  }
  document.addEventListener("htmx:beforeSwap", function (e) {
    kept = Array.prototype.map.call(within(e, "details[data-keep][open]"),
      function (d) { return d.getAttribute("data-keep"); });
  });
  document.addEventListener("htmx:afterSwap", function (e) {
    Array.prototype.forEach.call(within(e, "details[data-keep]"), function (d) {
      if (kept.indexOf(d.getAttribute("data-keep")) >= 0) { d.open = true; }
    });
  });
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
