"""Multi-GPU jobs: interconnects from the spec sheet, collectives by algorithm, data-parallel and sharded steps."""
