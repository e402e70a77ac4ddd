"""The package's public surface: one definition per public name."""
import collections
import importlib

import llm_dataflow as ldf

MODULES = ("units config hardware measure live ledger loading tokenization embedding model ops fusion offload "
           "gemm memory chips roofline kv flash paged collectives launch parallel quant batching speculative "
           "disagg figures").split()


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
