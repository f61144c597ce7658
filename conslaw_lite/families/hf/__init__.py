"""transformers' models (Qwen3, Llama, Qwen3-MoE, Mistral, Qwen2, GPT-2, BERT): their blocks' laws, countable
copies, training callbacks.

``laws`` registers the finders by class name (``import conslaw_lite`` never imports transformers);
``attention``, ``moe``, ``network``, ``gpt2`` and ``bert`` hold the laws, ``exact`` the float64 copies the counter
evaluates (:func:`~.exact.countable`), ``archs`` the named architectures built from small configs,
``callbacks`` the ``transformers`` ``TrainerCallback`` and ``lightning`` the PyTorch Lightning ``Callback``
that log ε_block per block kind. Everything that needs transformers imports it when called.
"""

from conslaw_lite.families import Family
from conslaw_lite.families.hf import laws  # noqa: F401  (registers the finders)
from conslaw_lite.families.hf.archs import ARCHITECTURES
from conslaw_lite.families.hf.exact import countable, is_from_transformers
from conslaw_lite.laws import register_countable

SUMMARY = "transformers' Qwen3, Llama, Qwen3-MoE, Mistral, Qwen2, GPT-2 and BERT: GQA, RoPE, QK-norm, SwiGLU, MoE"
FAMILY = Family("hf", SUMMARY, 8, ARCHITECTURES)
register_countable(is_from_transformers, countable)  # count_laws(hf_module) evaluates its float64 form

__all__ = ["FAMILY", "countable"]
