"""``python -m geoslo`` runs the command line."""

from geoslo.cli import main

main()
