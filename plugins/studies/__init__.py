"""The ``studies`` plugin (:mod:`.plugin`): many runs of one spec that vary some of its keys, on
Optuna (``trm sweep``, :func:`trm.sweep` through the ``api_functions`` hook).

``study_file.py`` reads and checks the study file; ``runner.py`` runs trials as ordinary trm
runs, shares the study between worker processes and resumes a cut-off trial; ``plugins.py``
holds the in-process plugins each trial runs with (pruning, the worker's share of the
machine); ``results.py`` the study's rows; ``report.py`` the study's page for ``trm report``.
Optuna is imported only here, when a study runs or is reported (docs/sweeps.md).
"""
