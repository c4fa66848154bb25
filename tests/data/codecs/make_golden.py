"""Write the golden frames: one frame per codec, ``<name>-v1.bin``, and what it decodes to, ``.npy``.

Run once per format version (``python tests/data/codecs/make_golden.py``); existing files are never
overwritten. tests/test_codecs.py decodes the committed files: every later version of mpicoll must
still decode them to exactly the committed arrays. A new format version adds ``-v2`` files beside
these, it does not replace them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from mpicoll import codecs  # noqa: E402

VERSION = 1


def inputs() -> dict[str, tuple[dict, np.ndarray]]:
    """Per codec: parameters and an input exercising its corners (specials, ragged blocks, 2-D)."""
    rng = np.random.default_rng(20240604)
    specials = np.array([0.0, -0.0, 1.0, -1.5, np.inf, -np.inf, np.nan, 65504.0, 70000.0, 1e-8,
                         3.4e38, 1.00390625, 1.01171875, -2.0**-130], np.float32)
    dense = np.concatenate([specials, rng.standard_normal(136).astype(np.float32)]).reshape(3, 50)
    blocks = rng.standard_normal(150) * np.repeat([1.0, 0.0, 1e-3], 50)  # a zero block, a tiny one
    sparse = rng.standard_normal((4, 5, 10))
    return {
        "fp16": ({}, dense),
        "bf16": ({}, dense),
        "int8": ({"block_size": 64}, blocks.astype(np.float32)),
        "topk": ({"ratio": 0.05, "method": "exact", "value_dtype": None}, sparse),
        "threshold": ({"density": 0.1, "seed": 1}, sparse.astype(np.float32)),
        "sign": ({"block_size": 48}, blocks.astype(np.float16)),
    }


def main() -> None:
    for name, (params, x) in inputs().items():
        frame_path = HERE / f"{name}-v{VERSION}.bin"
        if frame_path.exists():
            print(f"{frame_path.name}: exists, kept")
            continue
        codec = codecs.get(name, **params)
        frame = codec.encode(x)
        frame_path.write_bytes(frame.tobytes())
        np.save(HERE / f"{name}-v{VERSION}.npy", codec.decode(frame))
        print(f"{frame_path.name}: {frame.size} bytes")


if __name__ == "__main__":
    main()
