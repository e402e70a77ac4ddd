"""``python -m llm_dataflow plan ...`` and ``explain ...`` (see :mod:`llm_dataflow.core.plan` and
:mod:`llm_dataflow.core.explain`): imports only the core."""
import sys

from .core.explain import main

sys.exit(main())
