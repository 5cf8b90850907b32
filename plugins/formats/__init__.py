"""Weights in and out of the reference implementation (SamsungSAILMontreal/TinyRecursiveModels).

``trm import`` turns a reference checkpoint (``step_N`` + ``all_config.yaml``) into a trm run
directory (:mod:`.importer`); ``trm export --format reference`` writes a trm run back in the
reference's layout (:mod:`.exporter`); ``trm run --init-from`` starts a run from either kind
of weights (:mod:`.init_from`). The config mapping is :mod:`.reference_config`, the weight
names and shapes :mod:`.reference_weights`. docs/interop.md is the user's page.
"""
