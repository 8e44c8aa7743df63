"""Usage: python scripts/check_unseen_cpu.py [--threads 1] [--hf] [--precision bf16] [--only NAME] (about 1 min on 2
shared cores; 2 more with --hf).

The CPU step-time answer on models no part of the pipeline was fitted on (not in the zoo, not in any benchmark):
three MLPs of skinny GEMMs (SGD and Adam), torchvision's MobileNetV3-Small and ResNet-50 (at batch 8, most of its
convolutions run natively on one thread), a user's 2-layer ``nn.TransformerEncoder``
(dropout 0.1) and an LSTM tagger. Each training step is measured here the way the zoo's steps are (the project's timer,
glibc keeping freed memory: without it page faults add 10-30 % to such steps), and predicted through
``prenet.api.predict_step_time(..., hardware="local")``, the call a user makes. Prints one line per model and the MAPE.
``--hf`` measures transformers' own ViT, ConvNeXt, ResNet-50, T5, BERT, GPT-2 and DeBERTa-v2 instead (small configs
built by transformers with real weights), predicted from their ``hf:`` names, which the answer builds on ``meta``.
Timings on a shared host move by ~10 % within minutes and 20-35 % across hours: compare the errors, not single
milliseconds. The op models answer at the host speed of the op benchmark that fitted them, so the steps are also put on
that speed (the speed probe of ``prenet/measurement/probe.py``, sampled before each model, against the op benchmark's
samples that ``train_ops`` keeps beside the CPU models: one factor for the whole check, as ``evaluate_ops`` rescales the zoo's steps), and the
MAPE is printed both ways; and the default answer, which scales the recorded one to the host's speed now
(``prenet/host_speed.py``, probed once at the end of the check), against the steps as timed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from prenet.measurement.probe import SpeedProbe, fastest_of, probe_samples, speed_ratio  # noqa: E402

#: speed-probe samples taken before each model's timing (~20 ms each)
PROBES_PER_MODEL = 3


class Tagger(nn.Module):
    """Embedding → 2-layer LSTM → the last step's tag."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(5000, 128)
        self.lstm = nn.LSTM(128, 256, num_layers=2, batch_first=True)
        self.out = nn.Linear(256, 20)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.lstm(self.emb(x))[0][:, -1])


def mlp(widths: list[int]) -> nn.Sequential:
    """Linear layers of ``widths`` with ReLU between them."""
    layers: list[nn.Module] = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


def cases() -> dict[str, tuple[nn.Module, tuple[torch.Tensor, torch.Tensor], str]]:
    """(module, example batch, optimizer) of each model."""
    from prenet.torchvision_import import import_torchvision

    tv = import_torchvision()
    encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(256, 4, 1024, batch_first=True), 2)
    return {
        "mlp 512-2048-2048-10, batch 32": (mlp([512, 2048, 2048, 10]), (torch.randn(32, 512), torch.randint(0, 10, (32,))), "sgd"),
        "mlp 784-1536x3-10, batch 8": (mlp([784, 1536, 1536, 1536, 10]), (torch.randn(8, 784), torch.randint(0, 10, (8,))), "sgd"),
        "mlp 256-1024-1024-10, batch 64, adam": (mlp([256, 1024, 1024, 10]), (torch.randn(64, 256), torch.randint(0, 10, (64,))), "adam"),
        "mobilenet_v3_small 128 px, batch 8": (
            tv.models.mobilenet_v3_small(num_classes=10),
            (torch.randn(8, 3, 128, 128), torch.randint(0, 10, (8,))),
            "sgd",
        ),
        # stride-2 depthwise layers of 3x3 and 5x5 (in BF16 their backward runs as oneDNN's batch-reduce GEMM)
        "efficientnet_b0 96 px, batch 8": (
            tv.models.efficientnet_b0(num_classes=10),
            (torch.randn(8, 3, 96, 96), torch.randint(0, 10, (8,))),
            "sgd",
        ),
        # at batch 8 on one thread, 33 of its 53 convolutions run natively (THNN: a GEMM per sample; family conv_native)
        "resnet50 64 px, batch 8": (
            tv.models.resnet50(num_classes=10),
            (torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,))),
            "sgd",
        ),
        "TransformerEncoder 2 x d256, 16 x 64 tokens": (
            nn.Sequential(encoder, nn.Flatten(), nn.Linear(256 * 64, 10)),
            (torch.randn(16, 64, 256), torch.randint(0, 10, (16,))),
            "sgd",
        ),
        "LSTM tagger 2 x 256, 16 x 50 tokens": (Tagger(), (torch.randint(0, 5000, (16, 50)), torch.randint(0, 20, (16,))), "sgd"),
    }


