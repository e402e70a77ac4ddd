// Loaded right after require.js and before @jupyter-widgets/html-manager's embed-amd.js (see
// book/_ext/ldf_book.py).  embed-amd.js finds its Font Awesome files relative to the AMD id of
// the module that asks for them ("@jupyter-widgets/html-manager/dist/libembed-amd", and
// "@jupyter-widgets/base", "@jupyter-widgets/controls", ... which sit one folder higher), resolved
// against require.js's baseUrl (the page's folder).  Mapping both ids to this folder's
// html-manager/ makes the fonts load from the site's _vendor/ on every page depth, over http and
// from file://.  (The modules themselves are defined inside embed-amd.js: nothing is fetched
// from these paths but the fonts.)
(function () {
  var me = document.currentScript && document.currentScript.src;
  if (!me || typeof window.require !== "function" || !window.require.config) { return; }
  var base = me.slice(0, me.lastIndexOf("/") + 1);
  window.require.config({ paths: { "@jupyter-widgets/html-manager/dist": base + "html-manager",
                                   "@jupyter-widgets": base + "html-manager" } });
})();
