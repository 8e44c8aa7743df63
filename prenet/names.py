"""Names shared by the library, the table schemas and the CLI's choices: one definition each. (A light module with
no imports, so a schema that needs a name does not import the package that uses it, and a stage that validates a table
does not depend on the rules of a predictor it never runs.)"""

# ---- step time ------------------------------------------------------------------------------------------------------
#: Operator families (:mod:`prenet.ops.families` holds the rule that maps an ATen op to one), in the report's order.
FAMILIES: tuple[str, ...] = (
    "gemm",
    "conv",
    "conv_native",
    "conv_grouped",
    "conv_depthwise",
    "conv_depthwise_brgemm",
    "attention",
    "norm",
    "softmax",
    "elementwise",
    "reduction",
    "embedding",
    "rnn",
    "copy",
    "loss",
    "optimizer",
    "other",
)
#: Training precisions (:mod:`prenet.ops.trace`): FP32 as torch runs it (cuDNN on TF32 where the GPU has it), TF32
#: GEMMs/convolutions, fp16 and bf16 autocast. Also the
#: compute units an op runs on.
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "fp16", "bf16")
#: The precisions that run under autocast with 16-bit activations (FP32 master weights, gradients and optimizer state).
AUTOCAST_PRECISIONS: tuple[str, ...] = ("fp16", "bf16")
#: What one timed iteration does: inference forward, forward + backward (a layer inside a network), a training step.
DIRECTIONS: tuple[str, ...] = ("forward", "forward_backward", "train_step")
#: Optimizers of a timed or traced training step (:func:`prenet.optimizers.make_optimizer`): plain SGD, SGD with
#: momentum 0.9 (its steady state: the buffer exists), SGD with Nesterov momentum 0.9, Adam, AdamW (its decoupled
#: weight decay an op of the step), RMSprop with momentum 0.9 (as EfficientNet and MobileNet train).
OPTIMIZERS: tuple[str, ...] = ("sgd", "momentum", "nesterov", "adam", "adamw", "rmsprop")
#: Optimizer state buffers per parameter (memory estimates; the data a step touches).
OPTIMIZER_STATE_BUFFERS: dict[str, int] = {"none": 0, "sgd": 0, "sgd_momentum": 1, "momentum": 1, "nesterov": 1, "adam": 2, "adamw": 2, "rmsprop": 2}
#: The optimizers torch runs as one fused kernel (``fused=True``); torch has no fused RMSprop.
FUSED_OPTIMIZERS: tuple[str, ...] = ("sgd", "momentum", "nesterov", "adam", "adamw")
#: Memory formats of a traced step's 4-D tensors: ``contiguous`` (NCHW, torch's default) or ``channels_last`` (NHWC,
#: ``model.to(memory_format=torch.channels_last)`` and the same for the input batch).
MEMORY_FORMATS: tuple[str, ...] = ("contiguous", "channels_last")
#: The optimizer column of a layer timing: ``none`` for a direction without an optimizer step.
LAYER_OPTIMIZERS: tuple[str, ...] = ("none", *OPTIMIZERS)
#: Layer types of the PreNeT layer recipe (:data:`prenet.layers.REGISTRY` holds one entry per name).
LAYER_OPS: tuple[str, ...] = (
    "add",
    "avgpool2d",
    "batchnorm2d",
    "conv2d",
    "cross_entropy",
    "dropout",
    "embedding",
    "gelu",
    "gru",
    "layernorm",
    "linear",
    "lstm",
    "maxpool2d",
    "mha",
    "relu",
    "rnn",
    "sigmoid",
    "softmax",
    "tanh",
)

# ---- early success and convergence ---------------------------------------------------------------------------------
#: Optimizers of the early-success corpus: plain SGD, SGD with heavy-ball momentum 0.9, Adam (L2 weight decay),
#: AdamW (decoupled).
CORPUS_OPTIMIZERS: tuple[str, ...] = ("sgd", "momentum", "adam", "adamw")
#: Learning-rate schedules of the corpus, per minibatch step (:func:`prenet.outcome.generator.lr_factor`).
SCHEDULES: tuple[str, ...] = ("constant", "step", "cosine", "warmup_cosine")
#: The ``outcome.corpus.enrich`` recipes a corpus may hold (:func:`prenet.outcome.generator.recipe_runs`); a recipe's
#: runs carry its name as their phase.
CORPUS_RECIPES: tuple[str, ...] = ("heavy_ball", "user_loop")
#: Phases of a corpus run (:func:`prenet.outcome.generator.plan_domain`): sampled from the prior, boundary and take-off
#: interpolations, and the recipes.
CORPUS_PHASES: tuple[str, ...] = ("prior", "boundary", "takeoff", *CORPUS_RECIPES)
#: The priors of the out-of-corpus runs (:mod:`prenet.outcome.out_of_corpus`): a user's loop within the corpus's
#: user_loop ranges, and settings beyond every corpus recipe.
OOC_PRIORS: tuple[str, ...] = ("user_loop", "beyond")
#: The hidden activations of an out-of-corpus run.
OOC_ACTIVATIONS: tuple[str, ...] = ("relu", "tanh", "gelu", "elu", "leaky_relu")
#: The optimizers of an out-of-corpus run: SGD with heavy-ball momentum, SGD with Nesterov momentum, RMSprop.
OOC_OPTIMIZERS: tuple[str, ...] = ("sgd", "nesterov", "rmsprop")
#: Fine-tuning losses of the convergence predictor.
LOSSES: tuple[str, ...] = ("mse", "cross_entropy")
#: Empirical-NTK estimators of the convergence forecast (:func:`prenet.convergence.ntk.resolve_method`); ``kron``: the
#: class-averaged kernel K ⊗ I_C from Rademacher logit probes (:func:`prenet.convergence.ntk.class_averaged_ntk`).
NTK_METHODS: tuple[str, ...] = ("exact", "projection", "kron", "auto")
#: How a convergence forecast follows a kernel that moves during fine-tuning: ``trajectory`` re-linearizes at the weights
#: the linearized dynamics themselves reach (no training), ``probe`` fine-tunes a copy for a few real steps and
#: re-linearizes there, ``none`` keeps the kernel at the pre-trained weights.
CORRECTIONS: tuple[str, ...] = ("trajectory", "probe", "none")
