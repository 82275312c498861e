"""The ``geoslo`` command line: JSON in, JSON out, one clear line for bad input (exit 2)."""

from geoslo.cli._app import app, main

__all__ = ["app", "main"]
