"""Plain-Python reference of the simulator kernels.

It executes the very source of `_kernels.py` without numba (the module is loaded
a second time with ``_PURE_PYTHON = True``), so tests can check that the compiled
kernels give exactly the same numbers as the interpreted algorithm on identical
inputs. Slow: use it on short runs only.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

__all__ = ["reference_kernels"]

_NAME = "geoslo.sim._kernels_pure_python"


def reference_kernels():
    """The module of uncompiled kernels (same names as `_kernels`)."""
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    path = Path(__file__).with_name("_kernels.py")
    spec = importlib.util.spec_from_file_location(_NAME, path)
    module = importlib.util.module_from_spec(spec)
    module.__dict__["_PURE_PYTHON"] = True
    spec.loader.exec_module(module)
    sys.modules[_NAME] = module
    return module
