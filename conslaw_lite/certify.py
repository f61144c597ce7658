"""``python -m conslaw_lite certify``: count a block's laws and check the known list against the count.

For a registered architecture (``toy``, ``ffn-gelu``, ``mha-rope``, ...) the
count ``N = D − dim Lie(W)(θ)`` comes from :func:`conslaw_lite.counting.count_laws`;
``known_laws`` is the number of functionally independent closed-form laws
``conslaw_lite`` knows for the block (:func:`conslaw_lite.counting.check_laws`
on :func:`conslaw_lite.laws.law_functions`), and ``formula`` what the theory
predicts. ``complete`` means the known laws hold to round-off and are as many as
the count. ``--module FILE.py:FACTORY --input-shape 3,4`` counts the laws of a
module of one's own (``FACTORY()`` returns it); nothing is known about its laws.
``--laws`` also finds them (:func:`conslaw_lite.find_laws.find_laws`): every law of
degree ≤ 2, printed with tensor names and indices, and compared with the count.

Exit codes: 0 a conclusive count (and, with ``--laws``, conclusive laws), 1 inconclusive
(no clear singular-value gap, or the random θ disagree: no number is printed as the count;
or the laws found are no certificate: :attr:`conslaw_lite.find_laws.FoundLaws.conclusive`),
2 bad input, 3 an internal error, 4 the ``--module`` file itself failed (one line ``FILE:LINE: ...``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from torch import nn

from conslaw_lite.archs import ArchOptions, get_arch
from conslaw_lite.counting import LawCount, check_laws, count_laws
from conslaw_lite.counting.problem import outputs_note
from conslaw_lite.find_laws import FoundLaws, find_laws
from conslaw_lite.laws import law_functions
from conslaw_lite.seeding import seeded
from conslaw_lite.time_limit import OutOfTime, said_if_long
from conslaw_lite.user_module import INPUTS, load_module

SAY_AFTER = 5.0  # seconds of search after which certify says it is still searching


@dataclass
class Certificate:
    """What ``certify`` prints: the count ``N = D − dim Lie(W)(θ)``, its evidence, and the known laws against it.

    ``num_laws`` and ``rank_lie`` are ``None`` when the count is inconclusive; ``formula`` is ``None`` for a module
    of one's own, and ``known_laws``, ``max_residual``, ``complete`` too where it holds no registered block. ``found``
    is :meth:`conslaw_lite.find_laws.FoundLaws.to_dict` of the laws found, when they were asked for.
    ``conclusive`` is the count's; ``found["conclusive"]`` the laws' (each passes ``check_laws``,
    no more than N, ``found["reason"]`` otherwise): the CLI exits with 0 only when both hold.
    """

    arch: str
    num_params: int
    rank_lie: int | None
    num_laws: int | None
    conclusive: bool
    reason: str
    depth: int
    sigma_kept: float
    sigma_dropped: float
    evidence: str
    known_laws: int | None
    max_residual: float | None
    complete: bool | None
    formula: int | None
    formula_text: str
    note: str
    seconds: float
    found: dict | None

    @classmethod
    def of(cls, arch: str, count: LawCount, found: dict | None, **known) -> Certificate:
        """The certificate of ``count`` (with ``known_laws, max_residual, ...`` when something is known)."""
        unknown = dict(known_laws=None, max_residual=None, complete=None, formula=None, formula_text="", note="")
        return cls(arch=arch, **{name: getattr(count, name) for name in _FROM_COUNT}, **(unknown | known), found=found)

    def to_dict(self) -> dict:
        """Plain types, for ``--json`` (``found`` only when the laws were asked for)."""
        out = asdict(self)
        if self.found is None:
            del out["found"]
        return out


# Certificate's fields that are LawCount's own.
_FROM_COUNT = (
    "num_params", "rank_lie", "num_laws", "conclusive", "reason", "depth", "sigma_kept", "sigma_dropped", "evidence",
    "seconds",
)  # fmt: skip


def certify(arch: str, options: ArchOptions, *, laws: bool = False) -> Certificate:
    """Count the laws of architecture ``arch`` and compare with the known laws and the formula.

    With ``laws``, also find them (:attr:`Certificate.found`).

    Examples
    ========
    >>> r = certify("toy", ArchOptions(dim=3))  # a·b·c·x keeps a² − b² and a² − c²
    >>> r.num_laws, r.known_laws, r.formula, r.complete
    (2, 2, 2, True)
    """
    built = get_arch(arch).build(options)
    count = count_laws(built.model, built.input_shape, seed=options.seed)
    check = check_laws(built.model, law_functions(built.model), built.input_shape, seed=options.seed, count=count)
    found = _found(built.model, built.input_shape, options.seed, count) if laws else None
    known = dict(known_laws=check.independent, max_residual=check.max_residual, complete=check.complete)
    return Certificate.of(
        arch, count, found, **known, formula=built.formula, formula_text=built.formula_text, note=built.note
    )


def _found(model: nn.Module, input_shape: tuple[int, ...] | None, seed: int, count: LawCount, inputs=None) -> dict:
    """The laws found, as a dict; none where a time limit around the certificate ends before their search begins (the
    count stands). A search still running after ``SAY_AFTER`` seconds says so on stderr, with the count it stands on:
    an attention's takes minutes, the count seconds."""
    counted = f"N = {count.num_laws}" if count.conclusive else "the count is inconclusive"
    waiting = f"certify: {counted} ({count.seconds:.1f} s); still searching the laws (--laws; --seconds limits it)"
    try:
        with said_if_long(waiting, SAY_AFTER):
            return find_laws(model, input_shape, inputs=inputs, seed=seed, count=count).to_dict()
    except OutOfTime as stop:
        return FoundLaws.not_searched(count, str(stop)).to_dict()


