/* The web planner's Python (book/_ext/planner/planner.js starts this module worker).
 *
 * Pyodide runs here, off the page's main thread, so a plan never freezes typing or scrolling.
 * The worker is generic: a "run" request gives any argv of `python -m llm_dataflow` (plan today;
 * another sub-command tomorrow), optional files to write first (a pasted config.json, a log) and
 * optional stdin text; the package's own __main__ runs exactly as the command does, and the reply
 * is {code, out, err, ms} per argv.  Nothing here knows what `plan` prints.
 *
 * Messages in:  {type: "init", pyodide, core, total}              (once)
 *               {type: "run", id, runs: [{argv, stdin?}], files?: {path: text}, gib?: [bytes]}
 * Messages out: {type: "progress", loaded, total, phase}          (while starting)
 *               {type: "ready", phases: [ms, ms, ms]} | {type: "failed", message}
 *               {type: "result", id, results: [{code, out, err, ms}], gib?: [text]}
 *
 * ``gib`` formats byte counts with the core's own fmt_gib (llm_dataflow.core.units), so the page's
 * memory bar speaks the table's unit to the digit.
 */
const WORK = "/home/pyodide/work";
let py = null, runMain = null, fmtGib = null;
let loaded = 0, total = 0, phase = "runtime", lastPost = 0;

const BOOT = `
import contextlib, io, json, os, runpy, sys
sys.path.insert(0, "/home/pyodide/ldf")
from llm_dataflow.core.units import fmt_gib as _fmt_gib
os.makedirs("${WORK}", exist_ok=True)
os.chdir("${WORK}")
os.environ["PYTHON_COLORS"] = "0"   # argparse asks on every parser; output goes to StringIO

def _ldf_main(argv_json, stdin_text):
    """python -m llm_dataflow ARGV, as a shell runs it: {"code", "out", "err"}."""
    out, err = io.StringIO(), io.StringIO()
    old_argv, old_stdin = sys.argv, sys.stdin
    sys.argv = ["python -m llm_dataflow", *json.loads(argv_json)]
    sys.stdin = io.StringIO(stdin_text or "")
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module("llm_dataflow", run_name="__main__", alter_sys=False)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
        except Exception as e:   # a bug, not bad input: one line, never a traceback
            code = 1
            print(f"error: {type(e).__name__}: {e}", file=sys.stderr)
        finally:
            sys.argv, sys.stdin = old_argv, old_stdin
    return json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue()})

def _ldf_gib(values_json):
    return json.dumps([_fmt_gib(v) for v in json.loads(values_json)])
`;

function post(msg) { self.postMessage(msg); }
function progress(force) {
  const now = performance.now();
  if (force || now - lastPost > 80) { lastPost = now; post({type: "progress", loaded, total, phase}); }
}

// Count the bytes of every file Pyodide fetches (the runtime, its standard library, the lock
// file, the package's core), so the page can say "4.2 of 13.6 MB".  The body is passed on as it
// arrives: WebAssembly still compiles while it streams.
const realFetch = self.fetch.bind(self);
self.fetch = async (input, init) => {
  const r = await realFetch(input, init);
  if (!r.body) return r;
  const reader = r.body.getReader();
  const body = new ReadableStream({
    async pull(c) {
      const {done, value} = await reader.read();
      if (done) { c.close(); progress(true); return; }
      loaded += value.byteLength;
      progress(false);
      c.enqueue(value);
    },
    cancel(reason) { return reader.cancel(reason); },
  });
  return new Response(body, {status: r.status, statusText: r.statusText, headers: r.headers});
};

async function init(m) {
  total = m.total || 0;
  const t0 = performance.now();
  progress(true);
  const zip = self.fetch(m.core).then((z) => {
    if (!z.ok) throw new Error(`${m.core}: HTTP ${z.status}`);
    return z.arrayBuffer();
  });
  const {loadPyodide} = await import(m.pyodide + "pyodide.mjs");
  loaded += m.moduleBytes || 0;   // the two .mjs files arrive by import, not by fetch
  progress(true);
  py = await loadPyodide({indexURL: m.pyodide, packages: [], stdout: () => {}, stderr: () => {}});
  const t1 = performance.now();
  phase = "core";
  progress(true);
  py.unpackArchive(await zip, "zip", {extractDir: "/home/pyodide/ldf"});
  py.runPython(BOOT);
  runMain = py.globals.get("_ldf_main");
  fmtGib = py.globals.get("_ldf_gib");
  // import the command's modules now, not in the reader's first change
  runMain(JSON.stringify(["plan", "--help"]), "");
  const t2 = performance.now();
  post({type: "ready", phases: [t1 - t0, t2 - t1]});
}

function run(m) {
  const files = m.files || {};
  for (const [path, text] of Object.entries(files)) {
    const full = path.startsWith("/") ? path : `${WORK}/${path}`;
    py.FS.mkdirTree(full.slice(0, full.lastIndexOf("/")));
    py.FS.writeFile(full, text);
  }
  const results = (m.runs || []).map((r) => {
    const t = performance.now();
    const res = JSON.parse(runMain(JSON.stringify(r.argv), r.stdin || ""));
    res.ms = performance.now() - t;
    return res;
  });
  const reply = {type: "result", id: m.id, results};
  if (m.gib) reply.gib = JSON.parse(fmtGib(JSON.stringify(m.gib)));
  post(reply);
}

let started = null;
self.onmessage = async (e) => {
  const m = e.data;
  if (m.type === "init") {
    started = init(m).catch((err) => post({type: "failed", message: String(err && err.message || err).split("\n").pop()}));
    return;
  }
  await started;
  if (!runMain) { post({type: "result", id: m.id, results: [], failed: true}); return; }
  try {
    if (m.type === "run") run(m);
  } catch (err) {
    post({type: "result", id: m.id, results: [{code: 1, out: "", err: `error: ${err}`, ms: 0}]});
  }
};
