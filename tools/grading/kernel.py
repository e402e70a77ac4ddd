"""One student's kernel: started in an empty folder, fed cells one at a
time with a time limit each, asked for values and calls through :mod:`grading.wire`, and
restarted (then brought back to where it was) when a cell kills it or ignores an interrupt.

The kernel gets a minimal environment (``PATH``, ``PYTHONPATH``, the locale, and ``HOME`` /
``TMPDIR`` inside the submission's temporary folder), talks over Unix sockets in a folder beside
the notebook's (no TCP port), and never sees the grader's files: the source notebooks, the specs
and the expected values stay in the grader's process.
"""
from __future__ import annotations

import json
import os
import queue
import secrets
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import wire

#: environment variables a kernel inherits from the grader (everything else is dropped)
ENV_KEEP = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "LC_CTYPE", "VIRTUAL_ENV", "SYSTEMROOT")
#: seconds a kernel gets to stop after an interrupt before it is killed
INTERRUPT_GRACE = 5.0
#: characters of a cell's output kept for the feedback
MAX_OUTPUT_CHARS = 20_000


class KernelTimeout(BaseException):
    """A request overran its time limit (the kernel was interrupted or restarted).  A
    ``BaseException``, so a test's ``except Exception`` cannot swallow it."""


class KernelDied(BaseException):
    """The kernel died while serving a request (it was restarted)."""


class KernelLost(BaseException):
    """The kernel could not be brought back (it dies again while its cells are replayed)."""


@dataclass
class CellRun:
    """What running one cell did: ``status`` is ``ok``, ``error``, ``timeout`` (interrupted),
    ``hung`` (ignored the interrupt: killed) or ``died``; ``outputs`` are nbformat outputs."""

    status: str
    outputs: list = field(default_factory=list)
    ename: str = ""
    evalue: str = ""
    seconds: float = 0.0


def _spec_manager():
    from jupyter_client.kernelspec import KernelSpec, KernelSpecManager

    class _Specs(KernelSpecManager):
        """The grader's own kernel: this interpreter's ipykernel, no history database."""

        def get_kernel_spec(self, kernel_name):
            return KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}",
                                    "--HistoryManager.enabled=False"],
                              display_name="ldf-grader", language="python", env={})

    return _Specs()


def kernel_env(home: Path) -> dict:
    """The environment of a student's kernel whose private folders live under ``home``."""
    env = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "/usr/bin:/bin")
    for d in ("home", "tmp"):
        (home / d).mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home / "home"), TMPDIR=str(home / "tmp"), MPLCONFIGDIR=str(home / "tmp"),
               IPYTHONDIR=str(home / "home" / ".ipython"), JUPYTER_RUNTIME_DIR=str(home / "tmp"),
               MPLBACKEND="Agg", PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1", OMP_WAIT_POLICY="PASSIVE", PYDEVD_DISABLE_FILE_VALIDATION="1")
    return env


