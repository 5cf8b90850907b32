"""trm.testing — a kit for testing trm plugins with hypothesis.

``trm.testing.strategies`` generates valid run specs, runtimes, dataset shapes and hardware
profiles; ``check_memory_estimator(plugin)`` runs the properties every ``estimate_memory``
implementation should have (see :mod:`trm.testing.checks`). A third-party estimator's own
test suite calls it exactly as trm's tests call it on the built-in estimator::

    from trm.testing import check_memory_estimator
    import my_plugin

    def test_my_estimator_has_the_properties():
        check_memory_estimator(my_plugin)

Needs hypothesis (``pip install trm[test]``).
"""

from trm.testing.checks import PROPERTIES, call_estimator, check_memory_estimator, total_bytes
from trm.testing.strategies import (
    arch_specs,
    dataset_shapes,
    hardware_profiles,
    run_specs,
    runtimes,
)

__all__ = [
    "PROPERTIES",
    "arch_specs",
    "call_estimator",
    "check_memory_estimator",
    "dataset_shapes",
    "hardware_profiles",
    "run_specs",
    "runtimes",
    "total_bytes",
]
