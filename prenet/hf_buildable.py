"""Which of transformers' model types prenet answers for, as last checked (``data/hf/buildable.json``, written by
``scripts/check_hf_models.py``: each type's default config built on ``meta`` and one training step traced). Read by
``prenet models hf`` (:func:`listing`) so that it lists the types a user can ask about; no torch or transformers import
here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from prenet.paths import data_dir


def record_path() -> Path:
    """Where the check's record lives (under ``PRENET_DATA_DIR``'s ``hf/``)."""
    return data_dir() / "hf" / "buildable.json"


@dataclass(frozen=True)
class HfCheck:
    """One run of ``scripts/check_hf_models.py``: the transformers and torch versions it ran with, its date
    (YYYY-MM-DD), the types whose step traced (``notes``: a caveat for some, e.g. BF16 only), and every other type's
    one-line reason."""

    transformers: str
    torch: str
    checked: str
    answers: frozenset[str]
    notes: dict[str, str]
    fails: dict[str, str]

    def applies_to(self, transformers: str, torch: str) -> bool:
        """Whether the check was made with these versions: another transformers may add or change types, another torch
        changes what traces (the BF16-only mixture-of-experts kernels); a torch build's local tag (``+cpu``,
        ``+cu121``) does not count, since the trace runs on ``meta`` either way."""
        return self.transformers == transformers and _release(self.torch) == _release(torch)

    def mismatch(self, transformers: str, torch: str) -> str:
        """Which version differs from the check's, in words ("" where it applies)."""
        return "; ".join(
            f"the check on record ran with {name} {had}, this is {now}"
            for name, had, now, same in (
                ("transformers", self.transformers, transformers, self.transformers == transformers),
                ("torch", self.torch, torch, _release(self.torch) == _release(torch)),
            )
            if not same
        )


def _release(version: str) -> str:
    """A version without its local tag: ``2.13.0+cpu`` → ``2.13.0``."""
    return version.split("+", 1)[0]


def load_check(path: Path | None = None) -> HfCheck | None:
    """The last check's record; None where there is none."""
    p = path or record_path()
    if not p.exists():
        return None
    raw = json.loads(p.read_text())
    return HfCheck(
        str(raw["transformers"]),
        str(raw.get("torch", "unknown")),
        str(raw["checked"]),
        frozenset(raw["answers"]),
        dict(raw.get("notes", {})),
        dict(raw["fails"]),
    )


def listing(names: list[str], version: str, *, show_all: bool, torch_version: str) -> tuple[list[str], str]:
    """``names`` (``hf:<type>``) as ``prenet models hf`` lists them under transformers ``version`` and torch
    ``torch_version``: the types the last check answered for (each with its caveat), or with ``show_all`` every type,
    each failing one with its reason; and the note saying which. Without a check of these versions, every name, and the
    note says so."""
    check = load_check()
    if check is None or not check.applies_to(version, torch_version):
        why = "no check on record" if check is None else check.mismatch(version, torch_version)
        return names, (
            f"{len(names)} of transformers {version}'s model types, not checked with these versions ({why}; "
            "python scripts/check_hf_models.py checks them): a type that needs audio, several inputs or no default model "
            "fails with one line saying so"
        )
    types = [n.removeprefix("hf:") for n in names]

    def shown(n: str, t: str) -> str:  # a type that answers only so says how
        return f"{n}\t{check.notes[t]}" if t in check.notes else n

    if show_all:
        listed = [shown(n, t) if t in check.answers else f"{n}\tfails: {check.fails.get(t, 'not in the check')}" for n, t in zip(names, types)]
        return listed, f"every one of {len(names)} types; the {sum(t in check.answers for t in types)} not marked fails answer"
    ok = [shown(n, t) for n, t in zip(names, types) if t in check.answers]
    where, root = record_path(), data_dir().parent
    return ok, (
        f"{len(ok)} of {len(names)} model types answer (default config built on meta and a training step traced, "
        f"transformers {check.transformers}, torch {check.torch}, {check.checked}: {where.relative_to(root) if where.is_relative_to(root) else where}); "
        "--all lists the others with why they fail"
    )
