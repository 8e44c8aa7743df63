"""Names the early-success corpus may use (one definition; the corpus, its schema and the config check read them)."""

#: Optimizers of the corpus: plain SGD, SGD with heavy-ball momentum 0.9, Adam (L2 weight decay), AdamW (decoupled).
OPTIMIZERS = ("sgd", "momentum", "adam", "adamw")
#: Learning-rate schedules, per minibatch step (:func:`prenet.outcome.corpus.lr_factor`).
SCHEDULES = ("constant", "step", "cosine", "warmup_cosine")
