/* The book's page script (book/_ext/ldf_book.py adds it to every page).
 *
 * 1. Scroll affordance: a code block, output, table or equation wider than its column scrolls
 *    sideways inside its own box; this marks such a box (class "ldf-scrolls") so ldf.css shades
 *    the edge where more content is hidden, and keeps the mark right as the reader scrolls or
 *    resizes.  tests/test_browser.py fails on content wider than its column without this mark.
 * 2. Search from file://: Sphinx fetches each result page to show an excerpt, which a browser
 *    refuses for file:// URLs (one "Failed to fetch" error per result).  Opened from disk, the
 *    search lists the matching pages without excerpts and says why.
 * 3. Chinese search: the index of the 简体中文 edition is split into words by jieba at build
 *    time, but the browser splits a query only at spaces and punctuation, so "屋顶线" or
 *    "KV缓存" was one term the index does not hold.  splitQuery (Sphinx's hook, used by
 *    searchtools.js for every query) cuts each run of Chinese characters into the longest words
 *    the index holds (forward maximum matching against its terms and title terms).
 * 4. The language switch opens the other edition at the section the reader is looking at
 *    (section ids are the same in both editions: Sphinx gives a translated heading the id of
 *    its English source).
 * 5. Figures: tapping or clicking a figure opens it alone at its natural size (scrollable,
 *    zoomable), so its text is at least as large as on the desktop even on a phone.
 */
var splitQuery = (function () {
  "use strict";
  var CJK = /[\u3400-\u9fff\uf900-\ufaff]/;
  function terms() {
    var idx = (typeof Search !== "undefined" && Search._index) || null;
    return idx ? [idx.terms || {}, idx.titleterms || {}] : null;
  }
  function known(word, t) {
    var w = word.toLowerCase();
    return Object.prototype.hasOwnProperty.call(t[0], w) || Object.prototype.hasOwnProperty.call(t[1], w);
  }
  function segment(run, t) {   // forward maximum matching; a character no word starts with is skipped
    var out = [], i = 0;
    while (i < run.length) {
      var j = Math.min(run.length, i + 8), hit = 0;
      for (; j > i + 1; j--) { if (known(run.slice(i, j), t)) { hit = j; break; } }
      if (hit) { out.push(run.slice(i, hit)); i = hit; } else { i += 1; }
    }
    return out.length ? out : [run];
  }
  return function (query) {
    var parts = query.split(/[^\p{Letter}\p{Number}_\p{Emoji_Presentation}]+/u).filter(Boolean);
    var t = terms(), out = [];
    parts.forEach(function (p) {
      if (!CJK.test(p)) { out.push(p); return; }
      // Latin letters and digits next to Chinese ("KV缓存") are words of their own
      (p.match(/[\u3400-\u9fff\uf900-\ufaff]+|[^\u3400-\u9fff\uf900-\ufaff]+/g) || []).forEach(function (run) {
        if (!CJK.test(run) || !t) { out.push(run); return; }
        out.push.apply(out, segment(run, t));
      });
    });
    return out;
  };
})();
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
    document.documentElement.removeAttribute("data-ldf-mark-pending");
  }
  var t = null;
  function markSoon() {   // after a resize settles; the attribute lets a test wait for it
    clearTimeout(t);
    document.documentElement.setAttribute("data-ldf-mark-pending", "1");
    t = setTimeout(markAll, 100);
  }
  function ready(fn) {
    if (document.readyState !== "loading") { fn(); } else { document.addEventListener("DOMContentLoaded", fn); }
  }
  ready(function () {
    markAll();
    document.addEventListener("scroll", function (e) {
      if (e.target && e.target.classList && e.target.classList.contains("ldf-scrolls")) { mark(e.target); }
    }, true);
    window.addEventListener("resize", markSoon);
    window.addEventListener("load", markAll);           // after images and calculators
    if (window.ResizeObserver) {                        // calculators render after load
      var ro = new ResizeObserver(markSoon);
      var main = document.querySelector("#main-content, .bd-article");
      if (main) { ro.observe(main); }
    }
    // 4. the language switch keeps the section: the id of the last heading above the top
    document.querySelectorAll("a.ldf-language").forEach(function (a) {
      a.addEventListener("click", function () {
        // below the sticky header and any scroll padding: the top quarter of the window
        var at = "", line = Math.max(120, window.innerHeight / 4);
        document.querySelectorAll("article section[id]").forEach(function (s) {
          if (s.getBoundingClientRect().top <= line) { at = s.id; }
        });
        if (window.location.hash && !at) { at = window.location.hash.slice(1); }
        if (at) { a.setAttribute("href", a.getAttribute("href").split("#")[0] + "#" + at); }
      });
    });
    // 5. a figure opens alone at its natural size
    document.querySelectorAll("article .cell_output img, article figure img").forEach(function (img) {
      if (img.closest("a")) { return; }
      img.classList.add("ldf-zoomable");
      img.setAttribute("tabindex", "0");
      img.setAttribute("role", "button");
      img.title = document.documentElement.lang === "zh-CN" ? "点按放大" : "tap to enlarge";
      function open() {
        var d = document.createElement("dialog"), big = img.cloneNode(false);
        d.className = "ldf-figure-view";
        big.removeAttribute("tabindex"); big.removeAttribute("role"); big.removeAttribute("title");
        big.classList.remove("ldf-zoomable");
        var close = document.createElement("button");
        close.type = "button"; close.className = "ldf-figure-close";
        close.textContent = "×";
        close.setAttribute("aria-label", document.documentElement.lang === "zh-CN" ? "关闭" : "close");
        d.appendChild(close); d.appendChild(big);
        close.addEventListener("click", function () { d.close(); });
        d.addEventListener("close", function () { d.remove(); });
        d.addEventListener("click", function (e) { if (e.target === d) { d.close(); } });
        document.body.appendChild(d);
        d.showModal();
      }
      img.addEventListener("click", open);
      img.addEventListener("keydown", function (e) { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); open(); } });
    });
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
