"""Vendor NeuSight's op-level test set for the GPUs its training set lacks (L4, H100 SXM, A100 80GB PCIe).

NeuSight (Lee et al., ASPLOS 2025) times its test ops (the linear, bmm, layer-norm, softmax and elementwise calls of
real transformer models) on eight GPUs; prenet's training set holds its training files for five of them. This script
keeps the rows of the three others, with the columns the training files keep (op name, device, shape, latency in ms),
gzipped, into ``data/external/neusight2025/test_*_3gpu.csv.gz``. The source is a checkout (or a bare git mirror) of
sitar-lab/NeuSight at commit 6945927; the files are ``scripts/asplos/data/dataset/test/{linear,bmm,elem,ln,softmax}.csv``.

Usage: ``python scripts/vendor_neusight_test.py <NeuSight checkout or bare mirror> [commit]``
"""

from __future__ import annotations

import gzip
import io
import subprocess
import sys
from pathlib import Path

import polars as pl

UNSEEN = ("NVIDIA L4", "NVIDIA H100 80GB HBM3", "NVIDIA A100 80GB PCIe")
#: test file → (vendored name, shape columns)
FILES = {
    "linear": ("test_linear_3gpu.csv.gz", ["B", "M", "N", "K"]),
    "bmm": ("test_bmm_3gpu.csv.gz", ["B", "M", "N", "K"]),
    "elem": ("test_elementwise_3gpu.csv.gz", ["B", "H"]),
    "ln": ("test_layernorm_3gpu.csv.gz", ["B", "H"]),
    "softmax": ("test_softmax_3gpu.csv.gz", ["B", "H"]),
}


def main(repo: str, commit: str = "6945927") -> None:
    out = Path(__file__).resolve().parents[1] / "data" / "external" / "neusight2025"
    for name, (target, cols) in FILES.items():
        text = subprocess.run(
            ["git", "-C", repo, "show", f"{commit}:scripts/asplos/data/dataset/test/{name}.csv"], check=True, capture_output=True
        ).stdout
        raw = pl.read_csv(io.BytesIO(text), infer_schema_length=0)
        keep = raw.filter(pl.col("Device").is_in(UNSEEN)).select(
            "OPName", "Device", *[pl.col(c).cast(pl.Int64) for c in cols], pl.col("Latency").cast(pl.Float64).alias("latency_ms")
        )
        buf = io.BytesIO()
        keep.write_csv(buf)
        with gzip.GzipFile(out / target, "wb", mtime=0) as f:
            f.write(buf.getvalue())
        print(f"{target}: {keep.height} rows ({', '.join(f'{d} {n}' for d, n in keep.group_by('Device').len().sort('Device').iter_rows())})")


if __name__ == "__main__":
    main(*sys.argv[1:])