class Kernel:
    """A student's kernel.  ``cwd`` is its working folder (empty); ``private`` a folder of the
    submission's own (home, tmp, sockets), not the kernel's working folder.

    ``history`` lists the cells that ran without killing the kernel, replayed after a restart.
    """

    def __init__(self, cwd: Path, private: Path, start_timeout: float = 120.0, user: str | None = None):
        self.cwd, self.private, self.start_timeout, self.user = cwd, private, start_timeout, user
        self.km = self.kc = None
        self.history: list[tuple[str, float]] = []
        self.restarts = 0
        self._wire_loaded = False

    # -- life cycle ---------------------------------------------------------------------------
    def start(self) -> None:
        from jupyter_client import KernelManager

        conn = self.private / "conn"
        conn.mkdir(parents=True, exist_ok=True)
        self.km = KernelManager(kernel_name="ldf-grader", kernel_spec_manager=_spec_manager(),
                                transport="ipc", ip=str(conn / f"k{self.restarts}"))
        self.km.connection_file = str(conn / f"kernel-{self.restarts}.json")
        env, extra = kernel_env(self.private), {}
        if self.user:
            extra = self._as_user(conn)
        self.km.start_kernel(cwd=str(self.cwd), env=env, **extra)
        self.kc = self.km.client()
        self.kc.start_channels()
        try:
            self.kc.wait_for_ready(timeout=self.start_timeout)
        except RuntimeError as exc:
            raise KernelLost(f"the kernel did not start: {exc}") from None
        # the kernel has read its connection file: delete it, so that no other process (another
        # submission graded at the same time) finds the key that signs this kernel's messages
        self.km.cleanup_connection_file()
        self._wire_loaded = False

    def _as_user(self, conn: Path) -> dict:
        """Run the kernel as the unprivileged account ``self.user`` (the grader must be root):
        its folders and connection file become that account's, nothing else does — files the
        account cannot read (a private ``--source``, mode 700) stay out of the kernel's reach.

        Raises:
            KernelLost: no such account, or the grader is not root.
        """
        import pwd

        try:
            pw = pwd.getpwnam(self.user)
        except KeyError:
            raise KernelLost(f"--kernel-user {self.user!r}: no such account") from None
        if os.geteuid() != 0:
            raise KernelLost(f"--kernel-user {self.user!r} needs the grader to run as root")
        for top in (self.cwd, self.private):
            for p in [top, *top.rglob("*")]:
                os.chown(p, pw.pw_uid, pw.pw_gid)
            os.chmod(top.parent, 0o711)     # the submission's folder: passable, not listable
        self.km.write_connection_file()
        os.chown(self.km.connection_file, pw.pw_uid, pw.pw_gid)
        return {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}

    def _pid(self) -> int | None:
        prov = getattr(self.km, "provisioner", None)
        proc = getattr(prov, "process", None)
        return getattr(proc, "pid", None)

    def kill(self) -> None:
        """Kill the kernel and every process it started."""
        import psutil

        pid = self._pid() if self.km else None
        if pid:
            try:
                parent = psutil.Process(pid)
                procs = parent.children(recursive=True) + [parent]
            except psutil.NoSuchProcess:
                procs = []
            for p in procs:
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(procs, timeout=5)
        if self.kc is not None:
            self.kc.stop_channels()
        if self.km is not None:
            try:
                self.km.shutdown_kernel(now=True)
            except Exception:  # noqa: BLE001 - already dead
                pass
            try:
                self.km.cleanup_resources()
            except Exception:  # noqa: BLE001
                pass
        self.km = self.kc = None

    close = kill

    def restart(self) -> None:
        """A fresh kernel brought back to where this one was: the cells of ``history`` replayed.

        Raises:
            KernelLost: the fresh kernel dies or hangs again while they are replayed.
        """
        self.kill()
        self.restarts += 1
        self.start()
        for code, limit in self.history:
            run = self._execute(code, limit)
            if run.status in ("died", "hung", "timeout"):
                self.kill()
                raise KernelLost(f"the kernel {run.status} again while earlier cells were re-run")

    # -- running code -------------------------------------------------------------------------
    def run_cell(self, code: str, timeout: float, remember: bool = True) -> CellRun:
        """Run one cell.  A cell that overruns ``timeout`` is interrupted; one that ignores the
        interrupt, or kills the kernel, leaves a restarted kernel behind (its earlier cells
        replayed).  A cell that ran (with or without an error) joins ``history``.

        Raises:
            KernelLost: the kernel could not be brought back.
        """
        run = self._execute(code, timeout)
        if run.status in ("died", "hung"):
            self.restart()
        elif remember and run.status in ("ok", "error"):
            self.history.append((code, timeout))
        return run

    def _execute(self, code: str, timeout: float) -> CellRun:
        t0 = time.monotonic()
        msg_id = self.kc.execute(code, store_history=False, allow_stdin=False, stop_on_error=False)
        run = CellRun("ok")
        deadline = t0 + timeout
        interrupted = False
        chars = 0
        while True:
            now = time.monotonic()
            if now > deadline:
                if interrupted:
                    run.status = "hung"
                    self.kill_quietly()
                    break
                self.km.interrupt_kernel()
                interrupted = True
                deadline = now + INTERRUPT_GRACE
                continue
            try:
                msg = self.kc.get_iopub_msg(timeout=0.05)
            except queue.Empty:
                if not self.km.is_alive():
                    run.status = "died"
                    break
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content.get("execution_state") == "idle":
                break
            if kind == "error":
                run.status = "error"
                run.ename, run.evalue = content.get("ename", ""), content.get("evalue", "")
            if kind in ("stream", "display_data", "execute_result", "error") and chars < MAX_OUTPUT_CHARS:
                out = _as_output(kind, content)
                chars += len(json.dumps(out))
                run.outputs.append(out)
        if interrupted and run.status != "hung":
            run.status = "timeout"
        if run.status not in ("died", "hung"):
            self._drain_shell(msg_id)
        run.seconds = time.monotonic() - t0
        return run

    def kill_quietly(self) -> None:
        try:
            self.kill()
        except Exception:  # noqa: BLE001
            self.km = self.kc = None

    def _drain_shell(self, msg_id: str) -> None:
        end = time.monotonic() + 2.0
        while time.monotonic() < end:
            try:
                msg = self.kc.get_shell_msg(timeout=0.2)
            except queue.Empty:
                return
            if msg.get("parent_header", {}).get("msg_id") == msg_id:
                return

    # -- the wire -----------------------------------------------------------------------------
    def _load_wire(self) -> None:
        src = Path(wire.__file__).read_text(encoding="utf-8")
        code = ("import sys as _s, types as _t\n_m = _t.ModuleType('_ldf_wire')\n"
                f"exec(compile({src!r}, '_ldf_wire', 'exec'), _m.__dict__)\n_s.modules['_ldf_wire'] = _m\n"
                "del _s, _t, _m\n")
        run = self._execute(code, 60)
        if run.status != "ok":
            raise KernelLost(f"the grader's helper could not be loaded in the kernel: {run.status} "
                             f"{run.ename}: {run.evalue}")
        self._wire_loaded = True

    def request(self, req: dict, timeout: float) -> dict:
        """Send one request (:func:`grading.wire.serve`) and return its reply.

        Raises:
            KernelTimeout: it overran ``timeout`` (the kernel was interrupted, or restarted).
            KernelDied: the kernel died serving it (restarted).
            KernelLost: the kernel could not be brought back.
        """
        if not self._wire_loaded:
            self._load_wire()
        nonce = secrets.token_hex(16)
        body = json.dumps(dict(req, nonce=nonce))
        run = self._execute(f"__import__('_ldf_wire').serve({body!r})", timeout)
        if run.status in ("died", "hung"):
            self.restart()
            if run.status == "died":
                raise KernelDied("the kernel died")
            raise KernelTimeout(f"no answer within {timeout:g} s (the kernel ignored the interrupt and was restarted)")
        if run.status == "timeout":
            raise KernelTimeout(f"no answer within {timeout:g} s")
        for out in reversed(run.outputs):
            data = out.get("data", {}).get(wire.MIME) if out.get("output_type") == "display_data" else None
            if isinstance(data, dict) and data.get("nonce") == nonce:
                return data.get("reply") or {}
        why = f"{run.ename}: {run.evalue}" if run.status == "error" else "no reply"
        return {"ok": False, "exc": {"type": "GraderWireError", "mro": ["GraderWireError"],
                                     "message": f"the kernel sent no answer ({why}); did the notebook "
                                                "replace a module the grader needs?", "traceback": ""}}


def _as_output(kind: str, content: dict) -> dict:
    """An iopub message as an nbformat output."""
    if kind == "stream":
        return {"output_type": "stream", "name": content.get("name", "stdout"), "text": content.get("text", "")}
    if kind == "error":
        return {"output_type": "error", "ename": content.get("ename", ""), "evalue": content.get("evalue", ""),
                "traceback": content.get("traceback", [])}
    out = {"output_type": kind, "data": content.get("data", {}), "metadata": content.get("metadata", {})}
    if kind == "execute_result":
        out["execution_count"] = content.get("execution_count")
    return out
