"""The planner: what a training job costs on each hardware option (step time × steps × price per hour).

* :mod:`prenet.planner.intervals` — the error ratios behind every interval and the one rule that bounds them
  (the evaluation stages depend on this module only);
* :mod:`prenet.planner.pricing` — prices per GPU-hour;
* :mod:`prenet.planner.plan` — :func:`make_plan`, the rows and the forecast glue;
* :mod:`prenet.planner.render` — the text table.
"""