def certify_module(
    spec: str,
    input_shape: tuple[int, ...] | None,
    seed: int = 0,
    *,
    laws: bool = False,
    vocab: int | None = None,
    device: str | None = None,
    progress: bool | None = None,
    at_own: bool = False,
) -> Certificate:
    r"""Count ``N = D − dim Lie(W)(θ)`` for ``FACTORY()`` from ``FILE.py:FACTORY`` (``at_own``: near the θ it is built
    with, ``at=`` of :func:`~conslaw_lite.counting.count_laws`, where random θ cannot stand for it; the closed-form
    laws below and ``laws`` are of random θ, so they are not checked against that count, and not found with it).

    No formula is known for a module of one's own (``formula`` is ``None``), but the blocks registered inside it (an
    attention of transformers, ``nn.MultiheadAttention``, timm's, the book's) have their closed-form laws: those are
    checked against the count (``known_laws``, ``max_residual``, ``complete``; ``None`` where it holds no such
    block). ``laws`` finds the laws (``found``).
    Its inputs (:meth:`conslaw_lite.user_module.UserModule.inputs`): standard-normal of ``input_shape``,
    token ids ``0..vocab−1`` with ``vocab``, or the file's ``inputs(n)``. What the file raises is a
    :class:`~conslaw_lite.user_module.UserCodeError` naming its line. ``device`` and ``progress`` are
    :func:`~conslaw_lite.counting.count_laws`'s. The file is run with torch's generator seeded by ``seed``: a model
    built without a seed of its own gets the same weights (which set the scale of the random θ) at each run.

    Examples
    ========
    The toy ``a·b·c·x`` written in one's own file: D = 3 parameters, rank 1, so
    N = 3 − 1 = 2 laws (``a² − b²`` and ``a² − c²``).

    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp(), "mine.py")
    >>> _ = path.write_text(
    ...     "from conslaw_lite.families.toy.block import ToyProduct\n\n"
    ...     "def build():\n    return ToyProduct(a=1.0, b=2.0, c=0.5)\n"
    ... )
    >>> r = certify_module(f"{path}:build", (1,), laws=True)
    >>> r.num_params, r.rank_lie, r.num_laws, r.found["laws"]
    (3, 1, 2, ['a² − c²', 'b² − c²'])
    >>> r.known_laws, r.complete  # ToyProduct is the book's block: its closed form, checked against the count
    (2, True)
    """
    if at_own and laws:
        raise ValueError(
            "--laws finds the laws of random θ and --at-own counts near the θ the file builds (where a dead unit adds "
            "laws of its own): ask for one of them"
        )
    with seeded(seed):  # a file that builds its model without a seed of its own: the same weights at each run
        user = load_module(spec)
    inputs = user.inputs(input_shape, vocab, seed)
    if inputs is None and input_shape is None:
        needs = f"--module needs --input-shape, e.g. --input-shape 3,4 (or a function {INPUTS}(n) in its file)"
        raise ValueError(needs)
    shape = input_shape if inputs is None else None
    try:
        at = dict(user.model.named_parameters()) if at_own else None
        count = count_laws(user.model, shape, inputs=inputs, seed=seed, device=device, progress=progress, at=at)
        # before the search: a time limit stops the search; check_laws takes its laws at random θ, not near the file's
        known = {} if at_own else _known(user.model, shape, inputs, seed, count)
        found = _found(user.model, shape, seed, count, inputs) if laws else None
    except ValueError as err:  # bad input, named with the line of the user's file it surfaced at
        raise ValueError(user.located(err, tokens=vocab is not None)) from err
    note = "; ".join(n for n in (_frozen(user.model), outputs_note(count.outputs)) if n)
    return Certificate.of(spec, count, found, note=note, **known)


