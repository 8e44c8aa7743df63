"""The clock a GPU sustains on dense math when its board power, not its boost clock, is the limit (T4, L4, A10, PCIe
boards of datacenter chips).

A board's power per FP32 lane and GHz of boost clock, ``tdp_w / (cores × boost GHz)``, is what its vendor budgets for
running every lane at boost. Boards of one chip design (one architecture, one number of FP32 lanes per SM) spend the
same energy per lane and cycle, so the most generously powered board of a design in the catalog (the A100 SXM4 for
the A100 PCIe boards, the RTX 4090 for the L4, the RTX 2080 Ti for the T4) is taken to run at boost, and a board
budgeted a share ``r`` of that power runs at the clock where CMOS power, ∝ f·V² with the voltage ∝ f across the DVFS
range, falls to it:

    sustained clock = boost × min(1, r ** (1 / CLOCK_POWER_EXPONENT)),   at least the base clock

(the base clock is the vendor's promise under its board power). All arithmetic units scale with it; memory bandwidth
does not. The op models are fitted against boost-clock peaks (the vendored op timings are bursts); the sustained
clock applies to the boards whose own ops did not train them (a measured board's efficiencies already hold its limit:
:meth:`prenet.steptime.efficiency.EfficiencyModel.clock_for`), in ``predict layers`` and ``predict step-time`` alike.

Measured (2026-12-05, ``evaluate_ops``): leave-one-GPU-out over the 12 GPUs with measured ops, mean per-GPU MAPE
27.5 → 27.4 %; the held-out power-limited boards T4 23.8 → 21.8 %, A100 40GB PCIe 14.2 → 12.7 %, but P4 22.6 → 24.4 %
and V100 PCIe 20.3 → 21.5 %. NeuSight's L4 linear layers measured ÷ predicted 2.32 → 1.82; its 19 unseen whole-model
FP32 steps 6.7 → 6.8 % (L4 rows +4/−16/−5 → +15/−8/+3 %). Taking the training ops against sustained clocks as well
made leave-one-GPU-out 26.1 % but the whole-model checks worse (NeuSight 10.5 %: the unthrottled H100 predicted 11-16 %
too fast), so the models are fitted at boost (:meth:`prenet.steptime.efficiency.EfficiencyModel.fit`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from prenet.hardware.spec import HardwareSpec

#: Dynamic power against clock: P ∝ f·V² and V ∝ f, so P ∝ f³ (2 was tried: mean LOGO MAPE 28.3 %, worse than the boost
#: clock's 27.5 %).
CLOCK_POWER_EXPONENT = 3.0


def lane_power_w(spec: HardwareSpec) -> float | None:
    """Board power (W) per FP32 lane per GHz of boost clock; None without a board power, lanes or clock."""
    if spec.kind != "gpu" or not spec.tdp_w or not spec.cores or not spec.clock_mhz:
        return None
    return spec.tdp_w / (spec.cores * spec.clock_mhz / 1e3)


def design(spec: HardwareSpec) -> tuple[str, int] | None:
    """(architecture, FP32 lanes per SM): boards sharing it share one chip design; None where either is unknown."""
    if spec.kind != "gpu" or not spec.architecture or not spec.sms or not spec.cores:
        return None
    return spec.architecture, round(spec.cores / spec.sms)


def sustained_clock_mhz(spec: HardwareSpec, fleet: Iterable[HardwareSpec]) -> tuple[float, HardwareSpec | None]:
    """(clock in MHz that ``spec`` sustains on dense math, the board of ``fleet`` its power was compared with).

    The boost clock, with no reference, when the board's power, design or clocks are unknown, or when no board of
    ``fleet`` shares its design."""
    own, key = lane_power_w(spec), design(spec)
    if own is None or key is None:
        return spec.clock_mhz, None
    siblings = [(p, s) for s in fleet if design(s) == key and (p := lane_power_w(s)) is not None]
    if not siblings:
        return spec.clock_mhz, None
    ref_power, ref = max(siblings, key=lambda t: t[0])
    share = min(1.0, own / ref_power) ** (1.0 / CLOCK_POWER_EXPONENT) if own < ref_power else 1.0
    clock = spec.clock_mhz * share
    if spec.base_clock_mhz:
        clock = max(clock, min(spec.base_clock_mhz, spec.clock_mhz))
    return clock, ref


def with_sustained_clock(spec: HardwareSpec, fleet: Iterable[HardwareSpec]) -> HardwareSpec:
    """``spec`` with :attr:`~HardwareSpec.sustained_clock_mhz` and the reason (:attr:`~HardwareSpec.power_reference`)
    filled in from ``fleet`` (the catalog); a CPU, or a GPU whose power cannot be compared, is returned unchanged."""
    clock, ref = sustained_clock_mhz(spec, fleet)
    if ref is None:
        if spec.kind != "gpu":
            return spec
        missing = [k for k, v in (("tdp_w", spec.tdp_w), ("architecture", spec.architecture), ("sms", spec.sms)) if not v]
        why = f"its spec gives no {', '.join(missing)}" if missing else f"no catalog board shares its design {design(spec)}"
        return replace(spec, power_reference=f"not checked for a power limit ({why}): timed at its {spec.clock_mhz:.0f} MHz boost clock")
    own, ref_power = lane_power_w(spec), lane_power_w(ref)
    assert own is not None and ref_power is not None
    why = (
        f"{own / ref_power:.0%} of the {ref.hardware_id}'s power per FP32 lane and GHz"
        if ref is not spec and own < ref_power
        else "the best-powered board of its design"
    )
    return replace(spec, sustained_clock_mhz=clock, power_reference=why)


def at_boost_clock(spec: HardwareSpec) -> HardwareSpec:
    """``spec`` with its compute peaks at the boost clock (no power limit): what measured burst timings are taken
    against when the op models are fitted (:meth:`prenet.steptime.efficiency.EfficiencyModel.fit`)."""
    return spec if spec.sustained_clock_mhz is None else replace(spec, sustained_clock_mhz=None)


def power_note(spec: HardwareSpec, *, measured: bool = False) -> str | None:
    """One line for an answer on a power-limited board: which clock its math was timed at, and why; None otherwise.
    ``measured``: the board's own ops trained the op models, so it is answered at the clocks they ran at."""
    if spec.power_reference.startswith("not checked"):
        return f"{spec.hardware_id} was {spec.power_reference}"
    if spec.sustained_clock_mhz is None or spec.sustained_clock_mhz >= spec.clock_mhz:
        return None
    if measured:
        return (
            f"{spec.hardware_id} is power-limited ({spec.tdp_w:g} W: about {spec.sustained_clock_mhz:.0f} of its "
            f"{spec.clock_mhz:.0f} MHz boost clock on dense math), but its own measured ops train the op models, so it is "
            "answered at the clocks those ran at, not scaled again"
        )
    return (
        f"{spec.hardware_id} is power-limited: its {spec.tdp_w:g} W board sustains about {spec.sustained_clock_mhz:.0f} of "
        f"its {spec.clock_mhz:.0f} MHz boost clock on dense math ({spec.compute_clock_share:.0%}; {spec.power_reference}), "
        "so its compute peaks are scaled by that share"
    )
