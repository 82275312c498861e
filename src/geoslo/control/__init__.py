"""The five controllers, one subpackage each, all on one contract (``_contract``).

Every ``geoslo.control.<system>`` holds ``types`` (its ``Config``, observation and plan),
``validation`` (the JSON contract), ``decide`` (the pure decision), ``loop`` (the state kept
between intervals) and ``example``.
"""

from geoslo.control._contract import (
    APPLICABLE_STATUSES,
    STATUSES,
    Controller,
    Environment,
    Outcome,
)

__all__ = ["APPLICABLE_STATUSES", "STATUSES", "Controller", "Environment", "Outcome"]