#: transformers' own models for ``--hf``: (model, config fields / sizes, batch size)
HF_CASES = [
    ("hf:vit", {"num_hidden_layers": 2, "image_size": 96}, 8),
    ("hf:convnext", {"image_size": 64, "depths": [1, 1, 1, 1]}, 8),
    ("hf:resnet", {"image_size": 64}, 8),
    ("hf:t5", {"num_layers": 1, "num_decoder_layers": 1, "seq_len": 64, "d_model": 256, "d_ff": 1024, "num_heads": 4}, 8),
    ("hf:bert", {"num_hidden_layers": 2, "seq_len": 128}, 4),
    ("hf:gpt2", {"n_layer": 2, "seq_len": 128}, 4),
    (
        "hf:deberta-v2",
        {"num_hidden_layers": 2, "seq_len": 128, "hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12, "vocab_size": 32000},
        4,
    ),
]


def hf_cases() -> dict[str, tuple[nn.Module, tuple[torch.Tensor, torch.Tensor], str, str, dict]]:
    """(module with real weights, example batch, optimizer, the name it is predicted from, its sizes) of each."""
    from prenet.user_models import build_model

    out = {}
    for spec, sizes, batch in HF_CASES:
        torch.manual_seed(0)
        module, example = build_model(spec, batch, dict(sizes), meta=False)
        out[f"{spec} {sizes}"[:46]] = (module, example, "sgd", spec, dict(sizes))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hf", action="store_true", help="transformers' own models instead of the torch ones")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="bf16: each step under CPU autocast, as predicted")
    ap.add_argument("--only", default="", help="only the models whose name contains this text")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    from prenet.api import predict_step_time
    from prenet.measurement.allocator import keep_freed_memory
    from prenet.measurement.models import measure_model

    print(f"allocator: {keep_freed_memory()}, threads {a.threads}, {a.precision}")
    probe = SpeedProbe(a.threads, every_s=0.0)
    rows = []
    todo = hf_cases() if a.hf else {k: (*v, None, None) for k, v in cases().items()}
    for name, (module, example, optimizer, spec, sizes) in todo.items():
        if a.only not in name:
            continue
        for _ in range(PROBES_PER_MODEL):  # the host's speed beside each model's timing (prenet/measurement/probe.py)
            probe.sample()
        measured = measure_model(module, example, optimizer=optimizer, warmup=3, repeats=7, min_block_ms=20.0, precision=a.precision)
        target = (module, example) if spec is None else spec
        p = predict_step_time(
            target,
            batch_size=int(example[0].shape[0]),
            hardware="local",
            optimizer=optimizer,
            threads=a.threads,
            zoo_kwargs=sizes,
            precision=a.precision,
            host_speed="recorded",  # as fitted; the default answer is this × the host-speed factor below
        )
        rows.append((name, measured, p.step_seconds * 1e3, p.dram_refetch_ms))
    # the op models answer at the host speed of the op benchmark that fitted them; a shared host drifts by 20-35 % within
    # hours, so the steps are also put on that speed, as evaluate_ops puts the zoo's (one factor for the whole check)
    from prenet.api import _hardware
    from prenet.paths import default_path
    from prenet.steptime.efficiency import EfficiencyModel

    hw, ops_model = _hardware("local", a.threads), EfficiencyModel.load(default_path("models_ops"))
    # the op benchmark's probe samples, as train_ops keeps them beside the CPU models (what an answer's probe compares with)
    ref = ops_model.host_probes.get(hw.hardware_id, {}).get("probe_ms", [])
    reference = pl.DataFrame({"probe_ms": ref}, schema={"probe_ms": pl.Float64})
    now = pl.DataFrame({"probe_ms": probe.samples}, schema={"probe_ms": pl.Float64})
    ratio = speed_ratio(reference, now)
    factor = None if ratio is None else ratio[0]
    # the default answer (prenet.host_speed): the recorded one × what the probe reads now (one factor per process)
    speed = ops_model.at_host_speed(hw, "now")
    now_factor = 1.0 if speed is None else speed.factor
    errors, scaled, default = [], [], []
    for name, measured, predicted, refetch in rows:
        errors.append(abs(predicted / measured.median_ms - 1))
        default.append(abs(predicted * now_factor / measured.median_ms - 1))
        line = (
            f"{name:46s} measured {measured.median_ms:8.2f} ms (spread {measured.spread_rel:.2f})  predicted {predicted:8.2f} ms  "
            f"{100 * (predicted / measured.median_ms - 1):+6.1f} %"
        )
        if factor is not None:
            scaled.append(abs(predicted / (measured.median_ms * factor) - 1))
            line += f"  at the benchmark's speed {100 * (predicted / (measured.median_ms * factor) - 1):+6.1f} %"
        print(line + f"  (DRAM refetch {refetch:.2f} ms)")
    print(
        f"MAPE over {len(errors)} models, as timed: the default answer {100 * sum(default) / len(default):.1f} % "
        + (f"({speed.note()})" if speed is not None else "(no host-speed scaling: too few op-benchmark probes)")
        + f"; the recorded answer {100 * sum(errors) / len(errors):.1f} %"
    )
    if factor is None:
        print("the recorded answer at the op benchmark's host speed: no op-benchmark probes to compare the host's speed with")
    else:
        k = ratio[1]  # type: ignore[index]
        print(
            f"the recorded answer at the op benchmark's host speed: {100 * sum(scaled) / len(scaled):.1f} % (steps × {factor:.3f}: speed probe "
            f"{fastest_of(probe_samples(reference), k):.3f} ms then, {fastest_of(probe_samples(now), k):.3f} ms now, the expected "
            f"fastest of {k} samples)"
        )


if __name__ == "__main__":
    main()
