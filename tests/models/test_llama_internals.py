"""What nightowl uses beneath llama-cpp-python's `Llama` (models/llama_internals.py) is still there,
with the shape it expects, on the installed version; no weights needed. When one of these fails
after an upgrade, read the adapter's docstring: it says what each thing is for."""

from __future__ import annotations

import ctypes
import importlib.metadata
import inspect
from types import SimpleNamespace

import pytest

llama_cpp = pytest.importorskip("llama_cpp")

VERSION = importlib.metadata.version("llama-cpp-python")
ADAPTER = "src/nightowl/models/llama_internals.py"


def moved(what: str, fix: str) -> str:
    """The failure message: what moved in this llama-cpp-python, and where to look."""
    return f"llama-cpp-python {VERSION} {what}; see {ADAPTER} (its docstring): {fix}"


# The low-level bindings of llama.h used (held decoding, saved prefixes), by argument count.
BINDINGS = {
    "llama_get_memory": 1,  # (ctx)
    "llama_memory_seq_rm": 4,  # (memory, seq_id, p0, p1)
    "llama_batch_init": 3,  # (n_tokens, embd, n_seq_max)
    "llama_batch_free": 1,  # (batch)
    "llama_decode": 2,  # (ctx, batch)
    "llama_get_logits_ith": 2,  # (ctx, i)
    "llama_state_get_size": 1,  # (ctx)
    "llama_state_get_data": 3,  # (ctx, buffer, size)
    "llama_state_set_data": 3,  # (ctx, buffer, size)
}


def test_the_llama_h_bindings_used_have_the_expected_arguments() -> None:
    for name, count in BINDINGS.items():
        function = getattr(llama_cpp, name, None)
        assert callable(function), moved(
            f"has no llama_cpp.{name}", "find what llama.h calls it now and call that"
        )
        arguments = getattr(function, "argtypes", None)
        assert arguments is not None and len(arguments) == count, moved(
            f"binds {name} with {arguments}, not {count} arguments",
            "adapt the call to llama.h's new signature",
        )


def test_a_batch_is_filled_as_decode_with_all_logits_fills_it() -> None:
    fields = {name for name, *_ in llama_cpp.llama_batch._fields_}
    needed = {"n_tokens", "token", "pos", "n_seq_id", "seq_id", "logits"}
    assert needed <= fields, moved(
        f"has a llama_batch without {sorted(needed - fields)}", "fill the batch's new fields"
    )
    batch = llama_cpp.llama_batch_init(3, 0, 1)
    try:
        batch.n_tokens = 3
        for i, token in enumerate([7, 8, 9]):
            batch.token[i], batch.pos[i] = token, 10 + i
            batch.seq_id[i][0], batch.n_seq_id[i], batch.logits[i] = 0, 1, True
        assert [batch.token[i] for i in range(3)] == [7, 8, 9]
        assert [batch.pos[i] for i in range(3)] == [10, 11, 12]
        assert all(batch.logits[i] for i in range(3))
    finally:
        llama_cpp.llama_batch_free(batch)


def test_llama_has_a_public_context_and_a_reset_that_makes_generation_evaluate() -> None:
    Llama = llama_cpp.Llama
    assert isinstance(inspect.getattr_static(Llama, "ctx", None), property), moved(
        "has no Llama.ctx property", "find the context pointer's public name"
    )
    # A restored prefix state's logits are not a live decode's: after `reset()` (before the
    # state goes back) a generation whose prompt is exactly the context evaluates again.
    record = SimpleNamespace(n_tokens=5, _requires_eval=False, _is_recurrent=False)
    record._is_hybrid = False
    Llama.reset(record)
    assert record.n_tokens == 0 and record._requires_eval is True, moved(
        "no longer marks a reset Llama for evaluation (_requires_eval)",
        "find how restoring a state makes the next generation evaluate (load_state does it)",
    )
    assert "_requires_eval" in inspect.getsource(Llama.generate), moved(
        "no longer decides on _requires_eval whether a cached prompt needs an evaluation",
        "check that a restored prefix state still gets one",
    )


def test_the_bindings_use_ctypes_pointers_for_the_state_buffer() -> None:
    """prefix_states.py hands llama_state_get_data/set_data a ctypes uint8 array."""
    pointer = llama_cpp.llama_state_set_data.argtypes[1]
    assert pointer._type_ is ctypes.c_uint8, moved(
        f"takes a state buffer of {pointer}", "build the buffer models/prefix_states.py passes"
    )
