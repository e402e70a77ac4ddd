"""Shared test fixtures."""
import pytest

import llm_dataflow as ldf


@pytest.fixture
def one_thread():
    """Run a test with one torch thread: on tiny tensors, thread start-up costs more than the work."""
    with ldf.torch_threads(1):
        yield
