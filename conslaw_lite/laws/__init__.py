"""Closed-form conservation laws, one registry for every supported block.

Importing this package registers every block family's laws. It is pure: it
imports the blocks, never the named architectures (:mod:`conslaw_lite.archs`),
the models or the experiments built on top of it.
"""

from conslaw_lite.laws import (  # noqa: F401  (each family registers itself on import)
    attention,
    ffn,
    moe,
    network,
    toy,
    vit,
)
from conslaw_lite.laws.registry import (
    KINDS,
    Batch,
    BlockLaws,
    Group,
    Kind,
    Law,
    Params,
    Quantity,
    ascii_key,
    controls_of,
    evaluate,
    find_blocks,
    groups,
    law_functions,
    laws_of,
    parameters_of,
    quantities,
    register_laws,
    supported_types,
)

__all__ = [
    "KINDS",
    "Batch",
    "BlockLaws",
    "Group",
    "Kind",
    "Law",
    "Params",
    "Quantity",
    "ascii_key",
    "controls_of",
    "evaluate",
    "find_blocks",
    "groups",
    "law_functions",
    "laws_of",
    "parameters_of",
    "quantities",
    "register_laws",
    "supported_types",
]
