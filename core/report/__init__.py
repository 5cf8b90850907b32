"""trm.report: the leak and slowdown detectors (:mod:`~trm.report.detect`) that the end of
``trm run`` runs on a run's metrics.jsonl. The report itself — plots, index.html, the summary
table behind ``trm report`` — is the ``report`` plugin (``trm.plugins.report``).
"""
