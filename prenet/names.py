"""Names shared by the library, the table schemas and the CLI's choices: one definition each. (A light module with
no imports, so a schema that needs a name does not import the package that uses it.)"""

#: Optimizers of the early-success corpus: plain SGD, SGD with heavy-ball momentum 0.9, Adam (L2 weight decay),
#: AdamW (decoupled).
CORPUS_OPTIMIZERS: tuple[str, ...] = ("sgd", "momentum", "adam", "adamw")
#: Learning-rate schedules of the corpus, per minibatch step (:func:`prenet.outcome.generator.lr_factor`).
SCHEDULES: tuple[str, ...] = ("constant", "step", "cosine", "warmup_cosine")
#: Fine-tuning losses of the convergence predictor.
LOSSES: tuple[str, ...] = ("mse", "cross_entropy")
