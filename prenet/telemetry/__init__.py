"""Early-success telemetry: a recorder for any torch training loop."""

from prenet.telemetry.recorder import Recorder, telemetry_schema

__all__ = ["Recorder", "telemetry_schema"]
