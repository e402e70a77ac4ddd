"""``python -m llm_dataflow plan ...`` (see :mod:`llm_dataflow.plan`)."""
import sys

from .plan import main

sys.exit(main())
