"""The core: what the book *computes*, with the standard library alone (no torch, no numpy).

Shapes and config reading, units, number formats and the bytes of quantised weights, hardware
presets, the accounting (weights stored and read, KV, activations, FLOPs), collective and
parallel arithmetic, the memory fit, the roofline bounds and ``plan``.  The layers above (torch
kernels, measurement, the notebooks' calculators and figures) import the core; the core imports
none of them.  Modules, each importing only those listed before it:

================  =============================================================================
``units``         bytes, GB vs GiB, dtype widths, input checks, number formatting
``vision``        parameters of a multimodal checkpoint's vision tower and projector
``hf_config``     reading a Hugging Face ``config.json`` (transformers' defaults and conventions)
``formats``       weight formats (``QuantSpec``), the ``PrecisionPlan``, KV dtypes
``quantization``  the checkpoint's own format from ``config.json``'s ``quantization_config``
``config``        ``ModelConfig``, the presets, the checkpoint's tensors, parameter counts
``hardware``      GPU and link presets, ridge points
``engines``       serving engines' conventions per version, their logged figures, KV layouts
``chips``         chip generations, their on-chip memories and profiler metrics (chapter 04)
``kv``            KV-cache bytes for every attention variant (chapter 06)
``collectives``   bytes per rank and the α–β time of each collective (chapter 07)
``accounting``    the one accounting model: weights, KV, activations, FLOPs, step bytes
``parallel``      the TP/PP/EP degree check, layer partitions, TP/EP/ring byte counts
``fit``           whether a deployment fits per GPU, as its serving engine counts it
``serving``       the serving view of the fit (vLLM ``gpu_memory_utilization``, SGLang)
``roofline``      lower bounds of a decode step and a prefill, the critical batch (blended, per kernel)
``coverage``      the published measurements' rows, and which of them cover a deployment
``plan``          ``python -m llm_dataflow plan``: :func:`llm_dataflow.core.plan.main`
``engine_args``   a vLLM or SGLang command line read as the engine reads it, with its defaults
``engine_log``    a startup log read into runs: each rank's figures, the settings, the error
``explain``       ``python -m llm_dataflow explain``: a log reconciled with ``plan``'s fit
================  =============================================================================

Every module's ``__all__`` is re-exported here (and by ``llm_dataflow``).
"""
import sys

from . import (units, vision, hf_config, formats, quantization, config, hardware, engines, chips, kv, collectives, accounting,  # noqa: F401
               parallel, fit, serving, roofline, coverage, plan, engine_args, engine_log, explain)
from .units import *  # noqa: F401,F403
from .vision import *  # noqa: F401,F403
from .hf_config import *  # noqa: F401,F403
from .formats import *  # noqa: F401,F403
from .quantization import *  # noqa: F401,F403
from .config import *  # noqa: F401,F403
from .hardware import *  # noqa: F401,F403
from .engines import *  # noqa: F401,F403
from .chips import *  # noqa: F401,F403
from .kv import *  # noqa: F401,F403
from .collectives import *  # noqa: F401,F403
from .accounting import *  # noqa: F401,F403
from .parallel import *  # noqa: F401,F403
from .fit import *  # noqa: F401,F403
from .serving import *  # noqa: F401,F403
from .roofline import *  # noqa: F401,F403
from .coverage import *  # noqa: F401,F403
from .plan import *  # noqa: F401,F403
from .engine_args import *  # noqa: F401,F403
from .engine_log import *  # noqa: F401,F403
from .explain import *  # noqa: F401,F403

MODULES = ("units", "vision", "hf_config", "formats", "quantization", "config", "hardware", "engines", "chips", "kv", "collectives", "accounting",
           "parallel", "fit", "serving", "roofline", "coverage", "plan", "engine_args", "engine_log", "explain")
__all__ = [name for m in MODULES for name in sys.modules[f"{__name__}.{m}"].__all__]
