"""The forward-only inference plan: ``plan.py`` runs a TEST net with folded layers
(``fold.py``), shared blob memory (``memory.py``) and cheaper passes; ``accuracy.py`` measures
how far its outputs lie from the plain net's, against the bounds docs/inference.md states."""
