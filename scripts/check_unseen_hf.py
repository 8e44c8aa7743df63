"""Usage: python scripts/check_unseen_hf.py [--threads 1] (about 2 min on 2 shared cores).

The CPU step-time answer on transformers' own models, which no part of the pipeline was fitted on: ViT and ConvNeXt
(image classifiers), T5 (an encoder-decoder), BERT and GPT-2, small configurations built by transformers with real
weights. Each training step (SGD) is measured the way the zoo's are (the project's timer, glibc keeping freed memory)
and predicted through ``prenet.api.predict_step_time("hf:...", hardware="local")``, the call a user makes, which
builds the same model on ``meta``. Prints one line per model and the MAPE. Timings on a shared host move by ~10 %
within minutes: compare the errors, not single milliseconds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: (model, config fields / sizes, batch size)
CASES = [
    ("hf:vit", {"num_hidden_layers": 2, "image_size": 96}, 8),
    ("hf:convnext", {"image_size": 64, "depths": [1, 1, 1, 1]}, 8),
    ("hf:t5", {"num_layers": 1, "num_decoder_layers": 1, "seq_len": 64, "d_model": 256, "d_ff": 1024, "num_heads": 4}, 8),
    ("hf:bert", {"num_hidden_layers": 2, "seq_len": 128}, 4),
    ("hf:gpt2", {"n_layer": 2, "seq_len": 128}, 4),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from prenet.api import predict_step_time
    from prenet.measurement.allocator import keep_freed_memory
    from prenet.measurement.models import measure_model
    from prenet.user_models import build_model

    print(f"allocator: {keep_freed_memory()}, threads {a.threads}")
    errors = []
    for spec, sizes, batch in CASES:
        torch.manual_seed(0)
        module, example = build_model(spec, batch, dict(sizes), meta=False)
        measured = measure_model(module, example, optimizer="sgd", warmup=2, repeats=5, min_block_ms=20.0)
        p = predict_step_time(spec, batch_size=batch, hardware="local", optimizer="sgd", zoo_kwargs=dict(sizes), threads=a.threads)
        predicted = p.step_seconds * 1e3
        errors.append(abs(predicted / measured.median_ms - 1))
        print(
            f"{spec:12s} batch {batch}  measured {measured.median_ms:8.2f} ms (spread {measured.spread_rel:.2f})  predicted "
            f"{predicted:8.2f} ms  {100 * (predicted / measured.median_ms - 1):+6.1f} %  (DRAM refetch {p.dram_refetch_ms:.2f} ms)"
        )
    print(f"MAPE over {len(errors)} models: {100 * sum(errors) / len(errors):.1f} %")


if __name__ == "__main__":
    main()
