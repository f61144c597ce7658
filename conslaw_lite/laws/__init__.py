"""Closed-form conservation laws, one registry for every supported block.

Importing this package registers every block family (their laws and their
``certify``/``drift`` architectures).
"""

from conslaw_lite.laws import (  # noqa: F401  (each family registers itself on import)
    attention,
    ffn,
    moe,
    network,
    toy,
)
from conslaw_lite.laws.registry import (
    Batch,
    BlockLaws,
    Law,
    Params,
    controls_of,
    evaluate,
    find_blocks,
    law_functions,
    laws_of,
    parameters_of,
    register_laws,
    supported_types,
)

__all__ = [
    "Batch",
    "BlockLaws",
    "Law",
    "Params",
    "controls_of",
    "evaluate",
    "find_blocks",
    "law_functions",
    "laws_of",
    "parameters_of",
    "register_laws",
    "supported_types",
]
