"""kgreason: a Hydra-driven framework for studying LLM reasoning over knowledge graphs.

Importing the package imports nothing heavy; see ``kgreason/run.py`` for the wiring.
"""

__version__ = "0.1.0"
