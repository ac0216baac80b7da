"""The one train / val / test partition rule of every generated task family (synthetic.py, chain.py)."""

from __future__ import annotations

import hashlib

SPLITS = ("train", "val", "test")


def split_of_key(key: str) -> str:
    """Hash partition of a canonical problem key: 10% test, 5% val, 85% train."""
    h = int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") % 20
    if h < 2:
        return "test"
    if h == 2:
        return "val"
    return "train"
