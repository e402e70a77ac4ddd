/* The book's page script (book/_ext/ldf_book.py adds it to every page).
 *
 * 1. Scroll affordance: a code block, output, table or equation wider than its column scrolls
 *    sideways inside its own box; this marks such a box (class "ldf-scrolls") so ldf.css shades
 *    the edge where more content is hidden, and keeps the mark right as the reader scrolls or
 *    resizes.  tests/test_browser.py fails on content wider than its column without this mark.
 * 2. Search from file://: Sphinx fetches each result page to show an excerpt, which a browser
 *    refuses for file:// URLs (one "Failed to fetch" error per result).  Opened from disk, the
 *    search lists the matching pages without excerpts and says why.
 */
(function () {
  "use strict";
  var fromFile = window.location.protocol === "file:";
  if (fromFile && typeof DOCUMENTATION_OPTIONS !== "undefined") {
    DOCUMENTATION_OPTIONS.SHOW_SEARCH_SUMMARY = false;
  }
  var BOXES = [
    "div.highlight > pre", ".cell_output pre", ".cell_output .output.text_html",
    ".cell_output .output.text_plain", "div.math", ".pst-scrollable-table-container",
    ".table-wrapper", ".cell_output .ldf-calc-card", "mjx-container"
  ].join(", ");

  function mark(box) {
    var over = box.scrollWidth > box.clientWidth + 1;
    box.classList.toggle("ldf-scrolls", over);
    if (over) {
      var atStart = box.scrollLeft <= 1;
      var atEnd = box.scrollLeft + box.clientWidth >= box.scrollWidth - 1;
      box.setAttribute("data-ldf-more", atStart ? "right" : atEnd ? "left" : "both");
      if (!box.hasAttribute("tabindex")) { box.setAttribute("tabindex", "0"); }  // keyboard scroll
    } else {
      box.removeAttribute("data-ldf-more");
    }
  }
  function markWideInlineMath() {
    document.querySelectorAll("span.math > mjx-container:not([display])").forEach(function (m) {
      var line = m.closest("p, li, dd, td, th, div") || m.parentElement;
      var wide = m.getBoundingClientRect().width > line.getBoundingClientRect().width;
      if (wide) { m.classList.add("ldf-wide-inline"); }
    });
  }
  function markAll() {
    markWideInlineMath();
    document.querySelectorAll(BOXES).forEach(mark);
    document.documentElement.setAttribute("data-ldf-scroll-marked", "1");
  }
  function ready(fn) {
    if (document.readyState !== "loading") { fn(); } else { document.addEventListener("DOMContentLoaded", fn); }
  }
  ready(function () {
    markAll();
    document.addEventListener("scroll", function (e) {
      if (e.target && e.target.classList && e.target.classList.contains("ldf-scrolls")) { mark(e.target); }
    }, true);
    var t = null;
    window.addEventListener("resize", function () { clearTimeout(t); t = setTimeout(markAll, 100); });
    window.addEventListener("load", markAll);           // after images and calculators
    if (window.ResizeObserver) {                        // calculators render after load
      var ro = new ResizeObserver(function () { clearTimeout(t); t = setTimeout(markAll, 100); });
      var main = document.querySelector("#main-content, .bd-article");
      if (main) { ro.observe(main); }
    }
    if (fromFile && document.getElementById("search-results")) {
      var note = document.createElement("p");
      note.className = "ldf-file-search-note";
      note.textContent = "Opened from a file: results list the matching pages without excerpts " +
        "(browsers do not let a page read other files from disk). Serve the folder over http, " +
        "e.g. python -m http.server, for excerpts.";
      var h = document.querySelector("#search-results") ;
      h.parentNode.insertBefore(note, h);
    }
  });
})();
