"""Keeps what the float64 reference computes, so tests that check the same model and tokens
(on other devices, batch sizes or builds) compute it once.

The folder is $POLYSTACK_REFERENCE_CACHE (the test suite sets it); without it nothing is kept.
An entry's name is a hash of the model file's bytes, the caller's parameters, the source of the
reference and of the calling script and the numpy and gguf versions, so a change to any of them
computes it again. Tests that want the same entry at once wait for the first to write it (a lock
per entry).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Callable

import numpy as np

HERE = Path(__file__).resolve().parent


def cached(model_path: str, params: list, caller: str,
           compute: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """compute()'s arrays for (model, params), from the cache when it holds them."""
    folder = os.environ.get("POLYSTACK_REFERENCE_CACHE")
    if not folder:
        return compute()
    h = hashlib.sha256()
    with open(model_path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 24), b""):
            h.update(chunk)
    for source in (HERE / "llama_ref.py", HERE / "ref_cache.py", Path(caller).resolve()):
        h.update(source.read_bytes())
    # The packages the reference computes with (gguf dequantizes the weights).
    h.update(json.dumps(params + [np.__version__, metadata.version("gguf")]).encode())
    os.makedirs(folder, exist_ok=True)
    entry = os.path.join(folder, h.hexdigest()[:32])
    with open(entry + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.path.exists(entry + ".npz"):
            with np.load(entry + ".npz") as z:
                print(f"reference from the cache: {entry}.npz")
                return {k: z[k] for k in z.files}
        out = compute()
        tmp = f"{entry}.{os.getpid()}.npz"
        np.savez(tmp, **out)
        os.replace(tmp, entry + ".npz")
        return out
