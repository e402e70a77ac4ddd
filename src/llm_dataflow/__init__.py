"""llm_dataflow: executable lessons on how data moves through LLM inference.

Import as ``import llm_dataflow as ldf``.  One module per topic (``book/notation.md`` gives the
letters used in shapes); every module's ``__all__`` is re-exported here.
"""
from . import (units, config, hf_config, formats, accounting, fit, hardware, measure, live, ledger, loading, tokenization, embedding,  # noqa: F401
               model, ops, fusion, offload, gemm, memory, chips, roofline, generate, kv, flash, paged,
               collectives, launch, parallel, quant, batching, speculative, disagg, plan, published, figures)
from .units import *  # noqa: F401,F403
from .config import *  # noqa: F401,F403
from .hf_config import *  # noqa: F401,F403
from .formats import *  # noqa: F401,F403
from .accounting import *  # noqa: F401,F403
from .fit import *  # noqa: F401,F403
from .hardware import *  # noqa: F401,F403
from .measure import *  # noqa: F401,F403
from .live import *  # noqa: F401,F403
from .ledger import *  # noqa: F401,F403
from .loading import *  # noqa: F401,F403
from .tokenization import *  # noqa: F401,F403
from .embedding import *  # noqa: F401,F403
from .model import *  # noqa: F401,F403
from .ops import *  # noqa: F401,F403
from .fusion import *  # noqa: F401,F403
from .offload import *  # noqa: F401,F403
from .gemm import *  # noqa: F401,F403
from .memory import *  # noqa: F401,F403
from .chips import *  # noqa: F401,F403
from .roofline import *  # noqa: F401,F403
from .generate import *  # noqa: F401,F403
from .kv import *  # noqa: F401,F403
from .flash import *  # noqa: F401,F403
from .paged import *  # noqa: F401,F403
from .collectives import *  # noqa: F401,F403
from .launch import *  # noqa: F401,F403
from .parallel import *  # noqa: F401,F403
from .quant import *  # noqa: F401,F403
from .batching import *  # noqa: F401,F403
from .speculative import *  # noqa: F401,F403
from .disagg import *  # noqa: F401,F403
from .plan import *  # noqa: F401,F403
from .published import *  # noqa: F401,F403
from .figures import *  # noqa: F401,F403

__version__ = "0.1.0"
