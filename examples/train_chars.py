"""Train the streaming example's generative model (docs/streaming.md): a character
n-gram model in NumPy, counted in well under a second on text that ships with mlserve
(models/chars/corpus.txt: the Zen of Python, PSF-licensed, and the prose of our own
guides, gathered once so that the same text always gives the same model). Writes
models/chars/model.npz: the alphabet and every 6-gram of the text with its count; the
serving class (examples/chars.py) derives the shorter contexts from them at load.

    python examples/train_chars.py            # model.npz from corpus.txt
    python examples/train_chars.py --gather   # corpus.txt again, from today's guides
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
CORPUS = HERE / "models" / "chars" / "corpus.txt"
ORDER = 5  # characters of context: each 6-gram counts one (context, next character)
SOURCES = ["README.md", "docs/models.md", "docs/serving.md", "docs/graphs.md", "docs/deployment.md"]
LIMIT = 60_000  # characters of corpus: keeps model.npz near 100 KB


def zen() -> str:
    """The Zen of Python: ``this`` keeps it in ROT13 (and prints it on first import)."""
    with contextlib.redirect_stdout(io.StringIO()):
        import this
    return "".join(this.d.get(c, c) for c in this.s)


def prose(markdown: str) -> str:
    """A guide's running text: no code blocks, tables, headings, pictures or markup."""
    lines, fenced = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and not line.startswith(("|", "<", "!", "#")):
            line = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", line)  # a link's text
            lines.append(re.sub(r"[`*]", "", line).strip())
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines))


def gather(root: Path = HERE.parent) -> str:
    """The Zen of Python and our guides' prose, at most LIMIT characters."""
    texts = [zen(), *(prose((root / name).read_text()) for name in SOURCES)]
    return "\n\n".join(texts)[:LIMIT]


def corpus() -> str:
    return CORPUS.read_text(encoding="utf-8")


def train(text: str, order: int = ORDER) -> dict[str, np.ndarray]:
    """The context length, the alphabet (code points), and the sorted (order+1)-grams of
    ``text`` (each a number in base len(alphabet)) with their counts."""
    alphabet = np.array(sorted(set(text)))
    codes = np.searchsorted(alphabet, np.array(list(text)))
    size, windows = len(alphabet), len(codes) - order
    grams = np.zeros(windows, dtype=np.int64)
    for offset in range(order + 1):
        grams = grams * size + codes[offset : offset + windows]
    grams, counts = np.unique(grams, return_counts=True)
    return {
        "order": np.array(order),
        "alphabet": np.array([ord(c) for c in alphabet], dtype=np.int32),
        "grams": grams,
        "counts": np.minimum(counts, np.iinfo(np.uint16).max).astype(np.uint16),
    }


def save(folder: Path = HERE / "models" / "chars") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.npz"
    np.savez_compressed(path, **train(corpus()))
    return path


if __name__ == "__main__":
    if "--gather" in sys.argv[1:]:
        CORPUS.write_text(gather(), encoding="utf-8")
        print(f"wrote {CORPUS} ({CORPUS.stat().st_size // 1024} KiB)")
    path = save()
    print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")
