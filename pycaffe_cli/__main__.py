"""``python -m pycaffe_cli``: the same as the ``pycaffe`` command."""
import sys

from pycaffe_cli.cli import main

sys.exit(main())
