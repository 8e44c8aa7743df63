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


def test_params_yaml_names_the_overrides_it_was_composed_with(tmp_path):
    from pipeline.config import write_params

    p = write_params(compose(["seed=3"]), tmp_path / "params.yaml", ["seed=3"])
    head = p.read_text().splitlines()[:2]
    assert head[1] == "# composed with the overrides: seed=3 (`make params` restores the defaults)"
    assert yaml.safe_load(p.read_text())["seed"] == 3
    default = write_params(compose([]), tmp_path / "default.yaml")  # no overrides: the header of `make params` alone
    assert default.read_text().splitlines()[1] == (REPO / "params.yaml").read_text().splitlines()[1]


def _dvc_params() -> list[str]:
    """Every params key a dvc.yaml stage lists (``dvc repro`` refuses a stage whose key params.yaml lacks)."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    keys: set[str] = set()
    for stage in stages.values():
        for entry in stage.get("params", []):
            keys.update([entry] if isinstance(entry, str) else [k for v in entry.values() for k in v])
    return sorted(keys)


def _lacks(cfg: dict, key: str) -> bool:
    node = cfg
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return True
        node = node[part]
    return False


@pytest.mark.parametrize("group", sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and any(p.glob("*.yaml"))))
def test_every_option_of_every_group_composes_with_every_dvc_param(group):
    """Each option of each group composes, and keeps every params key a dvc.yaml stage lists: an option that drops
    one fails `dvc repro` under it (until 2026-12-06 models=tiny, and so experiment=tiny and the retrain flow's test,
    lacked models.min_rounds)."""
    keys = _dvc_params()
    options = sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))
    for opt in options:
        cfg = compose([f"{group}={opt}"])
        if group == "predictor":
            assert opt.startswith(cfg.predictor.name)  # xgboost_small is an xgboost
        plain = OmegaConf.to_container(cfg, resolve=True)
        missing = [k for k in keys if _lacks(plain, k)]
        assert not missing, f"{group}={opt}: {missing}"


def test_the_tiny_experiment_shrinks_every_op_benchmark_space():
    """experiment=tiny merges into quick's op benchmark, so a space quick adds stays at quick's size unless tiny names it
    too (until 2026-12-06 conv2d, pointwise convolutions and large LSTMs were measured at quick's size, 150+ blocks of
    up to 6 GFLOP: benchmark_ops took 42 s of each test session on an AMD EPYC)."""
    b = compose(["experiment=tiny"]).ops.benchmark
    for group in ("wide", "bf16_native_wide", "bf16_wide", "fp32_wide"):
        for kind, spec in b[group].items():
            assert int(spec.configs) <= 2, f"{group}.{kind}: {spec.configs} configurations"
            space = spec.space
            assert "max_flops" in space or "max_elements" in space, f"{group}.{kind}: no size cap"
            assert float(space.get("max_flops", 0)) <= 1e7 and float(space.get("max_elements", 0)) <= 1e5, f"{group}.{kind}: {dict(space)}"


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


@pytest.mark.parametrize(
    "override, says",
    [
        ("predictor=mlpp", "Could not find 'predictor/mlpp' Available options in 'predictor':"),
        ("predictor.n_estimatorz=3", "'predictor.n_estimatorz' is not a key of the configuration (did you mean 'predictor.n_estimators'?)"),
    ],
)
def test_an_override_hydra_cannot_apply_is_one_line(override, says):
    from prenet.errors import PrenetError

    with pytest.raises(PrenetError) as e:
        compose([override])
    assert says in str(e.value) and "\n" not in str(e.value) and "Config search path" not in str(e.value)


def test_retrain_refuses_a_bad_override_before_starting_prefect(capsys):
    from pipeline.cli import main

    assert main(["retrain", "predictor=mlpp"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: overrides 'predictor=mlpp'")


def test_an_override_of_the_wrong_kind_is_one_line_in_compose_and_in_a_stage():
    import subprocess
    import sys

    from prenet.errors import PrenetError

    with pytest.raises(PrenetError, match=r"^override 'predictor.n_estimators=abc': predictor.n_estimators takes a number"):
        compose(["predictor.n_estimators=abc"])
    assert compose(["predictor.n_estimators=300"]).predictor.n_estimators == 300
    proc = subprocess.run([sys.executable, "-m", "pipeline.split", "split.holdout_fraction=abc"], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "split.holdout_fraction takes a number" in proc.stderr


def test_a_stage_help_names_its_groups_not_the_whole_config():
    """``python -m pipeline.<stage> --help`` lists the groups and how to see the config (Hydra's default printed all
    ~1,100 lines of it)."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "pipeline.split", "--help"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.count("\n") < 40, proc.stdout[:300]
    assert "predictor: gbdt" in proc.stdout and "--cfg job" in proc.stdout


def test_an_artifact_root_in_the_environment_moves_every_default(tmp_path, monkeypatch):
    """PRENET_ARTIFACTS moves the library's and the CLI's default locations together (conftest sets it to an empty
    folder, so no test reads the checkout's own trained models); unset, they follow conf/ and params.yaml."""
    from pipeline.config import artifact_path
    from prenet.paths import ARTIFACTS_ENV, REPO_ROOT, default_path

    monkeypatch.setenv(ARTIFACTS_ENV, str(tmp_path))  # after prenet is imported: the defaults are read when called
    assert default_path("models_ops") == artifact_path("models_ops") == default_path("models_ops", None) == tmp_path / "models" / "steptime_ops"
    assert default_path("models_ops", "elsewhere/ops") == Path("elsewhere/ops")  # a path the caller gave wins (the API's models_dir)
    assert default_path("outcome_vendored") == REPO_ROOT / "data" / "outcome" / "vendored"  # shipped input, not an artifact
    monkeypatch.delenv(ARTIFACTS_ENV)
    assert default_path("models_ops") == artifact_path("models_ops") == REPO_ROOT / "data" / "models" / "steptime_ops"
