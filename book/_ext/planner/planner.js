/* The web planner (book/planner.md): `python -m llm_dataflow plan` in the reader's browser.
 *
 * book/_ext/ldf_planner.py writes the page's spec (the CLI's options read from its parser, with
 * their defaults and --help texts; the presets; the translated labels; where Pyodide, the
 * package's core zip and this script's worker are, and how many bytes they weigh) and adds this
 * script to that page only.  Python runs in a Web Worker (planner-worker.js): Pyodide unpacks the
 * core zip and runs `python -m llm_dataflow ARGV` exactly as a shell does, so every number and
 * every error message on the page is the command's own.  The page never runs Python itself: its
 * main thread only builds the form and draws what the worker sends back.
 *
 * What the page draws, all from the command's output:
 * - the table as rows (label, value, and the value's long parenthetical folded under it), the
 *   verdict and the KV room first; the text exactly as the command prints it one click away;
 * - the memory bar from `memory_terms` of `plan --json`, every term in its order, in GiB as the
 *   table (the core's fmt_gib), with what exceeds the device drawn past its edge;
 * - the decode bound against batch, one run of the command per batch;
 * - `warnings` of the JSON and anything the command wrote to stderr while succeeding.
 * A plan runs when a choice changes, or when typing pauses on a complete value (never on "L40"
 * while "L40S" is being typed); each field shows its default (the value this plan used) and the
 * command's --help text (the parser's own in English; the label help_<dest>, translated, in another
 * edition).  On a Chinese page the page's words join values with full-width punctuation ("默认：1",
 * "（估计值）").  The settings live in the URL (?hardware=H100-SXM&tp=2...).
 *
 * A classic script, not a module: opened from disk (file://) a browser refuses module scripts, and
 * this one must still run there to say so and show the command line.
 */
