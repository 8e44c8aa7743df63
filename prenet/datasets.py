"""Real image data that works offline: Fashion-MNIST from Debian's ``dataset-fashion-mnist`` package
(checksum-verified) and scikit-learn's bundled digits.

Images come back as float32 tensors ``(n, 1, H, W)`` scaled to [0, 1] and standardised with the training
set's mean and standard deviation (one scalar each); labels as int64 ``(n,)``.

Fashion-MNIST is looked up in ``$PRENET_FASHION_MNIST_DIR`` or ``/usr/share/datasets/fashion-mnist``
(``apt-get install dataset-fashion-mnist``). The Debian package re-compresses the upstream files, so the
upstream MD5s of the ``.gz`` files do not apply; the SHA-256 of each *decompressed* IDX payload is pinned
below (identical to upstream's content) and checked on every load. When the files are absent,
:func:`load` raises :class:`PrenetError` saying how to install them: it never substitutes another dataset
under Fashion-MNIST's name. A configuration that wants digits chooses ``digits`` explicitly.
"""

from __future__ import annotations

import gzip
import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from prenet.errors import PrenetError

FASHION_DIR_DEFAULT = Path("/usr/share/datasets/fashion-mnist")
#: SHA-256 of the decompressed IDX files (bytes, magic number included).
FASHION_SHA256 = {
    "train-images-idx3-ubyte.gz": "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    "train-labels-idx1-ubyte.gz": "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    "t10k-images-idx3-ubyte.gz": "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    "t10k-labels-idx1-ubyte.gz": "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
}
DATASETS = ("digits", "fashion_mnist")
#: The one-line error when Fashion-MNIST is needed and absent (``make install`` installs it where it can).
FASHION_MISSING = (
    "Fashion-MNIST is not installed in {dir}: run `sudo apt-get install dataset-fashion-mnist` (or "
    "`make install` as root), or set PRENET_FASHION_MNIST_DIR to a folder with its four .gz files, or "
    "choose digits domains/tasks in conf/"
)


@dataclass(frozen=True)
class ImageData:
    """One split of an image dataset. ``x``: float32 (n, 1, H, W), standardised; ``y``: int64 (n,)."""

    name: str
    x: torch.Tensor
    y: torch.Tensor
    source: str

    def __len__(self) -> int:
        return int(self.y.shape[0])

    def select(
        self, classes: list[int] | None = None, *, relabel: dict[int, int] | None = None, limit: int | None = None, seed: int = 0
    ) -> "ImageData":
        """Keep ``classes`` (renumbered 0..k-1 in the given order, or mapped by ``relabel``), then at most
        ``limit`` samples drawn without replacement with ``seed`` (stable for a given dataset)."""
        x, y = self.x, self.y
        if classes is not None:
            keep = torch.isin(y, torch.tensor(classes))
            x, y = x[keep], y[keep]
            mapping = relabel or {c: i for i, c in enumerate(classes)}
        else:
            mapping = relabel
        if mapping is not None:
            lut = torch.full((int(self.y.max()) + 1,), -1, dtype=torch.int64)
            for src, dst in mapping.items():
                lut[int(src)] = int(dst)
            y = lut[y]
            if (y < 0).any():
                raise PrenetError(f"relabel map {mapping} leaves classes of {self.name} unmapped; map every kept class")
        if limit is not None and limit < len(y):
            g = torch.Generator().manual_seed(seed)
            idx = torch.randperm(len(y), generator=g)[:limit].sort().values
            x, y = x[idx], y[idx]
        return ImageData(self.name, x, y, self.source)


def _fashion_dir() -> Path:
    return Path(os.environ.get("PRENET_FASHION_MNIST_DIR", FASHION_DIR_DEFAULT))


def _read_idx(path: Path) -> np.ndarray:
    raw = gzip.decompress(path.read_bytes())
    digest = hashlib.sha256(raw).hexdigest()
    expected = FASHION_SHA256[path.name]
    if digest != expected:
        raise PrenetError(
            f"{path}: SHA-256 of the decompressed data is {digest}, expected {expected}; the file is "
            f"corrupt or not Fashion-MNIST. Reinstall it: apt-get install --reinstall dataset-fashion-mnist"
        )
    magic = int.from_bytes(raw[:4], "big")
    ndim = magic & 0xFF
    dims = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def fashion_mnist_available() -> bool:
    d = _fashion_dir()
    return all((d / f).exists() for f in FASHION_SHA256)


def verify_fashion_mnist() -> bool:
    """Check the pinned SHA-256 of all four Fashion-MNIST files (raises :class:`PrenetError` on a mismatch)."""
    for split in ("train", "test"):
        _fashion(split)
    return True


def require_datasets(names: set[str] | list[str]) -> None:
    """Raise :class:`PrenetError` (one line, how to install) before any work when a needed dataset is absent."""
    for name in sorted(names):
        if name not in DATASETS:
            raise PrenetError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
        if name == "fashion_mnist" and not fashion_mnist_available():
            raise PrenetError(FASHION_MISSING.format(dir=_fashion_dir()))


@lru_cache(maxsize=4)
def _fashion(split: str) -> tuple[np.ndarray, np.ndarray]:
    d = _fashion_dir()
    prefix = "train" if split == "train" else "t10k"
    return _read_idx(d / f"{prefix}-images-idx3-ubyte.gz"), _read_idx(d / f"{prefix}-labels-idx1-ubyte.gz")


@lru_cache(maxsize=1)
def _digits() -> tuple[np.ndarray, np.ndarray]:
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images / 16.0).astype(np.float32), d.target.astype(np.int64)


def _standardise(x: np.ndarray, ref: np.ndarray) -> torch.Tensor:
    mean, std = float(ref.mean()), float(ref.std()) or 1.0
    return torch.from_numpy(((x - mean) / std).astype(np.float32)).unsqueeze(1)


def load(name: str, split: str = "train", *, digits_test_fraction: float = 0.25) -> ImageData:
    """``name``: ``digits`` (8×8, 1,797 images; a fixed stratified 75/25 train/test split) or
    ``fashion_mnist`` (28×28, 60,000 + 10,000). ``split``: ``train`` or ``test``."""
    if split not in ("train", "test"):
        raise PrenetError(f"split must be 'train' or 'test', got {split!r}")
    if name == "digits":
        x, y = _digits()
        rng = np.random.default_rng(12345)
        test = np.zeros(len(y), dtype=bool)
        for c in np.unique(y):
            idx = np.flatnonzero(y == c)
            test[rng.choice(idx, size=int(round(len(idx) * digits_test_fraction)), replace=False)] = True
        train_x = x[~test]
        sel = test if split == "test" else ~test
        return ImageData("digits", _standardise(x[sel], train_x), torch.from_numpy(y[sel]), "scikit-learn load_digits")
    if name == "fashion_mnist":
        if not fashion_mnist_available():
            raise PrenetError(FASHION_MISSING.format(dir=_fashion_dir()))
        xi, yi = _fashion(split)
        ref, _ = _fashion("train")
        return ImageData(
            "fashion_mnist",
            _standardise(xi.astype(np.float32) / 255.0, ref.astype(np.float32) / 255.0),
            torch.from_numpy(yi.astype(np.int64)),
            f"Debian dataset-fashion-mnist ({_fashion_dir()})",
        )
    raise PrenetError(f"unknown dataset {name!r}; choose one of {', '.join(DATASETS)}")
