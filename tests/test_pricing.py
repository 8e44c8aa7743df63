"""Pricing files: every key names a catalog GPU (or local), resolved to its catalog name; a typo stops with one line."""

import pytest

from pipeline.cli import main
from pipeline.config import CONF_DIR
from prenet.errors import PrenetError
from prenet.planner.pricing import load_prices


def test_the_shipped_prices_are_keyed_by_catalog_names():
    from prenet.hardware import catalog

    prices = load_prices(CONF_DIR / "pricing" / "on_demand.yaml")
    assert len(prices) >= 5 and set(prices) <= set(catalog())


def test_aliases_resolve_and_an_unknown_key_names_the_closest_gpu(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("prices:\n  t4: 0.5\n  local: 0\n")
    assert set(load_prices(f)) == {"Tesla T4", "local"}
    f.write_text("prices:\n  H100 SMX5 80GB: {usd_per_hour: 2.0}\n")
    with pytest.raises(PrenetError) as e:
        load_prices(f)
    msg = str(e.value)
    assert "\n" not in msg and str(f) in msg and "'H100 SMX5 80GB'" in msg and "H100 SXM5 80GB" in msg


def test_an_unknown_price_override_is_one_line_and_exit_2(capsys):
    assert main(["plan", "--model", "mlp", "--batch-size", "8", "--steps", "10", "--price", "A100 SMX=1.0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--price" in err and "A100" in err
