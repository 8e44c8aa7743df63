"""Which of transformers' model types prenet answers for: each type's default config built on ``meta`` (``hf:<type>``,
batch 2, 64 tokens where it takes token ids) and one FP32 Adam training step traced as a CUDA step, as
``prenet predict step-time --model hf:<type>`` does (a type whose FP32 step fails but which traces with eager attention
or in BF16 answers, noted so). Writes ``data/hf/buildable.json`` (the transformers version
checked, the types that answered, and for every other type its one-line reason), which ``prenet models hf`` reads to
list only the types that answer.

    python scripts/check_hf_models.py            # every type: about 10-20 minutes on one thread
    python scripts/check_hf_models.py bert gpt2  # only these (prints, writes nothing)
"""

from __future__ import annotations

import json
import signal
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Seconds one type may take to build and trace before it is recorded as too slow
PER_TYPE_S = 90
#: The config field that makes a forward whose SDPA mask check reads the ids traceable on meta
EAGER = {"_attn_implementation": "eager"}


class _Timeout(BaseException):  # not an Exception: the build's and the trace's own handlers must not catch it
    pass


def _alarm(_signum, _frame):
    raise _Timeout


def check(model_type: str, precision: str = "fp32", extra: dict | None = None) -> str | None:
    """None when ``hf:<model_type>`` builds (config fields ``extra`` set) and its step traces at ``precision``; else
    the one-line reason."""
    from prenet.errors import PrenetError
    from prenet.hf_models import hf_config, image_classifier, offline
    from prenet.ops import trace_step
    from prenet.user_models import build_model

    spec = f"hf:{model_type}"
    try:
        signal.alarm(PER_TYPE_S)
        try:
            with offline():
                vision = image_classifier(hf_config(model_type)) is not None
        except Exception:  # noqa: BLE001 - build_model below raises the one line a user sees
            vision = True
        sizes = ({} if vision else {"seq_len": 64}) | (extra or {})
        module, example = build_model(spec, 2, sizes)
        trace_step(module, example, optimizer="adam", precision=precision, device_type="cuda")
        return None
    except _Timeout:
        return f"took over {PER_TYPE_S} s to build and trace"
    except PrenetError as e:
        return str(e).splitlines()[0]
    except Exception as e:  # what a user would see as a traceback: recorded, never raised
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]
    finally:
        signal.alarm(0)


def main(argv: list[str]) -> int:
    import torch

    from prenet.hf_models import import_transformers

    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    signal.signal(signal.SIGALRM, _alarm)
    tf = import_transformers()
    types = argv or sorted(tf.CONFIG_MAPPING.keys())
    built, fails, notes = [], {}, {}
    t0 = time.monotonic()
    for i, t in enumerate(types, 1):
        why = check(t)
        if why is not None and "cannot be called on meta tensors" in why and check(t, extra=EAGER) is None:
            built.append(t)  # SDPA's mask check reads the ids: eager attention runs on meta
            notes[t] = "answers with --model-arg _attn_implementation=eager (timing eager attention)"
            why = None
        elif why is not None and check(t, "bf16") is None:  # e.g. Mixtral's grouped GEMMs run in BF16 only
            built.append(t)
            notes[t] = "answers with --precision bf16 only" + ("" if "BF16 type" not in why else " (its experts' grouped GEMMs run in BF16 only)")
            why = None
        elif why is None:
            built.append(t)
        else:
            fails[t] = why
        print(f"[{i}/{len(types)} {time.monotonic() - t0:.0f}s] {t}: {notes.get(t) or why or 'ok'}", flush=True)
    if argv:
        return 0
    from prenet.hf_buildable import record_path

    out = record_path()
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "transformers": tf.__version__,
        "torch": torch.__version__,
        "checked": time.strftime("%Y-%m-%d", time.gmtime()),
        "how": "scripts/check_hf_models.py: default config on meta, batch 2 (64 tokens), FP32 (else BF16) Adam step traced for CUDA",
        "answers": built,
        "notes": notes,
        "fails": fails,
    }
    out.write_text(json.dumps(record, indent=1, sort_keys=False) + "\n")
    print(f"{len(built)} of {len(types)} types answer; {out} written ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
