"""SGR (shared/papers/sgr.txt §3) as a package whose modules are the paper's components:

* :mod:`~kgreason.reasoners.sgr.subgraph`: §3.1 structured subgraph generation (Eq. 1–6);
* :mod:`~kgreason.reasoners.sgr.stepwise`: §3.2–3.3 stepwise reasoning and its integration (Eq. 7–14);
* :mod:`~kgreason.reasoners.sgr.direct`: §3.4 Cypher, answer validation and Refine (Eq. 15–22);
* :mod:`~kgreason.reasoners.sgr.collaborative`: §3.5 collaborative reasoning (Eq. 23–31);
* :mod:`~kgreason.reasoners.sgr.reasoner`: :class:`SGR`, §3's pipeline and the final answer's rule;
* :mod:`~kgreason.reasoners.sgr.common`: the model call, ``P_θ`` and the vote they share.

docs/sgr.md maps every equation to its place.
"""

from kgreason.reasoners.sgr.common import PathVote, vote
from kgreason.reasoners.sgr.direct import DirectResult, parse_choice
from kgreason.reasoners.sgr.reasoner import SGR
from kgreason.reasoners.sgr.stepwise import parse_step
from kgreason.reasoners.sgr.subgraph import QuestionGraph, parse_structure, relation_key

__all__ = ["SGR", "DirectResult", "PathVote", "QuestionGraph", "parse_choice", "parse_step", "parse_structure",
           "relation_key", "vote"]