def _known(model: nn.Module, input_shape: tuple[int, ...] | None, inputs, seed: int, count: LawCount) -> dict:
    """``known_laws``, ``max_residual`` and ``complete`` of the closed-form laws of the blocks registered inside
    ``model``, against ``count``; nothing where it holds none."""
    try:
        known = law_functions(model)
    except ValueError:  # no registered block
        return {}
    if not known:
        return {}
    check = check_laws(model, known, input_shape, inputs=inputs, seed=seed, count=count)
    return dict(known_laws=check.independent, max_residual=check.max_residual, complete=check.complete)


def _frozen(model: nn.Module) -> str:
    """What a module's frozen parameters are to the count: constants, not coordinates of θ (training never moves them).

    Examples
    ========
    >>> net = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    >>> _ = net[0].weight.requires_grad_(False)
    >>> _frozen(net)
    '12 frozen entries (requires_grad=False: 0.weight) are constants here, not in D'
    """
    frozen = [(name, p.numel()) for name, p in model.named_parameters() if not p.requires_grad]
    if not frozen:
        return ""
    names = ", ".join(name for name, _ in frozen[:4]) + (", ..." if len(frozen) > 4 else "")
    return f"{sum(n for _, n in frozen)} frozen entries (requires_grad=False: {names}) are constants here, not in D"


def table(result: Certificate) -> str:
    """The result of :func:`certify` or :func:`certify_module` as aligned ``key  value`` lines.

    Examples
    ========
    >>> print(table(certify("toy", ArchOptions())))  # a·b·x: D = 2, rank 1, N = 2 − 1 = 1
    architecture       toy
    parameters D       2
    rank of Lie(W)     1
    laws N = D − rank  1
    bracket depth      2
    σ kept / dropped   ... / ...
    formula            1  (D − 1 = 2 − 1 = 1)
    known laws         1
    max residual       ...
    complete           True
    seconds            ...
    """
    rows = [
        ("architecture", result.arch),
        ("parameters D", result.num_params),
        ("rank of Lie(W)", result.rank_lie),
        ("laws N = D − rank", result.num_laws if result.conclusive else f"inconclusive ({result.reason})"),
        ("bracket depth", result.depth),
        ("σ kept / dropped", f"{result.sigma_kept:.2e} / {result.sigma_dropped:.2e}  ({result.evidence})"),
    ]
    if result.formula is not None:
        rows.append(("formula", f"{result.formula}  ({result.formula_text})"))
    if result.known_laws is not None:
        rows += [
            ("known laws", result.known_laws),
            ("max residual", f"{result.max_residual:.1e}"),
            ("complete", result.complete),
        ]
    if result.note:
        rows.append(("note", result.note))
    rows.append(("seconds", f"{result.seconds:.2f}"))
    if result.found is not None:
        rows.append(("laws found", result.found["message"]))
        rows += [("", law) for law in result.found["laws"]]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)




