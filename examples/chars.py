"""The streaming example (docs/streaming.md): a character-level generative model whose
``predict`` is a generator, so every character it writes leaves the server as it is
sampled. CPU only, NumPy only, no download: examples/train_chars.py counts its model
(models/chars/model.npz) from text that ships with mlserve.

    mlserve serve examples/chars.py
    curl -N -X POST 127.0.0.1:8080/v2/models/chars/generate_stream \\
        -d '{"text_input": "The ", "max_tokens": 40}'
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

import mlserve
from mlserve.protocol.errors import InvalidInput

HERE = Path(__file__).parent
MAX_TOKENS = 4096


class CharModel(mlserve.V2ModelServer):
    """Continues ``text_input`` one character at a time: the longest context (up to 5
    characters) seen in training picks the next one, sampled at ``temperature``."""

    def load(self) -> None:
        model_file, _ = self.get_model(".npz")
        with np.load(model_file) as saved:
            self.alphabet = "".join(map(chr, saved["alphabet"]))
            self.order = int(saved["order"])
            grams, counts = saved["grams"], saved["counts"].astype(np.float64)
        self.codes = {char: code for code, char in enumerate(self.alphabet)}
        size = len(self.alphabet)
        # One table per context length k: the (k+1)-gram counts, summed from the longest.
        self.tables = []
        for k in range(self.order + 1):
            keys, where = np.unique(grams % size ** (k + 1), return_inverse=True)
            contexts, starts = np.unique(keys // size, return_index=True)
            self.tables.append(
                (
                    contexts,
                    np.append(starts, len(keys)),
                    keys % size,
                    np.bincount(where, weights=counts),
                )
            )
        self.outputs = [{"name": "text_output", "datatype": "BYTES", "shape": [1]}]

    def predict(self, request: dict[str, Any]) -> Iterator[Any]:
        """One chunk per character: ``{"text_output": ...}`` for a tensor request (as
        Triton's generate form reads it), the bare character for rows."""
        prompt, settings = _prompt(request)
        rng = np.random.default_rng(settings["seed"])
        text = prompt
        for _ in range(settings["max_tokens"]):
            char = self.next_char(text, settings["temperature"], rng)
            text += char
            if hasattr(request, "tensors"):
                yield {"text_output": np.array([char], dtype=object)}
            else:
                yield char

    def next_char(self, text: str, temperature: float, rng: np.random.Generator) -> str:
        size = len(self.alphabet)
        for k in range(min(self.order, len(text)), -1, -1):
            tail = text[len(text) - k :]
            if any(char not in self.codes for char in tail):
                continue
            context = 0
            for char in tail:
                context = context * size + self.codes[char]
            contexts, starts, following, counts = self.tables[k]
            i = int(np.searchsorted(contexts, context))
            if i < len(contexts) and contexts[i] == context:
                weights = counts[starts[i] : starts[i + 1]]
                if temperature <= 0:
                    pick = int(np.argmax(weights))
                else:
                    weights = (weights / weights.max()) ** (1 / temperature)
                    pick = int(rng.choice(len(weights), p=weights / weights.sum()))
                return self.alphabet[following[starts[i] + pick]]
        raise AssertionError("the 0-length context always matches")


def _prompt(request: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The prompt and its settings (``max_tokens``, ``temperature``, ``seed``): inputs
    of those names, or request parameters; a bad value is a 400."""
    params = dict(request.get("parameters") or {})
    tensors = getattr(request, "tensors", None)
    if tensors is not None:
        if "text_input" not in tensors:
            raise InvalidInput(f"expected an input 'text_input', got {sorted(tensors)}")
        params.update({name: array.ravel()[0] for name, array in tensors.items() if array.size})
        prompt = params.pop("text_input", "")
    else:
        inputs = request.get("inputs") or [""]
        prompt = inputs[0]
    if isinstance(prompt, bytes):
        prompt = prompt.decode("utf-8", "replace")
    if not isinstance(prompt, str):
        raise InvalidInput(f"text_input must be a string, got {type(prompt).__name__}")
    try:
        settings = {
            "max_tokens": int(params.get("max_tokens", 64)),
            "temperature": float(params.get("temperature", 0.8)),
            "seed": None if params.get("seed") is None else int(params["seed"]),
        }
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"max_tokens, temperature and seed are numbers: {exc}") from exc
    if not 0 < settings["max_tokens"] <= MAX_TOKENS:
        raise InvalidInput(f"max_tokens must be between 1 and {MAX_TOKENS}")
    return prompt, settings


def serving_function() -> mlserve.ServingFunction:
    fn = mlserve.new_function("chars-demo")
    fn.add_model("chars", model_path=str(HERE / "models" / "chars"), class_name=CharModel)
    return fn


if __name__ == "__main__":
    server = serving_function().to_mock_server()
    body = {"inputs": ["The "], "parameters": {"max_tokens": 200, "seed": 1}}
    print("The ", end="", flush=True)
    for chunk in server.test("/v2/models/chars/infer_stream", body=body):
        print(chunk["outputs"], end="", flush=True)
    print()
