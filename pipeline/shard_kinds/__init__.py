"""One module per distributable kind of work (``pipeline.shards.kind`` imports only the one a stage runs, so a shard
or merge stage depends on its own predictor's modules alone): its items, how one runs, and the tables its merge writes."""
