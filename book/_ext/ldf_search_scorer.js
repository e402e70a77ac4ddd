/* The book's search scorer (book/_ext/ldf_search.py sets it as Sphinx's html_search_scorer; Sphinx
 * puts it in language_data.js, which only the search page loads, before searchtools.js).
 *
 * Sphinx scores a page 15 for a query word in any heading and 5 for one in its text, and sorts
 * ties by name, so every chapter with the word in one heading tied and came out in chapter order.
 * Here a result's score is, in this order of weight:
 *   1. the page's title holds the whole query (case-insensitive): +40;
 *   2. one of the page's headings holds it (a section result: that heading itself): +15;
 *   3. how often the page uses the query's rarest word: 10 × log2(1 + count), the counts that
 *      book/_ext/ldf_search.py adds to the index as ldf_tf (an indexed page uses a word once at
 *      least); a word the page lacks scores nothing;
 * in the Chinese edition a glossary term also counts under the English name the glossary pairs
 * it with (ldf_syn: 预填充 and "prefill"), since the chapters keep "Prefill" in English after
 * glossing it once;
 *   and Sphinx's own score / 100 breaks ties.
 * Each result's excerpt opens at the query itself: the phrase where the text holds it, else the
 * first of its words found (Sphinx's searchtools highlights the words in it).
 */
var Scorer = {
  // Sphinx's defaults (searchtools.js defines Scorer only when the page has none)
  objNameMatch: 11, objPartialMatch: 6, objPrio: {0: 15, 1: 5, 2: -5}, objPrioDefault: 0,
  title: 15, partialTitle: 7, term: 5, partialTerm: 2,

  _cache: null,
  _prepare: function () {
    var idx = Search._index, q = (new URLSearchParams(window.location.search).get("q") || "").trim();
    if (this._cache && this._cache.q === q && this._cache.idx === idx) return this._cache;
    var stemmer = new Stemmer();
    var stems = function (text) {
      var out = [];
      (typeof splitQuery === "function" ? splitQuery(text) : text.split(/\s+/)).forEach(function (w) {
        var low = w.toLowerCase();
        if (!low || (typeof stopwords !== "undefined" && stopwords.indexOf(low) !== -1) || /^\d+$/.test(low)) return;
        var s = stemmer.stemWord(low);
        if (out.indexOf(s) === -1) out.push(s);
      });
      return out;
    };
    // the query, and in the Chinese edition the English term the glossary pairs it with
    var low = q.toLowerCase(), syn = (idx.ldf_syn || {})[q] || (idx.ldf_syn || {})[low];
    var phrases = [{text: low, words: stems(q)}];
    if (syn) phrases.push({text: syn, words: stems(syn)});
    var headings = {};   // page index -> its headings, lower case
    Object.keys(idx.alltitles || {}).forEach(function (t) {
      idx.alltitles[t].forEach(function (pair) { (headings[pair[0]] = headings[pair[0]] || []).push(t.toLowerCase()); });
    });
    var tf = {};   // word -> {page: count}
    phrases.forEach(function (p) {
      p.words.forEach(function (w) {
        if (tf[w]) return;
        var m = {};
        [idx.terms[w], idx.titleterms[w]].forEach(function (docs) {
          if (docs === undefined) return;
          (typeof docs === "number" ? [docs] : docs).forEach(function (d) { m[d] = Math.max(m[d] || 0, 1); });
        });
        ((idx.ldf_tf || {})[w] || []).forEach(function (pair) { m[pair[0]] = pair[1]; });
        tf[w] = m;
      });
    });
    var seen = {};
    var stemsOf = function (text) {   // every word of a title, stemmed (stop words kept out)
      if (!(text in seen)) seen[text] = stems(text);
      return seen[text];
    };
    this._cache = {q: q, low: low, idx: idx, phrases: phrases, headings: headings, tf: tf, stemsOf: stemsOf};
    return this._cache;
  },

  score: function (result) {
    var docname = result[0], title = result[1] || "", anchor = result[2], score = result[4];
    var c = Scorer._prepare(), idx = c.idx;
    var doc = idx.docnames.indexOf(docname);
    if (doc < 0 || !c.low) return score;
    // a title or heading "holds" the query when it contains it as written, or its words' stems
    // in a row ("Tensor parallel: …" holds "tensor parallelism")
    var has = function (text) {
      return c.phrases.some(function (p) {
        if (p.text && text.indexOf(p.text) !== -1) return true;
        if (!p.words.length) return false;
        var seq = c.stemsOf(text);
        for (var i = 0; i + p.words.length <= seq.length; i++) {
          if (p.words.every(function (w, j) { return seq[i + j] === w; })) return true;
        }
        return false;
      });
    };
    var s = 0;
    if (has((idx.titles[doc] || "").toLowerCase())) s += 40;
    if (anchor) {   // a section result: its own heading ("Page > Heading")
      if (has(title.split(" > ").pop().toLowerCase())) s += 15;
    } else if ((c.headings[doc] || []).some(has)) {
      s += 15;
    }
    // how often the page uses the query: its rarest word's count, the larger of the two names'
    var uses = Math.max.apply(null, c.phrases.map(function (p) {
      return p.words.length ? Math.min.apply(null, p.words.map(function (w) { return c.tf[w][doc] || 0; })) : 0;
    }));
    s += 10 * Math.log2(1 + uses);
    return s + score / 100;
  },
};

// The excerpt under each result: from the query itself, not from the last stemmed word's first use.
document.addEventListener("DOMContentLoaded", function () {
  if (typeof Search === "undefined") return;
  Search.makeSearchSummary = function (htmlText, keywords, anchor) {
    // the article's text (not the header's buttons), or the section the result points to
    var doc = new DOMParser().parseFromString(htmlText, "text/html");
    doc.querySelectorAll(".headerlink, script, style, .bd-header-article, nav, .ldf-planner-spec").forEach(function (e) { e.remove(); });
    var root = (anchor && doc.getElementById(decodeURIComponent(anchor.slice(1)))) ||
               doc.querySelector("article.bd-article") || doc.querySelector('[role="main"]');
    if (!root) return null;
    var h1 = root.querySelector("h1"), skip = h1 ? h1.textContent.replace(/\s+/g, " ").trim().length : 0;
    var text = root.textContent.replace(/\s+/g, " ").trim();
    if (text === "") return null;
    var q = (new URLSearchParams(window.location.search).get("q") || "").trim().toLowerCase();
    // the query in the text below the page's title first; in the title only if nowhere else
    var lower = text.toLowerCase(), at = q ? lower.indexOf(q, skip) : -1, len = q.length;
    if (at < 0 && q) at = lower.indexOf(q);
    if (at < 0) {
      var words = (typeof splitQuery === "function" ? splitQuery(q) : q.split(/\s+/)).concat(Array.from(keywords));
      words.forEach(function (w) {
        var i = w ? lower.indexOf(String(w).toLowerCase(), skip) : -1;
        if (i >= 0 && (at < 0 || i < at)) { at = i; len = String(w).length; }
      });
    }
    if (at < 0) { at = 0; len = 0; }
    var start = Math.max(0, at - 90);
    if (start > 0) { var sp = text.lastIndexOf(" ", start + 12); if (sp > start - 20 && sp < at) start = sp + 1; }
    var end = Math.min(text.length, at + len + 170);
    var summary = document.createElement("p");
    summary.classList.add("context");
    summary.textContent = (start > 0 ? "… " : "") + text.slice(start, end).trim() + (end < text.length ? " …" : "");
    return summary;
  };
});
