"""The real configuration: composes in every group option, params.yaml is its generated image, dvc.yaml agrees."""

from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from pipeline.config import CONF_DIR, compose
from pipeline.stages import STAGES

REPO = Path(__file__).resolve().parents[1]


def test_params_yaml_is_the_composed_default():
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    assert params == OmegaConf.to_container(compose([]), resolve=True), "params.yaml is stale: run `make params`"


@pytest.mark.parametrize("group", ["benchmark", "models", "predictor", "hardware", "split", "experiment"])
def test_every_option_of_every_group_composes(group):
    options = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
    assert options
    for opt in options:
        cfg = compose([f"{group}={opt}"])
        if group == "predictor":
            assert opt.startswith(cfg.predictor.name)  # xgboost_small is an xgboost


def test_required_predictors_exist():
    assert {"xgboost", "random_forest", "gbdt", "mlp", "linear"} <= {p.stem for p in (CONF_DIR / "predictor").glob("*.yaml")}


def test_dvc_yaml_stages_are_the_verbs_in_order_and_call_one_function_each():
    dvc = yaml.safe_load((REPO / "dvc.yaml").read_text())
    assert list(dvc["stages"]) == list(STAGES)
    for name, stage in dvc["stages"].items():
        assert stage["cmd"] == f"python -m pipeline.run {name}"
        assert (REPO / "pipeline" / f"{name}.py").exists()


def test_dvc_hydra_composition_is_enabled():
    text = (REPO / ".dvc" / "config").read_text()
    assert "[hydra]" in text and "enabled = true" in text and "config_dir = conf" in text
