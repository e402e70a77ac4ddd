"""``python -m llm_dataflow plan ...`` (see :mod:`llm_dataflow.core.plan`): imports only the core."""
import sys

from .core.plan import main

sys.exit(main())
