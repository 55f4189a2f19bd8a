"""The local model's saved prefixes: the KV state of a prompt's pinned prefix, evaluated once.

Every conversation starts with the same pinned prefix (instructions, tool catalogue, memory
section). The worker evaluates it once, saves llama.cpp's state at its end, and starts each
new conversation (and each worker that starts later, from a file) from that state instead of
evaluating it again: on 2 cores that is most of a first reply's time.

A state is keyed by what produced it: the runtime's version, the weights file (path, size,
modification time), the context size and the prefix's tokens. A file that does not match
its key, or is cut short, is ignored (and removed); files are written whole (a temporary
name, then a rename), and the oldest go once there are more than `keep_files`.
Runs inside the worker process only (it imports llama.cpp's bindings).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FORMAT = 1


@dataclass(frozen=True)
class PrefixState:
    """The context's state right after evaluating `tokens` (and nothing else)."""

    tokens: tuple[int, ...]
    data: bytes


def state_key(identity: str, tokens: list[int]) -> str:
    """The key of the state of `tokens` under a runtime and weights (`identity`)."""
    digest = hashlib.sha256(identity.encode())
    digest.update(np.asarray(tokens, dtype=np.int32).tobytes())
    return digest.hexdigest()[:32]


def capture(llm: Any) -> PrefixState:
    """The state of `llm`'s context as it is now (its evaluated tokens and KV cache)."""
    import llama_cpp

    ctx = llm.ctx
    size = llama_cpp.llama_state_get_size(ctx)
    buffer = (ctypes.c_uint8 * int(size))()
    written = llama_cpp.llama_state_get_data(ctx, buffer, size)
    tokens = tuple(int(t) for t in llm.input_ids[: llm.n_tokens])
    return PrefixState(tokens, bytes(buffer)[: int(written)])


def restore(llm: Any, state: PrefixState) -> None:
    """Put `llm`'s context back to `state`; its next generation evaluates only what follows."""
    import llama_cpp

    # Its logits will not be a live decode's: the next generation must evaluate
    # (models/llama_internals.py). Until the record is set below, it holds nothing.
    llm.reset()
    buffer = (ctypes.c_uint8 * len(state.data)).from_buffer_copy(state.data)
    if llama_cpp.llama_state_set_data(llm.ctx, buffer, len(state.data)) != len(state.data):
        raise RuntimeError("llama.cpp refused a saved prefix state")
    count = len(state.tokens)
    llm.input_ids[:count] = np.asarray(state.tokens, dtype=np.intc)
    llm.n_tokens = count


class PrefixStates:
    """Saved prefix states: a few in memory, more in `folder` (None: memory only)."""

    def __init__(self, identity: str, folder: Path | None, keep: int = 4, keep_files: int = 8):
        self.identity = identity
        self.folder = folder
        self.keep, self.keep_files = keep, keep_files
        self._memory: OrderedDict[str, PrefixState] = OrderedDict()

    def find(self, tokens: list[int]) -> PrefixState | None:
        """The saved state of exactly `tokens`, from memory or from a file."""
        key = state_key(self.identity, tokens)
        if key in self._memory:
            self._memory.move_to_end(key)
            return self._memory[key]
        state = self._read(key, tokens)
        if state is not None:
            self._remember(key, state)
        return state

    def save(self, state: PrefixState) -> None:
        """Keep `state` in memory and write it to its file (best effort: a full disk or a
        read-only cache costs speed, never a reply)."""
        key = state_key(self.identity, list(state.tokens))
        self._remember(key, state)
        if self.folder is None:
            return
        try:
            self._write(key, state)
        except OSError as error:
            print(f"local worker: could not save a prefix state: {error}", flush=True)

    def _remember(self, key: str, state: PrefixState) -> None:
        self._memory[key] = state
        self._memory.move_to_end(key)
        while len(self._memory) > self.keep:
            self._memory.popitem(last=False)

    def _path(self, key: str) -> Path:
        assert self.folder is not None
        return self.folder / f"{key}.kv"

    def _read(self, key: str, tokens: list[int]) -> PrefixState | None:
        if self.folder is None:
            return None
        path = self._path(key)
        try:
            raw = path.read_bytes()
        except OSError:
            return None
        header_end = raw.find(b"\n")
        try:
            header = json.loads(raw[:header_end])
            count, size = int(header["tokens"]), int(header["size"])
            start = header_end + 1
            saved = np.frombuffer(raw[start : start + 4 * count], dtype=np.int32).tolist()
            data = raw[start + 4 * count :]
            valid = header["format"] == FORMAT and saved == tokens and len(data) == size
        except (ValueError, KeyError, TypeError):
            valid = False
        if not valid:
            path.unlink(missing_ok=True)
            return None
        os.utime(path)  # recently used: the last to be removed
        return PrefixState(tuple(tokens), data)

    def _write(self, key: str, state: PrefixState) -> None:
        assert self.folder is not None
        self.folder.mkdir(parents=True, exist_ok=True)
        header = {"format": FORMAT, "tokens": len(state.tokens), "size": len(state.data)}
        path = self._path(key)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        with temporary.open("wb") as out:
            out.write(json.dumps(header).encode() + b"\n")
            out.write(np.asarray(state.tokens, dtype=np.int32).tobytes())
            out.write(state.data)
        temporary.replace(path)
        files = sorted(self.folder.glob("*.kv"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in files[self.keep_files :]:
            old.unlink(missing_ok=True)
