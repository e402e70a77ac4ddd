/* The web planner (book/planner.md): `python -m llm_dataflow plan` in the reader's browser.
 *
 * book/_ext/ldf_planner.py writes the page's spec (the CLI's options read from its parser, the
 * presets, the translated labels, where Pyodide and the package's core zip are) and adds this
 * script to that page only.  The page starts Pyodide (served by this site, _vendor/pyodide/),
 * unpacks the core zip (src/llm_dataflow/__init__.py + core/) and calls exactly
 * llm_dataflow.core.plan.main(argv): the table, the JSON, the memory bar and the decode-bound
 * chart all come from the CLI's own output, and a bad input shows the CLI's own message.
 * The settings live in the URL (?hardware=H100-SXM&tp=2...), so a link opens the same plan.
 *
 * A classic script, not a module: opened from disk (file://) a browser refuses module scripts, and
 * this one must still run there to say so and show the command line.
 */
(function () {
"use strict";
// The page's Python: main(argv) with its output captured, and the bar's parts from the JSON.
const BOOT = String.raw`
import contextlib, io, json, os, sys
sys.path.insert(0, "/home/pyodide/ldf")
from llm_dataflow.core.plan import main as _main
from llm_dataflow.core.units import fmt_bytes as _fmt_bytes
os.makedirs("/home/pyodide/work", exist_ok=True)
os.chdir("/home/pyodide/work")
os.environ["PYTHON_COLORS"] = "0"   # argparse asks on every parser; output goes to StringIO

def _ldf_run(argv_json):
    """main(argv) as the CLI runs it: {"code", "out", "err"} (a SystemExit is the exit status)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = _main(json.loads(argv_json))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
        except Exception as e:   # a bug, not bad input: one line, never a traceback
            code = 1
            print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
    return json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue()})

def _ldf_bar(report_json):
    """One GPU's memory from plan --json: weights, KV, activations, reserve, free (B), of the
    total the runtime reports (what the reserve is the rest of; any preset or a custom spec)."""
    r = json.loads(report_json)
    cap = r["runtime_memory_bytes"]
    parts = [("weights", r["weight_bytes_per_gpu"]), ("kv", r["kv_bytes_per_gpu"]),
             ("activations", r["activation_bytes_per_gpu"]), ("reserve", r["reserve_bytes_per_gpu"])]
    used = sum(v for _, v in parts)
    parts.append(("free", max(cap - used, 0)))
    return json.dumps({"capacity": cap, "capacity_text": _fmt_bytes(cap), "used": used,
                       "over_text": _fmt_bytes(max(used - cap, 0)),
                       "parts": [{"key": k, "bytes": v, "text": _fmt_bytes(v)} for k, v in parts]})
`;

function start(root) {
  const spec = JSON.parse(root.querySelector(".ldf-planner-spec").textContent);
  const L = (k) => (spec.labels && spec.labels[k]) || k;
  const CONFIG = "@config";            // the model select's value for a pasted config.json
  const WORK = "/home/pyodide/work";   // the working folder of the page's Python
  const PAGE_SKIPS = new Set(spec.pageSkips || []);   // options only the command line uses
  const opts = spec.options;
  const byDest = Object.fromEntries(opts.map((o) => [o.dest, o]));
  const statusEl = root.querySelector(".ldf-planner-status");
  let py = null, runPy = null, barPy = null, runs = 0, packedConfig = "", packedFor = null;

  // --- the form: one control per CLI option ---------------------------------------------------
  const el = (tag, attrs = {}, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") e.textContent = v; else if (k === "cls") e.className = v; else e.setAttribute(k, v === true ? "" : v);
    }
    for (const kid of kids) if (kid) e.append(kid);
    return e;
  };
  const form = el("form", {cls: "ldf-planner-form", novalidate: true});
  form.addEventListener("submit", (e) => e.preventDefault());
  const controls = {};
  const field = (o, control, extra) => {
    const id = `ldf-planner-${o.dest}`;
    control.id = id;
    control.name = o.dest;
    controls[o.dest] = control;
    const flag = o.flag ? el("code", {cls: "ldf-planner-opt", text: o.flag}) : el("code", {cls: "ldf-planner-opt", text: o.metavar || o.dest});
    const label = el("label", {for: id}, document.createTextNode(L(o.dest) + " "), flag);
    return el("div", {cls: `ldf-planner-field ldf-planner-${o.kind}`, "data-dest": o.dest}, label, control, extra);
  };
  let configBox = null;
  for (const o of opts) {
    if (o.kind === "model") {
      const sel = el("select");
      for (const p of spec.presets) sel.append(el("option", {value: p, text: p}));
      sel.append(el("option", {value: CONFIG, text: L("model_config")}));
      form.append(field(o, sel));
      const area = el("textarea", {id: "ldf-planner-config", rows: 7, spellcheck: "false",
                                   placeholder: '{"model_type": "llama", "hidden_size": 4096, ...}'});
      const file = el("input", {type: "file", id: "ldf-planner-file", accept: ".json,application/json"});
      const folder = el("input", {type: "text", id: "ldf-planner-folder", value: "my-model", autocomplete: "off",
                                  spellcheck: "false"});
      controls.config = area; controls.file = file; controls.folder = folder;
      configBox = el("div", {cls: "ldf-planner-config", hidden: true},
        el("label", {for: "ldf-planner-config", text: L("config")}), area,
        el("div", {cls: "ldf-planner-config-row"},
          el("label", {for: "ldf-planner-file", text: L("file")}), file,
          el("label", {for: "ldf-planner-folder", text: L("folder")}), folder));
      continue;
    }
    let c;
    if (o.kind === "choice") {
      c = el("select");
      if (!o.required) c.append(el("option", {value: "", text: `${L("default")}${o.default === null ? "" : ": " + o.default}`}));
      for (const v of o.choices) c.append(el("option", {value: v, text: v}));
      if (o.default !== null && o.required) c.value = String(o.default);
    } else if (o.kind === "flag") {
      c = el("input", {type: "checkbox"});
    } else {
      c = el("input", {type: "text", autocomplete: "off", spellcheck: "false",
                       inputmode: o.kind === "int" ? "numeric" : o.kind === "float" ? "decimal" : null,
                       placeholder: o.default === null || o.default === undefined ? L("default") : String(o.default)});
      if (o.suggestions) {   // e.g. --hardware: a preset name, or a custom spec typed in full
        const list = el("datalist", {id: `ldf-planner-${o.dest}-list`});
        for (const v of o.suggestions) list.append(el("option", {value: v}));
        c.setAttribute("list", list.id);
        form.append(list);
      }
    }
    const note = PAGE_SKIPS.has(o.dest) ? el("small", {cls: "ldf-planner-note", text: L(`note_${o.dest}`)}) : null;
    form.append(field(o, c, note));
  }
  const errorEl = el("div", {cls: "ldf-planner-error", role: "alert", hidden: true});
  const out = el("pre", {cls: "ldf-planner-table"});
  const result = el("script", {type: "application/json", cls: "ldf-planner-result"});
  const bar = el("figure", {cls: "ldf-planner-bar"});
  const chart = el("figure", {cls: "ldf-planner-chart"});
  const command = el("code", {cls: "ldf-planner-command"});
  const outputs = el("div", {cls: "ldf-planner-outputs", hidden: true},
    el("p", {cls: "ldf-planner-caption", text: L("table")}), el("div", {cls: "highlight"}, out), result, bar, chart);
  root.append(form);
  if (configBox) form.querySelector('[data-dest="model"]').after(configBox);
  root.append(errorEl, outputs,
    el("div", {cls: "ldf-planner-cli"}, el("p", {cls: "ldf-planner-caption", text: L("cli")}),
       el("div", {cls: "highlight"}, el("pre", {}, command))));
  root.append(statusEl);   // below the form on a phone too: the first thing after the controls
  form.after(statusEl);

  // --- settings <-> argv <-> URL -----------------------------------------------------------------
  const folderName = () => (controls.folder.value.trim().replace(/[^A-Za-z0-9._-]+/g, "-").replace(/^[.-]+/, "") || "my-model");
  const modelArg = () => controls.model.value === CONFIG ? `${folderName()}/config.json` : controls.model.value;
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
      let v = o.dest === "batch" && batch !== null ? String(batch) : c.value.trim();
      if (v === "" || (!o.required && v === String(o.default) && !(o.dest === "batch" && batch !== null))) continue;
      a.push(o.flag, v);
    }
    if (json) a.push("--json");
    return a;
  }
  const quote = (s) => /^[A-Za-z0-9_./:=@%+-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
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
  }
  if (!location.search) {   // a first visit: a small model on a common GPU
    controls.model.value = spec.presets.includes("Llama-3.1-8B") ? "Llama-3.1-8B" : (spec.presets.includes("Llama-3-8B") ? "Llama-3-8B" : spec.presets[0]);
    if (controls.hardware && (byDest.hardware.choices || byDest.hardware.suggestions || []).includes("H100-SXM")) controls.hardware.value = "H100-SXM";
    if (controls.context) controls.context.value = "4096";
    if (controls.batch) controls.batch.value = "8";
  }

  // --- running the CLI's main(argv) in Pyodide -------------------------------------------------
  function run(a) {
    return JSON.parse(runPy(JSON.stringify(a)));
  }
  function writeConfig() {
    if (controls.model.value !== CONFIG) return;
    const dir = `${WORK}/${folderName()}`;
    py.FS.mkdirTree(dir);
    py.FS.writeFile(`${dir}/config.json`, controls.config.value);
  }
  function errorLine(stderr) {
    // the CLI prints its usage line, then "<prog>: error: <message>"; the page shows the message
    const lines = stderr.trimEnd().split("\n");
    const i = lines.findIndex((l) => / error: /.test(l) || l.startsWith("error: "));
    const tb = lines.findIndex((l) => l.startsWith("Traceback"));
    if (i >= 0) return lines.slice(i).join("\n");
    if (tb >= 0) return lines[lines.length - 1];   // never a traceback on the page
    return lines.join("\n");
  }
  function showError(msg) {
    errorEl.hidden = !msg;
    errorEl.textContent = msg || "";
    for (const c of Object.values(controls)) c.removeAttribute("aria-invalid");
    if (!msg) return;
    const m = msg.match(/argument (--[\w-]+|[A-Z_]+)/);
    if (m) {
      const o = m[1].startsWith("--") ? opts.find((x) => x.flag === m[1]) : opts.find((x) => x.kind === "model");
      const c = o && (o.kind === "model" && controls.model.value === CONFIG ? controls.config : controls[o.dest]);
      if (c) c.setAttribute("aria-invalid", "true");
    }
  }
  // The book's scroll cue (book/_ext/static/ldf.js marks wide boxes on load and on resize): the
  // table appears after load, so its box is marked here, by the same rule, as soon as it is drawn.
  function markScroll() {
    const over = out.scrollWidth > out.clientWidth + 1;
    out.classList.toggle("ldf-scrolls", over);
    if (over) {
      const end = out.scrollLeft + out.clientWidth >= out.scrollWidth - 1;
      out.setAttribute("data-ldf-more", out.scrollLeft <= 1 ? "right" : end ? "left" : "both");
      out.setAttribute("tabindex", "0");
    } else {
      out.removeAttribute("data-ldf-more");
    }
  }
  window.addEventListener("resize", () => setTimeout(markScroll, 120));

  // One change: the table (or JSON), the error and the bar at once (two runs of main); the chart
  // after it, one run per batch in its own task, so typing never waits for it (a newer change
  // drops the older chart's remaining runs).
  let generation = 0;
  function update() {
    showCommand();
    writeUrl();
    if (!runPy) return;
    const g = ++generation;
    const t0 = performance.now();
    writeConfig();
    const a = argv({forPage: true});
    const shown = run(a);
    let report = null;
    if (shown.code !== 0) {
      showError(errorLine(shown.err));
      outputs.hidden = true;
      root.dataset.ldfState = "error";
    } else {
      const j = controls.json && controls.json.checked ? shown : run(argv({forPage: true, json: true}));
      report = JSON.parse(j.out);
      showError("");
      out.textContent = shown.out.replace(/\n$/, "");
      result.textContent = j.out;
      drawBar(report);
      outputs.hidden = false;
      root.dataset.ldfState = "ok";
    }
    root.dataset.ldfMs = (performance.now() - t0).toFixed(1);
    root.dataset.ldfRuns = String(++runs);
    markScroll();
    if (report) drawChart(report, g, t0);
  }

  // --- the per-GPU memory bar -------------------------------------------------------------------
  function drawBar(report) {
    const b = JSON.parse(barPy(JSON.stringify(report)));
    const total = Math.max(b.capacity, b.used);
    const strip = el("div", {cls: "ldf-bar-strip", role: "img",
      "aria-label": `${L("bar")}: ` + b.parts.map((p) => `${L("bar_" + p.key)} ${p.text}`).join(", ")});
    const legend = el("ul", {cls: "ldf-bar-legend"});
    for (const p of b.parts) {
      if (p.bytes <= 0 && p.key === "free") continue;
      const w = 100 * Math.max(p.bytes, 0) / total;
      strip.append(el("span", {cls: `ldf-bar-part ldf-bar-${p.key}`, style: `width:${w.toFixed(3)}%`,
                               "data-key": p.key, "data-bytes": String(p.bytes)}));
      legend.append(el("li", {"data-key": p.key, "data-bytes": String(p.bytes)},
        el("span", {cls: `ldf-bar-swatch ldf-bar-${p.key}`}), document.createTextNode(`${L("bar_" + p.key)} ${p.text}`)));
    }
    if (b.used > b.capacity) {
      strip.append(el("span", {cls: "ldf-bar-capacity", style: `left:${(100 * b.capacity / total).toFixed(3)}%`}));
      legend.append(el("li", {"data-key": "over", "data-bytes": String(b.used - b.capacity)},
        el("span", {cls: "ldf-bar-swatch ldf-bar-over"}), document.createTextNode(`${L("bar_over")} ${b.over_text}`)));
    }
    bar.replaceChildren(el("figcaption", {text: `${L("bar")} (${b.capacity_text}, ${report.hardware})`}), strip, legend);
    bar.dataset.capacity = String(b.capacity);
  }

  // --- the decode bound against batch (one CLI run per batch) ------------------------------------
  const NS = "http://www.w3.org/2000/svg";
  const svg = (tag, attrs = {}, text) => {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  };
  let lastPoints = null, lastBatch = 1;
  const nextTask = () => new Promise((r) => setTimeout(r, 0));
  async function drawChart(report, g, t0) {
    const batches = [];
    for (let b = 1; b <= 4096; b *= 2) batches.push(b);
    if (!batches.includes(report.batch)) batches.push(report.batch);
    batches.sort((x, y) => x - y);
    const pts = [];
    for (const b of batches) {
      let r = {code: 0, out: JSON.stringify(report)};
      if (b !== report.batch) {
        await nextTask();
        if (g !== generation) return;   // a newer change: its own chart follows
        r = run(argv({forPage: true, batch: b, json: true}));
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
    const H = Math.round(Math.min(320, Math.max(220, W * 0.5)));
    const m = {l: 58, r: 12, t: 12, b: 44};
    const lx = (b) => Math.log2(b), ly = (s) => Math.log10(s * 1e3);
    const x0 = 0, x1 = Math.max(12, lx(pts[pts.length - 1].batch));
    let y0 = Math.floor(Math.min(...pts.map((p) => ly(p.s)))), y1 = Math.ceil(Math.max(...pts.map((p) => ly(p.s))));
    if (y1 === y0) y1 = y0 + 1;
    const X = (b) => m.l + (lx(b) - x0) / (x1 - x0) * (W - m.l - m.r);
    const Y = (s) => H - m.b - (ly(s) - y0) / (y1 - y0) * (H - m.t - m.b);
    const g = svg("svg", {width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img",
                          "aria-label": `${L("chart")}: ${pts.length} ${L("x")}`});
    g.append(svg("title", {}, L("chart")));
    for (let k = y0; k <= y1; k++) {
      const y = H - m.b - (k - y0) / (y1 - y0) * (H - m.t - m.b);
      g.append(svg("line", {x1: m.l, x2: W - m.r, y1: y, y2: y, class: "ldf-chart-grid"}));
      const v = Math.pow(10, k);
      g.append(svg("text", {x: m.l - 6, y: y + 4, "text-anchor": "end", class: "ldf-chart-tick"},
                   v >= 1 ? String(v) : v.toPrecision(1)));
    }
    for (let e = 0; e <= x1; e += 2) {
      const x = m.l + (e - x0) / (x1 - x0) * (W - m.l - m.r);
      g.append(svg("line", {x1: x, x2: x, y1: H - m.b, y2: H - m.b + 4, class: "ldf-chart-axis"}));
      g.append(svg("text", {x, y: H - m.b + 16, "text-anchor": "middle", class: "ldf-chart-tick"}, String(2 ** e)));
    }
    g.append(svg("line", {x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b, class: "ldf-chart-axis"}));
    g.append(svg("line", {x1: m.l, x2: m.l, y1: m.t, y2: H - m.b, class: "ldf-chart-axis"}));
    g.append(svg("text", {x: (m.l + W - m.r) / 2, y: H - 6, "text-anchor": "middle", class: "ldf-chart-label"}, L("x")));
    g.append(svg("text", {x: 14, y: (m.t + H - m.b) / 2, "text-anchor": "middle", class: "ldf-chart-label",
                          transform: `rotate(-90 14 ${(m.t + H - m.b) / 2})`}, L("y")));
    g.append(svg("polyline", {points: pts.map((p) => `${X(p.batch)},${Y(p.s)}`).join(" "), class: "ldf-chart-line"}));
    for (const p of pts) {
      const c = svg("circle", {cx: X(p.batch), cy: Y(p.s), r: p.batch === lastBatch ? 6 : 4,
        class: `ldf-chart-point ldf-chart-${p.binds}${p.fits ? "" : " ldf-chart-nofit"}${p.batch === lastBatch ? " ldf-chart-current" : ""}`,
        "data-batch": p.batch, "data-s": p.s, "data-binds": p.binds, "data-fits": p.fits ? "1" : "0"});
      c.append(svg("title", {}, `B = ${p.batch}: ${p.s * 1e3} ms, ${L(p.binds)}${p.fits ? "" : ", " + L("nofit")}`));
      g.append(c);
    }
    const legend = el("ul", {cls: "ldf-chart-legend"},
      el("li", {}, el("span", {cls: "ldf-chart-key ldf-chart-memory"}), document.createTextNode(L("memory"))),
      el("li", {}, el("span", {cls: "ldf-chart-key ldf-chart-compute"}), document.createTextNode(L("compute"))),
      el("li", {}, el("span", {cls: "ldf-chart-key ldf-chart-nofit"}), document.createTextNode(L("nofit"))));
    chart.replaceChildren(el("figcaption", {text: L("chart")}), g, legend);
  }
  let rt = null;
  window.addEventListener("resize", () => { clearTimeout(rt); rt = setTimeout(renderChart, 150); });

  // --- events ----------------------------------------------------------------------------------
  const showConfig = () => { if (configBox) configBox.hidden = controls.model.value !== CONFIG; };
  form.addEventListener("input", (e) => { if (e.target !== controls.file) { showConfig(); update(); } });
  form.addEventListener("change", (e) => {
    if (e.target === controls.file && controls.file.files.length) readFile(controls.file.files[0]);
  });
  async function readFile(f) {
    controls.config.value = await f.text();
    controls.model.value = CONFIG;
    showConfig();
    update();
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

  // --- start -----------------------------------------------------------------------------------
  const status = (text, state) => { statusEl.textContent = text; statusEl.dataset.state = state; };
  async function boot() {
    await readUrl();
    showConfig();
    update();
    if (location.protocol === "file:") { status(L("fromfile"), "unavailable"); root.dataset.ldfState = "unavailable"; return; }
    if (!spec.pyodide) { status(L("nopyodide"), "unavailable"); root.dataset.ldfState = "unavailable"; return; }
    const t0 = performance.now();
    let phase = L("loading");
    const tick = setInterval(() => status(`${phase} ${((performance.now() - t0) / 1000).toFixed(1)} s`, "loading"), 100);
    try {
      const zip = fetch(spec.core);   // in parallel with the runtime
      const {loadPyodide} = await import(spec.pyodide + "pyodide.mjs");
      const t1 = performance.now();
      py = await loadPyodide({indexURL: spec.pyodide, packages: [], stdout: () => {}, stderr: () => {}});
      const t2 = performance.now();
      phase = L("loadingcore");
      const z = await zip;
      if (!z.ok) throw new Error(`${spec.core}: HTTP ${z.status}`);
      py.unpackArchive(await z.arrayBuffer(), "zip", {extractDir: "/home/pyodide/ldf"});
      py.runPython(BOOT);
      root.dataset.ldfPhases = [t1 - t0, t2 - t1, performance.now() - t2].map((x) => x.toFixed(0)).join(" ");
      runPy = py.globals.get("_ldf_run");
      barPy = py.globals.get("_ldf_bar");
    } catch (e) {
      clearInterval(tick);
      status(`${L("failed")} ${e && e.message ? e.message.split("\n").pop() : e}`, "failed");
      root.dataset.ldfState = "failed";
      console.warn("planner:", e);
      return;
    }
    clearInterval(tick);
    const ready = performance.now();
    update();
    status(`${L("ready")} (${((ready - t0) / 1000).toFixed(1)} s)`, "ready");
    root.dataset.ldfReady = ready.toFixed(0);           // ms since navigation start
    root.dataset.ldfLoadMs = (ready - t0).toFixed(0);   // ms from this script's start
  }
  boot();
}

function ready() {
  const root = document.querySelector(".ldf-planner");
  if (root) start(root);
}
if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", ready); else ready();
})();
