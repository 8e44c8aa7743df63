"""Stage ``validate``: the schema gate. Every failure is collected; on any, the stage fails and nothing
downstream runs."""

from __future__ import annotations

from omegaconf import DictConfig

from pipeline.artifacts import write_artifact
from pipeline.config import hydra_entry
from prenet.data.io import read_table, write_json
from prenet.data.io import validate as validate_frame
from prenet.data.schemas import LayerFeatures, RawTimings
from prenet.errors import DataValidationError


def validate(cfg: DictConfig) -> dict:
    """Validate the raw timings and the feature table against their schemas; write the validated table
    (``paths.validated``) and a report (``paths.validation_report``)."""
    report: dict = {"tables": {}}
    errors: list[str] = []
    checked = {}
    for name, path, schema in (("raw_timings", cfg.paths.raw_timings, RawTimings), ("features", cfg.paths.features, LayerFeatures)):
        df = read_table(path)
        try:
            checked[name] = validate_frame(df, schema, source=path)
            report["tables"][name] = {"path": str(path), "rows": df.height, "ok": True}
        except DataValidationError as e:
            errors.append(str(e))
            report["tables"][name] = {"path": str(path), "rows": df.height, "ok": False, "errors": str(e)}
    write_json(report, cfg.paths.validation_report)
    if errors:
        raise DataValidationError("validate failed:\n" + "\n".join(errors))
    write_artifact(checked["features"], cfg, "validated")
    print(f"validate: {checked['features'].height} feature rows and {checked['raw_timings'].height} raw rows pass -> {cfg.paths.validated}")
    return report


if __name__ == "__main__":
    hydra_entry(validate)()
