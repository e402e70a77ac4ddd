"""The package's public surface: one definition per public name."""
import collections
import importlib

import llm_dataflow as ldf

#: Every module: the core's (``llm_dataflow.core.<name>``) and those above it.
MODULES = tuple(f"core.{m}" for m in ldf.core.MODULES) + ldf.UPPER_MODULES


def test_no_public_name_is_exported_twice():
    seen = collections.defaultdict(list)
    for m in MODULES:
        for name in importlib.import_module(f"llm_dataflow.{m}").__all__:
            seen[name].append(m)
    assert {n: ms for n, ms in seen.items() if len(ms) > 1} == {}


def test_every_public_name_is_documented():
    for m in MODULES:
        mod = importlib.import_module(f"llm_dataflow.{m}")
        assert mod.__doc__, m
        for name in mod.__all__:
            obj = getattr(ldf, name)
            if callable(obj):
                assert obj.__doc__, f"{m}.{name} has no docstring"
