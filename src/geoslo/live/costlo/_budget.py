"""The hedge budget the live client and VM libraries enforce: :class:`BudgetWindow`, the
same pure class the simulator enforces. It is defined in the control layer
(``geoslo.control.costlo._budget``) because the layers import downwards only and the
simulator sits below ``geoslo.live`` (docs/architecture.md)."""

from geoslo.control.costlo._budget import DEFAULT_BUCKETS, BudgetWindow

__all__ = ["BudgetWindow", "DEFAULT_BUCKETS"]
