"""kgreason: a Hydra-driven framework for studying LLM reasoning over knowledge graphs.

Importing the package imports nothing heavy (OmegaConf, to register the ``${kgreason.path:...}``
resolver that ``conf/paths/default.yaml`` uses); see ``kgreason/runner/run.py`` for the wiring.
"""

from kgreason.paths import register_resolvers as _register_resolvers

__version__ = "0.1.0"

_register_resolvers()