(function () {
"use strict";
const PAUSE_MS = 450;          // typing pauses this long: plan
const CONFIG = "@config";      // the model select's value for a pasted config.json
const NOTE_MIN = 24;           // a trailing "(...)" at least this long is folded under its row

function start(root) {
  const spec = JSON.parse(root.querySelector(".ldf-planner-spec").textContent);
  const L = (k, fallback) => (spec.labels && spec.labels[k]) || (fallback === undefined ? k : fallback);
  const fill = (s, vars) => s.replace(/\{(\w+)\}/g, (m, k) => (k in vars ? vars[k] : m));
  // Words of the page joined to a value or a note: Chinese takes full-width punctuation ("默认：1",
  // "（估计值）"), not the ASCII of the English edition ("default: 1", " (estimate)")
  const ZH = /^zh/i.test(spec.language || "");
  const COLON = ZH ? "：" : ": ", COMMA = ZH ? "，" : ", ", LIST = ZH ? "、" : ", ";
  const paren = (s) => (ZH ? `（${s}）` : ` (${s})`);
  // an option's --help text: the edition's translation (label help_<dest>; the English page's spec
  // has none and shows the parser's own text)
  const helpOf = (labels, o) => (labels && labels[`help_${o.dest}`]) || o.help || "";
  const PAGE_SKIPS = new Set(spec.pageSkips || []);   // options only the command line uses
  const opts = spec.options;
  const byDest = Object.fromEntries(opts.map((o) => [o.dest, o]));
  const statusEl = root.querySelector(".ldf-planner-status");
  let lastReport = null, runs = 0, packedConfig = "", packedFor = null;

  // --- building blocks -------------------------------------------------------------------------
  const el = (tag, attrs = {}, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") e.textContent = v; else if (k === "cls") e.className = v; else e.setAttribute(k, v === true ? "" : v);
    }
    for (const kid of kids) if (kid !== null && kid !== undefined && kid !== false) e.append(kid);
    return e;
  };
  const num = (x) => (typeof x === "number" && Number.isInteger(x) ? x.toLocaleString("en-US") : String(x));

  // --- the form: one control per CLI option, in groups --------------------------------------------
  const form = el("form", {cls: "ldf-planner-form", novalidate: true, "aria-label": L("form", "plan")});
  form.addEventListener("submit", (e) => { e.preventDefault(); now(); });
  const controls = {}, hints = {}, waits = {}, fields = {};
  const groupOf = {};
  for (const g of spec.groups || []) for (const d of g.dests) groupOf[d] = g.key;
  const fallbackGroup = (spec.groups || []).find((g) => g.rest) || null;
  const groupEls = {};
  for (const g of spec.groups || []) {
    const legend = L(`group_${g.key}`, g.key);
    let box;
    if (g.folded) {
      box = el("details", {cls: `ldf-planner-group ldf-planner-group-${g.key}`, "data-group": g.key},
               el("summary", {cls: "ldf-planner-legend", text: legend}));
    } else {
      box = el("fieldset", {cls: `ldf-planner-group ldf-planner-group-${g.key}`, "data-group": g.key},
               el("legend", {cls: "ldf-planner-legend", text: legend}));
    }
    box.append(el("div", {cls: "ldf-planner-fields"}));
    groupEls[g.key] = box;
  }
  const groupFor = (o) => groupEls[groupOf[o.dest] || (fallbackGroup && fallbackGroup.key)] || null;

  function field(o, control, extra) {
    const id = `ldf-planner-${o.dest}`;
    control.id = id;
    control.name = o.dest;
    controls[o.dest] = control;
    const flag = el("code", {cls: "ldf-planner-opt", text: o.flag || o.metavar || o.dest});
    const label = el("label", {for: id}, el("span", {cls: "ldf-planner-name", text: L(o.dest, o.flag || o.metavar || o.dest)}), " ", flag);
    const hint = el("p", {cls: "ldf-planner-hint", id: `${id}-hint`});
    hints[o.dest] = hint;
    control.setAttribute("aria-describedby", hint.id);
    const wait = el("p", {cls: "ldf-planner-wait", id: `${id}-wait`, hidden: true, role: "status"});
    waits[o.dest] = wait;
    const f = el("div", {cls: `ldf-planner-field ldf-planner-${o.kind}`, "data-dest": o.dest},
                 ...(o.kind === "flag" ? [el("div", {cls: "ldf-planner-check"}, control, label)] : [label, control]),
                 wait, hint, extra);
    fields[o.dest] = f;
    return f;
  }
  let configBox = null;
  for (const o of opts) {
    const box = groupFor(o);
    const target = box ? box.querySelector(".ldf-planner-fields") : form;
    if (o.kind === "model") {
      const sel = el("select");
      for (const p of spec.presets) sel.append(el("option", {value: p, text: p}));
      sel.append(el("option", {value: CONFIG, text: L("model_config")}));
      target.append(field(o, sel));
      const area = el("textarea", {id: "ldf-planner-config", rows: 6, spellcheck: "false", autocomplete: "off",
                                   placeholder: '{"model_type": "llama", "hidden_size": 4096, ...}'});
      const file = el("input", {type: "file", id: "ldf-planner-file", accept: ".json,application/json"});
      const folder = el("input", {type: "text", id: "ldf-planner-folder", value: "my-model", autocomplete: "off",
                                  spellcheck: "false"});
      controls.config = area; controls.file = file; controls.folder = folder;
      configBox = el("div", {cls: "ldf-planner-config", hidden: true},
        el("label", {for: "ldf-planner-config", text: L("config")}), area,
        el("div", {cls: "ldf-planner-config-row"},
          el("label", {for: "ldf-planner-file", cls: "ldf-planner-file", text: L("file")}), file),
        el("div", {cls: "ldf-planner-config-row"},
          el("label", {for: "ldf-planner-folder", text: L("folder")}), folder));
      target.append(configBox);
      continue;
    }
    let c;
    if (o.kind === "choice") {
      c = el("select");
      if (!o.required) c.append(el("option", {value: "", text: L("default")}));
      for (const v of o.choices) c.append(el("option", {value: v, text: v}));
      if (o.default !== null && o.required) c.value = String(o.default);
    } else if (o.kind === "flag") {
      c = el("input", {type: "checkbox"});
    } else {
      c = el("input", {type: "text", autocomplete: "off", spellcheck: "false", autocapitalize: "off",
                       inputmode: o.kind === "int" ? "numeric" : o.kind === "float" ? "decimal" : null,
                       enterkeyhint: "go"});
      if (o.suggestions) {   // e.g. --hardware: a preset name, or a custom spec typed in full
        const list = el("datalist", {id: `ldf-planner-${o.dest}-list`});
        for (const v of o.suggestions) list.append(el("option", {value: v}));
        c.setAttribute("list", list.id);
        target.append(list);
      }
    }
    const note = PAGE_SKIPS.has(o.dest) ? el("p", {cls: "ldf-planner-note", text: L(`note_${o.dest}`, "")}) : null;
    target.append(field(o, c, note));
  }
  for (const g of spec.groups || []) if (groupEls[g.key].querySelector(".ldf-planner-field")) form.append(groupEls[g.key]);

  // --- results -----------------------------------------------------------------------------------
  const errorEl = el("div", {cls: "ldf-planner-error", role: "alert", hidden: true});
  const warnEl = el("div", {cls: "ldf-planner-warnings", role: "status", hidden: true});
  const verdict = el("div", {cls: "ldf-planner-verdict"});
  const rowsEl = el("dl", {cls: "ldf-planner-rows"});
  const out = el("pre", {cls: "ldf-planner-table"});
  const raw = el("details", {cls: "ldf-planner-raw"}, el("summary", {text: L("raw", "As the command prints it")}), out);
  const jsonOut = el("pre", {cls: "ldf-planner-json", hidden: true});
  const result = el("script", {type: "application/json", cls: "ldf-planner-result"});
  const bar = el("figure", {cls: "ldf-planner-bar"});
  const chart = el("figure", {cls: "ldf-planner-chart"});
  const command = el("code", {cls: "ldf-planner-command"});
  const outputs = el("div", {cls: "ldf-planner-outputs", hidden: true},
    el("p", {cls: "ldf-planner-caption", text: L("table")}), warnEl, verdict, rowsEl, jsonOut, raw, result, bar, chart);
  const summary = el("a", {cls: "ldf-planner-summary", href: "#ldf-planner-results", hidden: true, "aria-live": "polite"});
  const results = el("section", {cls: "ldf-planner-results", id: "ldf-planner-results", "aria-label": L("table")},
    errorEl, outputs,
    el("div", {cls: "ldf-planner-cli"}, el("p", {cls: "ldf-planner-caption", text: L("cli")}),
       el("div", {cls: "highlight"}, el("pre", {}, command))));
  const formCol = el("div", {cls: "ldf-planner-formcol"}, statusEl, form, summary);
  root.append(el("div", {cls: "ldf-planner-body"}, formCol, results));

  // --- settings <-> argv <-> URL -----------------------------------------------------------------
  const folderName = () => (controls.folder.value.trim().replace(/[^A-Za-z0-9._-]+/g, "-").replace(/^[.-]+/, "") || "my-model");
  const modelArg = () => (controls.model.value === CONFIG ? `${folderName()}/config.json` : controls.model.value);
  function argv({forPage = false, batch = null, json = false} = {}) {
    const a = [spec.command, modelArg()];
    for (const o of opts) {
      if (o.kind === "model" || (forPage && PAGE_SKIPS.has(o.dest))) continue;
      const c = controls[o.dest];
      if (o.kind === "flag") {
        if (o.dest === "json" && json) continue;
        if (c.checked) a.push(o.flag);
        continue;
      }
      const v = o.dest === "batch" && batch !== null ? String(batch) : c.value.trim();
      if (v === "" || (!o.required && v === String(o.default) && !(o.dest === "batch" && batch !== null))) continue;
      a.push(o.flag, v);
    }
    if (json) a.push("--json");
    return a;
  }
  const quote = (s) => (/^[A-Za-z0-9_./:=@%+,-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);
  function showCommand() { command.textContent = [spec.prog, ...argv().map(quote)].join(" "); }

  const b64url = (bytes) => btoa(String.fromCharCode(...bytes)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  const unb64url = (s) => Uint8Array.from(atob(s.replace(/-/g, "+").replace(/_/g, "/")), (ch) => ch.charCodeAt(0));
  async function pack(text) {
    const stream = new Blob([text]).stream().pipeThrough(new CompressionStream("deflate-raw"));
    return b64url(new Uint8Array(await new Response(stream).arrayBuffer()));
  }
  async function unpack(s) {
    const stream = new Blob([unb64url(s)]).stream().pipeThrough(new DecompressionStream("deflate-raw"));
    return await new Response(stream).text();
  }
  async function writeUrl() {
    const q = new URLSearchParams();
    if (controls.model.value === CONFIG) {
      const text = controls.config.value;
      if (packedFor !== text) { packedConfig = await pack(text); packedFor = text; }
      q.set("folder", folderName());
      q.set("config", packedConfig);
    } else {
      q.set("model", controls.model.value);
    }
    for (const o of opts) {
      if (o.kind === "model") continue;
      const c = controls[o.dest];
      if (o.kind === "flag") { if (c.checked) q.set(o.dest, "1"); continue; }
      if (c.value.trim() !== "") q.set(o.dest, c.value.trim());
    }
    history.replaceState(history.state, "", `${location.pathname}?${q}${location.hash}`);
  }
  async function readUrl() {
    const q = new URLSearchParams(location.search);
    if (q.has("config")) {
      try {
        controls.config.value = await unpack(q.get("config"));
        controls.model.value = CONFIG;
      } catch (e) {
        showError(L("badlink"));
      }
      if (q.has("folder")) controls.folder.value = q.get("folder");
    } else if (q.has("model")) {
      if (!spec.presets.includes(q.get("model"))) controls.model.append(el("option", {value: q.get("model"), text: q.get("model")}));
      controls.model.value = q.get("model");
    }
    for (const o of opts) {
      if (o.kind === "model" || !q.has(o.dest)) continue;
      const c = controls[o.dest], v = q.get(o.dest);
      if (o.kind === "flag") c.checked = v === "1";
      else if (o.kind === "choice" && !o.choices.includes(v)) { c.append(el("option", {value: v, text: v})); c.value = v; }
      else c.value = v;
    }
    openFoldsWithValues();
  }
  // a folded group whose field holds a value the reader (or a link) set opens: nothing set is hidden
  function openFoldsWithValues() {
    for (const o of opts) {
      const c = controls[o.dest], box = fields[o.dest] && fields[o.dest].closest("details");
      if (!box || !c) continue;
      if (o.kind === "flag" ? c.checked : c.value.trim() !== "") box.open = true;
    }
  }
  if (!location.search) {   // a first visit: a small model on a common GPU
    controls.model.value = spec.presets.includes("Llama-3.1-8B") ? "Llama-3.1-8B" : (spec.presets.includes("Llama-3-8B") ? "Llama-3-8B" : spec.presets[0]);
    if (controls.hardware && (byDest.hardware.choices || byDest.hardware.suggestions || []).includes("H100-SXM")) controls.hardware.value = "H100-SXM";
    if (controls.context) controls.context.value = "4096";
    if (controls.batch) controls.batch.value = "8";
  }

  // --- each field's default (the value this plan used where the command reports it) and help ----
  function resolvedDefault(o) {
    if (o.kind === "flag") return L("off", "off");
    // an option whose default depends on the rest (the checkpoint's format, the context, the
    // layout): the value the last plan used, read from plan --json, while the field is empty
    const how = (spec.resolved || {})[o.dest] || (o.default === null ? {key: o.dest} : null);
    const r = lastReport, c = controls[o.dest];
    if (how && r && c && c.value.trim() === "" && r[how.key] !== null && r[how.key] !== undefined && typeof r[how.key] !== "object") {
      const v = r[how.key];
      if (typeof v === "number" && how.scale) return (v / how.scale).toFixed(how.digits || 2) + (how.unit ? " " + how.unit : "");
      return num(v);
    }
    if (how && c && c.value.trim() !== "") return null;   // set by the reader: the help says the default
    if (o.default === null || o.default === undefined) return L("none", "none");
    return num(o.default);
  }
  function showHints() {
    for (const o of opts) {
      const h = hints[o.dest];
      if (!h) continue;
      const c = controls[o.dest];
      const d = resolvedDefault(o);
      const isEstimate = o.dest === "non_torch_gib" && lastReport && (lastReport.memory_terms || []).some((t) => t.name === "non_torch" && t.estimate);
      const parts = [];
      if (!o.required && o.kind !== "model" && d !== null) {
        parts.push(el("span", {cls: "ldf-planner-default"}, `${L("default")}${COLON}`, el("b", {text: d}),
                      isEstimate ? paren(L("estimate", "estimate")) : ""));
      }
      const help = helpOf(spec.labels, o);
      if (help) parts.push(el("span", {cls: "ldf-planner-help", text: help}));
      h.replaceChildren(...parts.flatMap((p, i) => (i ? [" · ", p] : [p])));
      if (d === null) { /* keep the last default text: the field holds the reader's value */ }
      else if (o.kind === "choice" && !o.required) c.options[0].textContent = `${L("default")}${COLON}${d}`;
      else if (o.kind !== "flag" && o.kind !== "model" && c.tagName === "INPUT") c.placeholder = `${d}`;
    }
  }

  // --- an incomplete value: the reader is still typing it -------------------------------------------
  function incomplete(o, value) {
    const v = value.trim();
    if (o.kind === "int" || o.kind === "float") return /^[+-]$|[.eE][+-]?$|,$/.test(v);
    if (o.suggestions && v) {
      if (v.includes("=")) return /[=,]$/.test(v);   // a custom spec mid-way through a key or value
      if (o.suggestions.includes(v)) return false;
      const low = v.toLowerCase();
      return o.suggestions.some((s) => s.toLowerCase().startsWith(low));
    }
    return false;
  }
  function waitingFor() {
    let any = null;
    for (const o of opts) {
      const c = controls[o.dest], w = waits[o.dest];
      if (!w || !c || c.tagName !== "INPUT" || c.type !== "text") continue;
      const inc = incomplete(o, c.value);
      w.hidden = !inc;
      if (inc) {
        const v = c.value.trim(), low = v.toLowerCase();
        const matches = (o.suggestions || []).filter((s) => s.toLowerCase().startsWith(low)).slice(0, 4);
        w.textContent = matches.length && !v.includes("=") ? `${L("keeptyping", "keep typing")}${COLON}${matches.join(LIST)}…`
                                                            : `${L("keeptyping", "keep typing")}…`;
        any = any || o.dest;
      }
    }
    return any;
  }

  // --- the worker: Python off the main thread --------------------------------------------------------
  let worker = null, workerReady = false, busy = false, nextId = 1, generation = 0;
  const queue = [], pending = new Map();
  function call(msg, {gen = generation, front = false} = {}) {
    return new Promise((resolve) => {
      msg.id = nextId++;
      msg.type = "run";
      msg.gen = gen;
      pending.set(msg.id, {resolve, sentAt: 0});
      if (front) queue.unshift(msg); else queue.push(msg);
      pump();
    });
  }
  function dropStale(gen) {   // queued requests of older changes: their answers would be discarded
    for (let i = queue.length - 1; i >= 0; i--) {
      if (queue[i].gen < gen) { pending.get(queue[i].id).resolve(null); pending.delete(queue[i].id); queue.splice(i, 1); }
    }
  }
  function pump() {
    if (busy || !workerReady || !queue.length) return;
    busy = true;
    const m = queue.shift();
    pending.get(m.id).sentAt = performance.now();   // until now it waited for the worker's last run
    worker.postMessage(m);
  }
  function onWorker(e) {
    const m = e.data;
    if (m.type === "progress") { showProgress(m); return; }
    if (m.type === "ready") { workerReady = true; onReady(m); pump(); return; }
    if (m.type === "failed") { onFailed(m.message); return; }
    if (m.type === "result") {
      busy = false;
      const p = pending.get(m.id);
      pending.delete(m.id);
      if (p) { m.sentAt = p.sentAt; p.resolve(m); }
      pump();
    }
  }
  const configFiles = () => (controls.model.value === CONFIG ? {[`${folderName()}/config.json`]: controls.config.value} : {});

  function errorLine(stderr) {
    // the CLI prints its usage line, then "<prog>: error: <message>"; the page shows the message
    const lines = stderr.trimEnd().split("\n");
    const i = lines.findIndex((l) => / error: /.test(l) || l.startsWith("error: "));
    const tb = lines.findIndex((l) => l.startsWith("Traceback"));
    if (i >= 0) return lines.slice(i).join("\n");
    if (tb >= 0) return lines[lines.length - 1];   // never a traceback on the page
    return lines.join("\n");
  }
  function markInvalid(msg) {
    for (const c of Object.values(controls)) c.removeAttribute("aria-invalid");
    if (!msg) return;
    const flags = [];
    const m = msg.match(/argument (--[\w-]+|[A-Z_]+)/);
    if (m) flags.push(m[1]);
    const req = msg.match(/arguments? (?:are|is) required: (.+)/);
    if (req) flags.push(...req[1].split(/,\s*/).map((s) => s.split("/")[0].trim()));
    for (const f of flags) {
      const o = f.startsWith("--") ? opts.find((x) => x.flag === f) : opts.find((x) => x.kind === "model");
      const c = o && (o.kind === "model" && controls.model.value === CONFIG ? controls.config : controls[o.dest]);
      if (!c) continue;
      c.setAttribute("aria-invalid", "true");
      const box = c.closest("details");
      if (box) box.open = true;
    }
  }
  function showError(msg) {
    errorEl.hidden = !msg;
    errorEl.textContent = msg || "";
    markInvalid(msg);
  }

  // --- one change: the table, the JSON, the bar (one message to the worker), then the chart ------
  let timer = null;
  // data-ldf-pending: a change the page has not planned yet (a test waits for it to clear)
  function later() { clearTimeout(timer); root.dataset.ldfPending = "1"; timer = setTimeout(now, PAUSE_MS); }
  function now() { clearTimeout(timer); timer = null; root.dataset.ldfPending = "1"; update(); }
  function settled(g) { if (g === generation && timer === null) delete root.dataset.ldfPending; }
  async function update() {
    showCommand();
    writeUrl();
    if (waitingFor()) { root.dataset.ldfWaiting = "1"; settled(generation); return; }   // never plan a half-typed value
    delete root.dataset.ldfWaiting;
    if (!workerReady) return;
    const g = ++generation;
    dropStale(g);
    const t0 = performance.now();
    const asJson = controls.json && controls.json.checked;
    const shownArgv = argv({forPage: true});
    const runsAsked = asJson ? [{argv: shownArgv}] : [{argv: shownArgv}, {argv: argv({forPage: true, json: true})}];
    const reply = await call({runs: runsAsked, files: configFiles()}, {gen: g, front: true});
    if (!reply || g !== generation) return;   // a newer change is on its way
    const [shown, j] = [reply.results[0], reply.results[asJson ? 0 : 1]];
    let report = null;
    if (!shown || shown.code !== 0) {
      showError(errorLine(shown ? shown.err : "error: no answer"));
      outputs.hidden = true;
      summary.hidden = true;
      root.dataset.ldfState = "error";
    } else {
      report = JSON.parse(j.out);
      const terms = report.memory_terms || [];
      const gib = await call({runs: [], gib: [report.runtime_memory_bytes, ...terms.map((t) => t.bytes),
                                              Math.max(0, terms.reduce((s, t) => s + t.bytes, 0) - report.runtime_memory_bytes)]},
                             {gen: g, front: true});
      if (!gib || g !== generation) return;
      lastReport = report;
      showError("");
      out.textContent = shown.out.replace(/\n$/, "");
      result.textContent = j.out;
      if (asJson) {
        jsonOut.textContent = shown.out.replace(/\n$/, "");
        jsonOut.hidden = false; rowsEl.hidden = true; verdict.hidden = true; raw.hidden = true;
      } else {
        jsonOut.hidden = true; rowsEl.hidden = false; verdict.hidden = false; raw.hidden = false;
        drawRows(shown.out);
      }
      drawWarnings(report, shown.err + (asJson ? "" : j.err));
      drawBar(report, gib.gib);
      showHints();
      outputs.hidden = false;
      root.dataset.ldfState = "ok";
    }
    root.dataset.ldfMs = (performance.now() - t0).toFixed(1);
    // of which the command's own Python took (the worker's clock), and the wait for a run the
    // worker had begun before this change (a run cannot be cut short): the rest is the page's
    root.dataset.ldfPyMs = reply.results.reduce((t, r) => t + (r.ms || 0), 0).toFixed(1);
    root.dataset.ldfWaitMs = Math.max(0, reply.sentAt - t0).toFixed(1);
    root.dataset.ldfRuns = String(++runs);
    settled(g);
    if (report) drawChart(report, g, t0); else root.dataset.ldfChart = root.dataset.ldfRuns;
  }

  // --- the table as rows --------------------------------------------------------------------------
  /** The command's table as rows: {label, value, sub}; the value column is where the first line's
   * value starts (the command pads every label to one width). */
  function parseRows(text) {
    const lines = text.replace(/\n+$/, "").split("\n");
    const m = lines[0].match(/^\S.*?\s{2,}(?=\S)/);
    const col = m ? m[0].length : 0;
    return lines.map((l) => {
      const head = l.slice(0, col);
      if (!col || l.length <= col || !/\s{2}$/.test(head) || !head.trim()) return {label: "", value: l.trim(), sub: false, line: l};
      return {label: head.trim(), value: l.slice(col), sub: /^\s/.test(l), line: l};
    });
  }
  /** A value's trailing parenthetical of NOTE_MIN characters or more (a source, the arithmetic
   * behind a verdict): [main, note], with main + " " + note === value. */
  function splitNote(value) {
    if (!value.endsWith(")")) return [value, ""];
    let depth = 0;
    for (let i = value.length - 1; i >= 0; i--) {
      const ch = value[i];
      if (ch === ")") depth++;
      else if (ch === "(" && --depth === 0) {
        if (i < 2 || value[i - 1] !== " " || value.length - i < NOTE_MIN) return [value, ""];
        return [value.slice(0, i - 1), value.slice(i)];
      }
    }
    return [value, ""];
  }
  const VERDICT = spec.verdictRows || ["memory", "KV room"];
  function rowEl(r) {
    const [main, note] = splitNote(r.value);
    const dd = el("dd", {}, el("span", {cls: "ldf-row-value", text: main}));
    if (note) dd.append(" ", el("details", {cls: "ldf-row-note"}, el("summary", {text: L("more", "details")}),
                                el("span", {cls: "ldf-row-note-text", text: note})));
    const label = r.label ? L(`row_${r.label}`, r.label) : "";
    return el("div", {cls: `ldf-row${r.sub ? " ldf-row-sub" : ""}`, "data-label": r.label},
              el("dt", {text: label, title: label !== r.label ? r.label : null}), dd);
  }
  function drawRows(text) {
    const rows = parseRows(text);
    // a sub-row ("  attention, dense") belongs with the row above it
    const blocks = [];
    for (const r of rows) if (r.sub && blocks.length) blocks[blocks.length - 1].push(r); else blocks.push([r]);
    const first = blocks.filter((b) => VERDICT.includes(b[0].label)).sort((a, b) => VERDICT.indexOf(a[0].label) - VERDICT.indexOf(b[0].label));
    const rest = blocks.filter((b) => !first.includes(b));
    verdict.replaceChildren();
    const mem = first.find((b) => b[0].label === VERDICT[0]);
    const fits = mem ? /^fits\b/.test(mem[0].value) : null;
    verdict.className = `ldf-planner-verdict${fits === null ? "" : fits ? " ldf-fits" : " ldf-nofit"}`;
    const head = el("dl", {cls: "ldf-planner-rows ldf-planner-first"});
    for (const b of first) for (const r of b) head.append(rowEl(r));
    if (fits !== null) verdict.append(el("p", {cls: "ldf-verdict-badge", text: fits ? L("fits", "fits") : L("nofit_verdict", "does not fit")}));
    verdict.append(head);
    rowsEl.replaceChildren(...rest.flat().map(rowEl));
    // the sticky summary on a phone: the verdict, the KV room and the decode bound, as printed
    const pick = (label, stop) => { const r = rows.find((x) => x.label === label); return r ? r.value.split(stop)[0].trim() : null; };
    const room = pick("KV room", " ("), step = pick("decode step ≥", ",");
    summary.replaceChildren(el("b", {cls: fits ? "ldf-fits" : "ldf-nofit", text: fits ? L("fits", "fits") : L("nofit_verdict", "does not fit")}),
                            room ? el("span", {text: `${L("row_KV room", "KV room")} ${room}`}) : "",
                            step ? el("span", {text: `${L("row_decode step ≥", "decode step ≥")} ${step}`}) : "",
                            el("span", {cls: "ldf-summary-go", text: L("toresults", "results ↓")}));
    summary.hidden = false;
  }
  function drawWarnings(report, stderr) {
    const list = [...(Array.isArray(report.warnings) ? report.warnings : []).map(String)];
    for (const line of (stderr || "").split("\n")) if (line.trim() && !list.includes(line.trim())) list.push(line.trim());
    warnEl.hidden = !list.length;
    warnEl.replaceChildren(...(list.length ? [el("p", {cls: "ldf-planner-caption", text: L("warnings", "The command warns")}),
                                             el("ul", {}, ...list.map((w) => el("li", {text: w})))] : []));
  }

  // --- the per-GPU memory bar: every term of memory_terms, in GiB -------------------------------
  const KNOWN_TERMS = new Set(["weights", "activations", "non_torch", "kv_asked", "kv_unmet", "kv_free", "reserve"]);
  // (a term outside this set, e.g. cuda_graphs, takes one of the four "other" colours)
  function drawBar(report, gib) {
    const terms = report.memory_terms || [];
    const cap = report.runtime_memory_bytes;
    const capText = gib[0], overText = gib[gib.length - 1];
    const used = terms.reduce((s, t) => s + t.bytes, 0);
    const total = Math.max(cap, used);
    const strip = el("div", {cls: "ldf-bar-strip"});
    const legend = el("ul", {cls: "ldf-bar-legend"});
    const said = [];
    let extra = 0;
    terms.forEach((t, i) => {
      const key = KNOWN_TERMS.has(t.name) ? t.name : `other-${extra++ % 4}`;
      const name = L(`bar_${t.name}`, t.name.replace(/_/g, " "));
      const text = `${t.estimate ? "≈ " : ""}${gib[i + 1]}`;
      said.push(`${name} ${text}`);
      if (t.bytes > 0) {
        strip.append(el("span", {cls: `ldf-bar-part ldf-bar-${key}`, style: `width:${(100 * t.bytes / total).toFixed(3)}%`,
                                 "data-key": t.name, "data-bytes": String(t.bytes)}));
      }
      if (t.bytes > 0 || t.name === "kv_asked") {   // a zero term (SGLang's activations) is not drawn or listed
        legend.append(el("li", {"data-key": t.name, "data-bytes": String(t.bytes), "data-text": gib[i + 1]},
          el("span", {cls: `ldf-bar-swatch ldf-bar-${key}`}),
          el("span", {}, `${name} `, el("b", {text}), t.estimate ? paren(L("estimate", "estimate")) : "")));
      }
    });
    if (used > cap) {
      strip.append(el("span", {cls: "ldf-bar-capacity", style: `left:${(100 * cap / total).toFixed(3)}%`}),
                   el("span", {cls: "ldf-bar-over", style: `left:${(100 * cap / total).toFixed(3)}%;width:${(100 * (used - cap) / total).toFixed(3)}%`}));
      legend.append(el("li", {"data-key": "over", "data-bytes": String(used - cap), "data-text": overText},
        el("span", {cls: "ldf-bar-swatch ldf-bar-overkey"}), el("span", {}, `${L("bar_over")} `, el("b", {text: overText}))));
      said.push(`${L("bar_over")} ${overText}`);
    }
    strip.setAttribute("role", "img");
    strip.setAttribute("aria-label", `${L("bar")}${COLON}` + said.join(COMMA));
    const scale = el("div", {cls: "ldf-bar-scale"}, el("span", {text: "0"}),
                     el("span", {cls: "ldf-bar-cap", style: `left:${(100 * cap / total).toFixed(3)}%`, text: capText}));
    bar.replaceChildren(el("figcaption", {text: fill(L("bar_caption", "{bar} ({total} as the runtime reports it, {gpu})"),
                                                      {bar: L("bar"), total: capText, gpu: report.hardware})}),
                        strip, scale, legend);
    bar.dataset.capacity = String(cap);
    bar.dataset.used = String(used);
  }

  // --- the decode bound against batch (one run of the command per batch) -------------------------
  const NS = "http://www.w3.org/2000/svg";
  const svg = (tag, attrs = {}, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  let lastPoints = null, lastBatch = 1;
  async function drawChart(report, g, t0) {
    const batches = [];
    for (let b = 1; b <= 4096; b *= 2) batches.push(b);
    if (!batches.includes(report.batch)) batches.push(report.batch);
    batches.sort((x, y) => x - y);
    const pts = [];
    const files = configFiles();
    for (const b of batches) {
      let r = {code: 0, out: JSON.stringify(report)};
      if (b !== report.batch) {
        const reply = await call({runs: [{argv: argv({forPage: true, batch: b, json: true})}], files}, {gen: g});
        if (!reply || g !== generation) return;   // a newer change: its own chart follows
        r = reply.results[0];
      }
      if (r.code !== 0) continue;
      const j = JSON.parse(r.out);
      pts.push({batch: b, s: j.decode_step_s, binds: j.binds, fits: j.fits});
    }
    lastPoints = pts; lastBatch = report.batch;
    renderChart();
    chart.dataset.runs = String(runs);
    root.dataset.ldfChartMs = (performance.now() - t0).toFixed(1);
    root.dataset.ldfChart = String(runs);
  }
  function renderChart() {
    const pts = lastPoints;
    if (!pts || !pts.length) { chart.replaceChildren(); return; }
    const W = Math.max(280, Math.min(720, chart.clientWidth || root.clientWidth || 640));
    const H = Math.round(Math.min(320, Math.max(220, W * 0.55)));
    const m = {l: 56, r: 14, t: 12, b: 46};
    const lx = (b) => Math.log2(b), ly = (s) => Math.log10(s * 1e3);
    const x0 = 0, x1 = Math.max(12, lx(pts[pts.length - 1].batch));
    let y0 = Math.floor(Math.min(...pts.map((p) => ly(p.s)))), y1 = Math.ceil(Math.max(...pts.map((p) => ly(p.s))));
    if (y1 === y0) y1 = y0 + 1;
    const X = (b) => m.l + (lx(b) - x0) / (x1 - x0) * (W - m.l - m.r);
    const Y = (s) => H - m.b - (ly(s) - y0) / (y1 - y0) * (H - m.t - m.b);
    const g = svg("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img",
                          "aria-label": `${L("chart")}${COLON}${pts.length} ${L("x")}`});
    g.append(svg("title", {}, L("chart")));
    for (let k = y0; k <= y1; k++) {
      const y = H - m.b - (k - y0) / (y1 - y0) * (H - m.t - m.b);
      g.append(svg("line", {x1: m.l, x2: W - m.r, y1: y, y2: y, class: "ldf-chart-grid"}));
      const v = Math.pow(10, k);
      g.append(svg("text", {x: m.l - 6, y: y + 4, "text-anchor": "end", class: "ldf-chart-tick"},
                   v >= 1 ? v.toLocaleString("en-US") : v.toPrecision(1)));
    }
    const step = W < 420 ? 3 : 2;
    for (let e = 0; e <= x1; e += step) {
      const x = m.l + (e - x0) / (x1 - x0) * (W - m.l - m.r);
      g.append(svg("line", {x1: x, x2: x, y1: H - m.b, y2: H - m.b + 4, class: "ldf-chart-axis"}));
      g.append(svg("text", {x, y: H - m.b + 17, "text-anchor": "middle", class: "ldf-chart-tick"}, (2 ** e).toLocaleString("en-US")));
    }
    g.append(svg("line", {x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b, class: "ldf-chart-axis"}));
    g.append(svg("line", {x1: m.l, x2: m.l, y1: m.t, y2: H - m.b, class: "ldf-chart-axis"}));
    g.append(svg("text", {x: (m.l + W - m.r) / 2, y: H - 6, "text-anchor": "middle", class: "ldf-chart-label"}, L("x")));
    g.append(svg("text", {x: 14, y: (m.t + H - m.b) / 2, "text-anchor": "middle", class: "ldf-chart-label",
                          transform: `rotate(-90 14 ${(m.t + H - m.b) / 2})`}, L("y")));
    g.append(svg("polyline", {points: pts.map((p) => `${X(p.batch)},${Y(p.s)}`).join(" "), class: "ldf-chart-line"}));
    for (const p of pts) {
      const current = p.batch === lastBatch;
      if (current) {   // the reader's batch: a ring around its point, whatever the point's kind
        g.append(svg("circle", {cx: X(p.batch), cy: Y(p.s), r: 9, class: "ldf-chart-ring"}));
      }
      const c = svg("circle", {cx: X(p.batch), cy: Y(p.s), r: current ? 6 : 4.5,
        class: `ldf-chart-point ${p.fits ? `ldf-chart-${p.binds}` : "ldf-chart-nofit"}${current ? " ldf-chart-current" : ""}`,
        "data-batch": p.batch, "data-s": p.s, "data-binds": p.binds, "data-fits": p.fits ? "1" : "0"});
      c.append(svg("title", {}, `B = ${p.batch}${COLON}${p.s * 1e3} ms${COMMA}${L(p.binds)}${p.fits ? "" : COMMA + L("nofit")}`));
      g.append(c);
    }
    const legend = el("ul", {cls: "ldf-chart-legend"},
      el("li", {}, el("span", {cls: "ldf-chart-key ldf-chart-memory"}), L("memory")),
      el("li", {}, el("span", {cls: "ldf-chart-key ldf-chart-compute"}), L("compute")),
      el("li", {}, el("span", {cls: "ldf-chart-key ldf-chart-nofit"}), L("nofit")),
      el("li", {}, el("span", {cls: "ldf-chart-key ldf-chart-ringkey"}), L("current", "your batch")));
    chart.replaceChildren(el("figcaption", {text: L("chart")}), g, legend);
  }
  let rt = null;
  window.addEventListener("resize", () => { clearTimeout(rt); rt = setTimeout(renderChart, 150); });

  // --- events ----------------------------------------------------------------------------------
  const showConfig = () => { if (configBox) configBox.hidden = controls.model.value !== CONFIG; };
  const typed = (t) => t && ((t.tagName === "INPUT" && t.type === "text") || t.tagName === "TEXTAREA");
  form.addEventListener("input", (e) => {
    if (e.target === controls.file) return;
    showConfig();
    if (typed(e.target)) {   // typing: plan when it pauses, on a complete value
      showCommand();
      writeUrl();
      if (waitingFor()) { clearTimeout(timer); timer = null; root.dataset.ldfWaiting = "1"; settled(generation); return; }
      later();
    } else {
      now();
    }
  });
  form.addEventListener("change", (e) => {
    if (e.target === controls.file) { if (controls.file.files.length) readFile(controls.file.files[0]); return; }
    if (typed(e.target) && timer !== null) now();   // left the field: no need to wait for the pause
  });
  form.addEventListener("keydown", (e) => { if (e.key === "Enter" && typed(e.target) && e.target.tagName === "INPUT") { e.preventDefault(); now(); } });
  async function readFile(f) {
    controls.config.value = await f.text();
    controls.model.value = CONFIG;
    showConfig();
    now();
  }
  for (const t of [configBox, controls.config].filter(Boolean)) {
    t.addEventListener("dragover", (e) => { e.preventDefault(); configBox.classList.add("ldf-drop"); });
    t.addEventListener("dragleave", () => configBox.classList.remove("ldf-drop"));
    t.addEventListener("drop", (e) => {
      e.preventDefault();
      configBox.classList.remove("ldf-drop");
      if (e.dataTransfer.files.length) readFile(e.dataTransfer.files[0]);
    });
  }
  // a config.json dropped anywhere on the form opens the config box
  form.addEventListener("dragover", (e) => { if (e.dataTransfer && [...e.dataTransfer.types].includes("Files")) e.preventDefault(); });
  form.addEventListener("drop", (e) => {
    if (e.defaultPrevented || !e.dataTransfer.files.length) return;
    e.preventDefault();
    readFile(e.dataTransfer.files[0]);
  });

  // --- the explain box (book/planner.md's {ldf-explain}): `python -m llm_dataflow explain` on a
  // pasted command line or startup log, through this page's worker --------------------------------
  // Its form follows the explain command's parser as the planner's follows plan's: the positional
  // argument is the pasted text (written to a file in the worker), --config the model (the name in
  // the log, a preset or a pasted config.json), any other option a field of its kind.  The results
  // are the command's own: its text (one click away) and, drawn from `explain --json`'s "printed"
  // pieces, the same lines as a table, the error, the book's verdict and what to change.
  function mountExplain(box) {
    const xs = JSON.parse(box.querySelector(".ldf-explain-spec").textContent);
    const X = (k, fallback) => (xs.labels && xs.labels[k]) || (fallback === undefined ? k : fallback);
    const LOG = "engine.log";           // the file the worker writes the pasted text to
    const xopts = xs.options || [];
    const xc = {}, xhints = {}, xwaits = {};
    const xform = el("form", {cls: "ldf-explain-form", novalidate: true, "aria-label": X("form", "explain")});
    const logBox = el("fieldset", {cls: "ldf-planner-group ldf-explain-group-log"}, el("legend", {cls: "ldf-planner-legend", text: X("group_log", "Log")}));
    const depBox = el("fieldset", {cls: "ldf-planner-group ldf-explain-group-deployment"},
                      el("legend", {cls: "ldf-planner-legend", text: X("group_deployment", "Deployment")}));
    const logFields = el("div", {cls: "ldf-planner-fields"}), depFields = el("div", {cls: "ldf-planner-fields"});
    logBox.append(logFields); depBox.append(depFields);
    let xconfigBox = null;
    const xfield = (o, control, target, ...extra) => {
      const id = `ldf-explain-${o.dest}`;
      control.id = id;
      control.name = o.dest;
      xc[o.dest] = control;
      const flag = el("code", {cls: "ldf-planner-opt", text: o.flag || o.metavar || o.dest});
      const label = el("label", {for: id}, el("span", {cls: "ldf-planner-name", text: X(o.dest, o.flag || o.metavar || o.dest)}), " ", flag);
      const hint = el("p", {cls: "ldf-planner-hint", id: `${id}-hint`, text: helpOf(xs.labels, o)});
      xhints[o.dest] = hint;
      control.setAttribute("aria-describedby", hint.id);
      const wait = el("p", {cls: "ldf-planner-wait", id: `${id}-wait`, hidden: true, role: "status"});
      xwaits[o.dest] = wait;
      const f = el("div", {cls: `ldf-planner-field ldf-planner-${o.kind} ldf-explain-field`, "data-dest": o.dest},
                   ...(o.kind === "flag" ? [el("div", {cls: "ldf-planner-check"}, control, label)] : [label, control]), wait, hint, ...extra);
      target.append(f);
      return f;
    };
    for (const o of xopts) {
      if (o.kind === "model") {   // the positional FILE_OR_-: the pasted text
        const area = el("textarea", {rows: 10, spellcheck: "false", autocomplete: "off", autocapitalize: "off", wrap: "off",
                                     cls: "ldf-explain-log", placeholder: X("placeholder", "vllm serve MODEL ... or the engine's startup log")});
        const file = el("input", {type: "file", id: "ldf-explain-file", accept: ".log,.txt,text/plain"});
        xc.file = file;
        xfield(o, area, logFields, el("div", {cls: "ldf-planner-config-row"},
          el("label", {for: "ldf-explain-file", cls: "ldf-planner-file", text: X("file", "File")}), file));
        xhints[o.dest].textContent = X("log_hint", o.help || "");
      } else if (o.dest === "config") {   // the model: the log's name, a preset, or a pasted config.json
        const sel = el("select");
        sel.append(el("option", {value: "", text: X("from_log", "the name in the log")}));
        for (const p of xs.presets || []) sel.append(el("option", {value: p, text: p}));
        sel.append(el("option", {value: CONFIG, text: X("model_config", "config.json (paste it below)")}));
        const area = el("textarea", {id: "ldf-explain-configtext", rows: 5, spellcheck: "false", autocomplete: "off",
                                     placeholder: '{"model_type": "llama", "hidden_size": 4096, ...}'});
        const folder = el("input", {type: "text", id: "ldf-explain-folder", value: "my-model", autocomplete: "off", spellcheck: "false"});
        xc.configText = area; xc.folder = folder;
        xconfigBox = el("div", {cls: "ldf-planner-config", hidden: true},
          el("label", {for: "ldf-explain-configtext", text: X("config_paste", "config.json")}), area,
          el("div", {cls: "ldf-planner-config-row"}, el("label", {for: "ldf-explain-folder", text: X("folder", "Folder name")}), folder));
        const f = xfield(o, sel, depFields);
        f.classList.add("ldf-planner-model");
        depFields.append(xconfigBox);
      } else if (o.kind === "flag") {
        xfield(o, el("input", {type: "checkbox"}), depFields);
      } else {
        const c = el("input", {type: "text", autocomplete: "off", spellcheck: "false", autocapitalize: "off", enterkeyhint: "go"});
        if (o.suggestions) {
          const list = el("datalist", {id: `ldf-explain-${o.dest}-list`});
          for (const v of o.suggestions) list.append(el("option", {value: v}));
          c.setAttribute("list", list.id);
          depFields.append(list);
        }
        xfield(o, c, depFields);
      }
    }
    const go = el("button", {type: "submit", cls: "ldf-planner-start ldf-explain-go", text: X("go", "Explain")});
    const example = xs.example ? el("button", {type: "button", cls: "ldf-planner-start ldf-explain-example", text: X("example", "Example")}) : null;
    xform.append(logBox, depBox, el("div", {cls: "ldf-planner-config-row"}, go, example));

    const xerr = el("div", {cls: "ldf-explain-err", role: "alert", hidden: true});
    const xstatus = el("p", {cls: "ldf-explain-status", role: "status", hidden: true});
    const runsEl = el("div", {cls: "ldf-explain-runs"});
    const xraw = el("pre", {cls: "ldf-explain-text"});
    const xjson = el("pre", {cls: "ldf-explain-json", hidden: true});
    const xresult = el("script", {type: "application/json", cls: "ldf-explain-result"});
    const xouts = el("div", {cls: "ldf-explain-outputs", hidden: true},
      el("p", {cls: "ldf-planner-caption", text: X("table", "What the command prints")}), runsEl, xjson,
      el("details", {cls: "ldf-explain-raw"}, el("summary", {text: X("raw", "As the command prints it")}), xraw), xresult);
    const xcmd = el("code", {cls: "ldf-explain-command"});
    const xresults = el("section", {cls: "ldf-explain-results", id: "ldf-explain-results", "aria-label": X("table", "explain")},
      xstatus, xerr, xouts, el("div", {cls: "ldf-explain-cli"}, el("p", {cls: "ldf-planner-caption", text: X("cli", "The same on the command line")}),
                      el("div", {cls: "highlight"}, el("pre", {}, xcmd))));
    box.append(xform, xresults);

    const xfolder = () => (xc.folder.value.trim().replace(/[^A-Za-z0-9._-]+/g, "-").replace(/^[.-]+/, "") || "my-model");
    const configArg = () => (!xc.config ? "" : xc.config.value === CONFIG ? `${xfolder()}/config.json` : xc.config.value);
    function xargv(json) {
      const a = [xs.command, LOG];
      for (const o of xopts) {
        if (o.kind === "model") continue;
        const c = xc[o.dest];
        if (o.kind === "flag") { if (o.dest === "json" ? json || c.checked : c.checked) a.push(o.flag); continue; }
        const v = o.dest === "config" ? configArg() : c.value.trim();
        if (v !== "") a.push(o.flag, v);
      }
      if (json && !a.includes("--json")) a.push("--json");
      return a;
    }
    const showX = () => { xcmd.textContent = [xs.prog, ...xargv(false).map(quote)].join(" "); if (xconfigBox) xconfigBox.hidden = !xc.config || xc.config.value !== CONFIG; };
    function xwaiting() {
      let any = false;
      for (const o of xopts) {
        const c = xc[o.dest], w = xwaits[o.dest];
        if (!w || !c || c.tagName !== "INPUT" || c.type !== "text") continue;
        const inc = incomplete(o, c.value);
        w.hidden = !inc;
        if (inc) {
          const low = c.value.trim().toLowerCase();
          const m = (o.suggestions || []).filter((s) => s.toLowerCase().startsWith(low)).slice(0, 4);
          w.textContent = m.length && !c.value.includes("=") ? `${L("keeptyping", "keep typing")}${COLON}${m.join(LIST)}…` : `${L("keeptyping", "keep typing")}…`;
          any = true;
        }
      }
      return any;
    }
    function xmark(msg) {
      for (const c of Object.values(xc)) c.removeAttribute && c.removeAttribute("aria-invalid");
      if (!msg) return;
      const which = /nothing to read|no vLLM or SGLang line|not text|llama\.cpp|too large|MB/.test(msg) ? "source"
        : /hardware|GPU/.test(msg) ? "hardware" : /model|config/.test(msg) ? (xc.config && xc.config.value === CONFIG ? "configText" : "config") : null;
      if (which && xc[which]) xc[which].setAttribute("aria-invalid", "true");
    }
    function row(c) {
      const ok = c.ok === "yes" ? "yes" : c.ok === "NO" ? "no" : "";
      const label = X(`term_${c.term}`, c.label);
      return [el("tr", {cls: "ldf-explain-row", "data-term": c.term},
                 el("th", {scope: "row", text: label, title: label !== c.label ? c.label : null}),
                 el("td", {text: c.engine}), el("td", {text: c.book}), el("td", {text: c.diff}),
                 el("td", {cls: ok ? `ldf-explain-${ok}` : null, text: ok ? X(ok, ok === "no" ? "NO" : "yes") : ""})),
              el("tr", {cls: "ldf-explain-why"}, el("td", {colspan: 5}, c.why, " · ",
                 el("span", {cls: "ldf-explain-ch", text: fill(X("chapter", "chapter {ch}"), {ch: c.ch})})))];
    }
    function drawRun(r, i, n) {
      const p = r.printed;
      const sec = el("section", {cls: "ldf-explain-run", "data-run": String(i + 1), "data-engine": r.engine});
      if (n > 1) sec.append(el("p", {cls: "ldf-planner-caption", text: fill(X("run", "run {i} of {n}"), {i: i + 1, n})}));
      sec.append(el("p", {cls: "ldf-explain-title", text: p.head[0]}));
      sec.append(el("ul", {cls: "ldf-explain-settings"}, ...p.head.slice(1).map((h) => el("li", {text: h.trim()}))));
      if (p.cells.length) {
        sec.append(el("table", {cls: "ldf-explain-table"},
          el("thead", {}, el("tr", {}, ...["term", "engine", "book", "diff", "ok"].map((k) => el("th", {scope: "col", text: X(`col_${k}`, k)})))),
          el("tbody", {}, ...p.cells.flatMap(row))));
      } else {
        sec.append(el("p", {cls: "ldf-explain-none", text: X("nofigures", "no figures of the engine to compare")}));
      }
      let list = null;
      for (const t of p.tail) {
        if (t.startsWith("error (")) { sec.append(el("p", {cls: "ldf-explain-error", text: t})); list = null; }
        else if (t.startsWith("book: ")) { sec.append(el("p", {cls: "ldf-explain-verdict", text: t})); list = null; }
        else if (t === "what to change:") { sec.append(el("p", {cls: "ldf-planner-caption", text: X("change", "What to change")})); list = el("ul", {cls: "ldf-explain-changes"}); sec.append(list); }
        else if (list && /^\s+[+-] /.test(t)) {
          const m = t.trim().match(/^([+-]) (.*?): (.*)$/) || [null, "+", t.trim(), ""];
          list.append(el("li", {cls: m[1] === "+" ? "ldf-explain-works" : "ldf-explain-fails"}, el("code", {text: m[2]}), m[3] ? `: ${m[3]}` : ""));
        } else if (list && /^\s+cost: /.test(t) && list.lastChild) list.lastChild.append(el("span", {cls: "ldf-explain-cost", text: t.trim()}));
        else { sec.append(el("p", {cls: "ldf-explain-note", text: t})); list = null; }
      }
      return sec;
    }
    let xtimer = null, xgen = 0, xruns = 0;
    function xlater() { clearTimeout(xtimer); box.dataset.ldfPending = "1"; xtimer = setTimeout(xnow, PAUSE_MS); }
    function xnow() { clearTimeout(xtimer); xtimer = null; box.dataset.ldfPending = "1"; xupdate(); }
    async function xupdate() {
      showX();
      if (xwaiting()) { box.dataset.ldfWaiting = "1"; if (xtimer === null) delete box.dataset.ldfPending; return; }
      delete box.dataset.ldfWaiting;
      if (!spec.pyodide || !spec.worker || location.protocol === "file:" || root.dataset.ldfState === "failed") {
        xerr.hidden = false; xerr.textContent = X("unavailable", "Python cannot run on this page here: run the command below.");
        delete box.dataset.ldfPending; return;
      }
      const g = ++xgen;
      const t0 = performance.now();
      const files = {[LOG]: xc.source ? xc.source.value : ""};
      if (xc.config && xc.config.value === CONFIG) files[`${xfolder()}/config.json`] = xc.configText.value;
      const asJson = xc.json && xc.json.checked;
      if (!workerReady) { xstatus.hidden = false; xstatus.textContent = X("starting", "Python is starting: the explanation follows."); }
      // an explanation still queued (not begun) is stale now: drop it (the planner's own requests
      // are dropped by generation; these never are, whatever the planner does meanwhile)
      for (let i = queue.length - 1; i >= 0; i--) {
        if (queue[i].explain) { pending.get(queue[i].id).resolve(null); pending.delete(queue[i].id); queue.splice(i, 1); }
      }
      const reply = await call({runs: asJson ? [{argv: xargv(true)}] : [{argv: xargv(false)}, {argv: xargv(true)}], files, explain: true},
                               {gen: Number.MAX_SAFE_INTEGER, front: true});
      xstatus.hidden = true;
      if (!reply || g !== xgen) return;
      const shown = reply.results[0], j = reply.results[asJson ? 0 : 1];
      if (!shown || shown.code !== 0) {
        const msg = errorLine(shown ? shown.err : "error: no answer");
        xerr.hidden = false; xerr.textContent = msg; xmark(msg);
        xouts.hidden = true;
        box.dataset.ldfState = "error";
      } else {
        xerr.hidden = true; xerr.textContent = ""; xmark("");
        const res = JSON.parse(j.out);
        xresult.textContent = j.out;
        xraw.textContent = shown.out.replace(/\n$/, "");
        if (asJson) { xjson.textContent = shown.out.replace(/\n$/, ""); xjson.hidden = false; runsEl.replaceChildren(); }
        else { xjson.hidden = true; runsEl.replaceChildren(...res.map((r, i) => drawRun(r, i, res.length))); }
        xouts.hidden = false;
        box.dataset.ldfState = "ok";
      }
      box.dataset.ldfMs = (performance.now() - t0).toFixed(1);
      box.dataset.ldfPyMs = reply.results.reduce((t, r) => t + (r.ms || 0), 0).toFixed(1);   // the command's own Python
      box.dataset.ldfWaitMs = Math.max(0, reply.sentAt - t0).toFixed(1);   // waited for a run begun before
      box.dataset.ldfRuns = String(++xruns);
      if (g === xgen && xtimer === null) delete box.dataset.ldfPending;
    }
    xform.addEventListener("submit", (e) => { e.preventDefault(); xnow(); });
    xform.addEventListener("input", (e) => {
      if (e.target === xc.file) return;
      showX();
      if (typed(e.target)) xlater(); else xnow();
    });
    xform.addEventListener("change", (e) => {
      if (e.target === xc.file) { if (xc.file.files.length) readLog(xc.file.files[0]); return; }
      if (typed(e.target) && xtimer !== null) xnow();
    });
    xform.addEventListener("keydown", (e) => { if (e.key === "Enter" && typed(e.target) && e.target.tagName === "INPUT") { e.preventDefault(); xnow(); } });
    async function readLog(f) { xc.source.value = await f.text(); xnow(); }
    xc.source.addEventListener("dragover", (e) => e.preventDefault());
    xc.source.addEventListener("drop", (e) => { if (e.dataTransfer.files.length) { e.preventDefault(); readLog(e.dataTransfer.files[0]); } });
    if (example) example.addEventListener("click", () => {
      const ex = xs.example;
      xc.source.value = ex.log;
      if (xc.hardware) xc.hardware.value = ex.hardware || "";
      if (xc.config) {
        if (ex.config) { xc.config.value = CONFIG; xc.configText.value = ex.config; xc.folder.value = ex.folder || "my-model"; }
        else xc.config.value = ex.preset || "";
      }
      xnow();
    });
    showX();
  }

  // --- start -----------------------------------------------------------------------------------
  const MB = (b) => (b / 1e6).toFixed(1);
  const dl = spec.download || {total: 0};
  const status = (state, ...kids) => { statusEl.replaceChildren(...kids); statusEl.dataset.state = state; };
  let t0 = 0, bar0 = null;
  function showProgress(m) {
    if (!bar0) bar0 = el("progress", {max: String(m.total || dl.total || 1), value: "0", cls: "ldf-planner-progress"});
    bar0.max = m.total || dl.total || 1;
    bar0.value = Math.min(m.loaded, bar0.max);
    const text = m.phase === "core" ? L("loadingcore")
      : fill(L("downloading", "Downloading Python (Pyodide): {loaded} of {total} MB"), {loaded: MB(Math.min(m.loaded, bar0.max)), total: MB(bar0.max)});
    status("loading", el("span", {text: `${text} · ${((performance.now() - t0) / 1000).toFixed(1)} s`}), bar0);
    root.dataset.ldfLoaded = String(m.loaded);
  }
  function onFailed(message) {
    status("failed", document.createTextNode(`${L("failed")} ${message}`));
    root.dataset.ldfState = "failed";
    console.warn("planner:", message);
  }
  function onReady(m) {
    const ready = performance.now();
    root.dataset.ldfPhases = m.phases.map((x) => x.toFixed(0)).join(" ");
    root.dataset.ldfReady = ready.toFixed(0);           // ms since navigation start
    root.dataset.ldfLoadMs = (ready - t0).toFixed(0);   // ms from the download's start
    status("ready", document.createTextNode(`${L("ready")}${paren(`${((ready - t0) / 1000).toFixed(1)} s`)}`));
    now();
  }
  function startWorker() {
    t0 = performance.now();
    try {
      worker = new Worker(spec.worker, {type: "module", name: "llm_dataflow plan"});
    } catch (e) {
      onFailed(e && e.message ? e.message : String(e));
      return;
    }
    worker.onmessage = onWorker;
    worker.onerror = (e) => { e.preventDefault(); onFailed(e.message || "worker error"); };
    worker.postMessage({type: "init", pyodide: new URL(spec.pyodide, location.href).href,
                        core: new URL(spec.core, location.href).href, total: dl.total, moduleBytes: dl.moduleBytes || 0});
    showProgress({loaded: 0, total: dl.total, phase: "runtime"});
  }
  async function boot() {
    await readUrl();
    showConfig();
    showHints();
    showCommand();
    const xbox = document.querySelector(".ldf-explain");   // the explain box, further down the page
    if (xbox) mountExplain(xbox);
    if (location.protocol === "file:") { status("unavailable", document.createTextNode(L("fromfile"))); root.dataset.ldfState = "unavailable"; return; }
    if (!spec.pyodide || !spec.worker) { status("unavailable", document.createTextNode(L("nopyodide"))); root.dataset.ldfState = "unavailable"; return; }
    const conn = navigator.connection;
    if (conn && (conn.saveData || /(^|-)2g$/.test(conn.effectiveType || ""))) {   // the reader asked to save data
      const go = el("button", {type: "button", cls: "ldf-planner-start", text: fill(L("start", "Start the planner ({size} MB)"), {size: MB(dl.total)})});
      go.addEventListener("click", () => startWorker());
      status("waiting", document.createTextNode(fill(L("savedata", "Your browser asks to save data: the planner downloads {size} MB."), {size: MB(dl.total)}) + " "), go);
      root.dataset.ldfState = "waiting";
      return;
    }
    startWorker();
  }
  boot();
}

function ready() {
  const root = document.querySelector(".ldf-planner");
  if (root) start(root);
}
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready); else ready();
})();
