"""The ``report`` plugin: what a run did, from its run directory — plots, index.html, the
summary table (:mod:`~trm.plugins.report.build`) behind ``trm report`` and ``Run.report``,
with the leak and slowdown detectors (:mod:`.detect`), which also judge every run as it ends
(``run_findings``). matplotlib is imported only here, when a report is drawn (:mod:`.plugin`
registers the command cheaply).
"""
