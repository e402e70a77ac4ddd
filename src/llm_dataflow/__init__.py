"""llm_dataflow: executable lessons on how data moves through LLM inference.

Import as ``import llm_dataflow as ldf``; every module's ``__all__`` is a name of ``ldf``
(``book/notation.md`` gives the letters used in shapes).  The package has two layers:

* :mod:`llm_dataflow.core` — what the book *computes* (configs, units, formats, hardware, the
  accounting, parallel arithmetic, memory fit, roofline bounds, ``plan``), standard library only.
  ``import llm_dataflow`` loads the core and nothing else.
* the modules beside it — torch kernels (``model``, ``linear_kernels``, ``flash``, ``paged``,
  ``quant``, …), measurement (``measure``, ``memory``, …) and the notebooks' views (``live``,
  ``figures``, the chapters' calculators).  They import the core, never the reverse, and load on
  first use: ``ldf.Decoder`` imports them (and torch) then.
"""
import importlib

from . import core
from .core import (units, hf_config, config, formats, hardware, chips, accounting, fit,  # noqa: F401
                   plan)
from .core import *  # noqa: F401,F403  (after the modules: ``ldf.hardware`` is the function)

__version__ = "0.1.0"

#: The modules above the core, in the order their names are looked up.
UPPER_MODULES = ("measure", "live", "ledger", "loading", "tokenization", "embedding", "model", "linear_kernels",
                 "ops", "fusion", "offload", "gemm", "memory", "roofline", "generate", "kv", "flash", "paged",
                 "collectives", "launch", "parallel", "quant", "batching", "speculative", "disagg", "published",
                 "figures", "diagrams")
_loaded = False


def _load_upper() -> None:
    """Import every module above the core and bind its ``__all__`` here (once)."""
    global _loaded
    if _loaded:
        return
    names = {}
    for m in UPPER_MODULES:
        mod = importlib.import_module(f"{__name__}.{m}")
        names.update((n, getattr(mod, n)) for n in mod.__all__)
    globals().update(names)
    _loaded = True


def __getattr__(name: str):
    if name in UPPER_MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name == "__all__":
        _load_upper()
        return sorted(core.__all__ + [n for m in UPPER_MODULES for n in globals()[m].__all__])
    if not name.startswith("_"):
        _load_upper()
        if name in globals():
            return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    _load_upper()
    return sorted(set(globals()) | set(UPPER_MODULES))
