"""The ``formats`` plugin (:mod:`.plugin`): the model formats ``reference`` and ``hf`` and the
commands ``trm import`` and ``trm export``.

Weights in and out of the reference implementation (SamsungSAILMontreal/TinyRecursiveModels).

``trm import`` turns a reference checkpoint (``step_N`` + ``all_config.yaml``) into a trm run
directory (:mod:`.importer`); ``trm export --format reference`` writes a trm run back in the
reference's layout (:mod:`.exporter`); ``trm run --init-from`` starts a run from either kind
of weights (``trm.init_from``, through the format's ``read_weights``). The config mapping
is :mod:`.reference_config`, the weight names and shapes :mod:`.reference_weights`. Hugging
Face model folders: :mod:`.hf_export` writes one (the card :mod:`.hf_card`),
:mod:`.hf_folder` reads one with json and safetensors (imported only here). docs/interop.md
is the user's page.
"""
