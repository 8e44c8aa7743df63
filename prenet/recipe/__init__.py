"""The PreNeT layer recipe (ICPE 2025), kept as the seed method's measured baseline beside the op-level model: layer
features, per-layer-type regressors, their selection and leave-one-GPU-out evaluation, and the whole-model sum over
walked layers. Nothing ``prenet plan`` or ``prenet predict`` answers with reads it."""
