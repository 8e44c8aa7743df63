"""Step time, the product's answer: a traced training step's ATen ops, each timed as roofline ÷ a learned efficiency
(:mod:`prenet.steptime.efficiency`), summed (:mod:`prenet.steptime.step`). The PreNeT layer recipe, the seed method's
measured baseline, lives in :mod:`prenet.recipe`; memory in :mod:`prenet.memory`."""
