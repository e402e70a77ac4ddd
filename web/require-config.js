// Loaded right after require.js and before @jupyter-widgets/html-manager's embed-amd.js (see
// book/_ext/ldf_book.py).  embed-amd.js finds its Font Awesome files relative to the AMD id of
// its own module, "@jupyter-widgets/html-manager/dist/...", resolved against require.js's baseUrl
// (the page's folder).  Mapping that id to this folder's html-manager/ makes the fonts load from
// the site's _vendor/ on every page depth, over http and from file://.
(function () {
  var me = document.currentScript && document.currentScript.src;
  if (!me || typeof window.require !== "function" || !window.require.config) { return; }
  var base = me.slice(0, me.lastIndexOf("/") + 1);
  window.require.config({ paths: { "@jupyter-widgets/html-manager/dist": base + "html-manager" } });
})();
