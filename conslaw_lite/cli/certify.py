"""``python -m conslaw_lite certify``: the options and the exit code of :func:`conslaw_lite.certify.certify`.

Exit codes: 0 a conclusive count (and, with ``--laws``, conclusive laws), 1 inconclusive
(no clear singular-value gap, or the random θ disagree: no number is printed as the count;
or the laws found are no certificate: :attr:`conslaw_lite.find_laws.FoundLaws.conclusive`; or the count or the
search ran past ``--seconds``: a search stopped there prints the laws it found, and the count),
2 bad input (a size option the architecture does not take, e.g. ``swiglu --heads 2``, or any with
``--module``, among them), 3 an internal error, 4 the ``--module`` file raised (syntax, import, factory,
``inputs(n)``), 130 interrupted. ``--list`` prints the named architectures and the size options of each.
A model of token ids: ``--input-dtype long --vocab V``, or a function ``inputs(n)`` in the module file that
returns its n inputs. A count of a ``--module`` over a few seconds shows its progress on stderr when stderr is a
terminal (rank so far, bracket depth; not in a log file or a pipe); with ``--json``, what the file prints goes to
stderr too.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

from conslaw_lite.archs import (
    add_size_arguments,
    check_sizes,
    get_arch,
    given_sizes,
    list_archs,
    size_flag,
    size_options,
)
from conslaw_lite.certify import Certificate, certify, certify_module, table
from conslaw_lite.cli import json_text
from conslaw_lite.config import device as default_device
from conslaw_lite.time_limit import OutOfTime, time_limit
from conslaw_lite.user_module import names_a_file


def parse_shape(text: str) -> tuple[int, ...]:
    """``"3,4"`` → ``(3, 4)``: one input's shape, without the batch dimension.

    Examples
    ========
    >>> parse_shape("3,4")
    (3, 4)
    """
    try:
        shape = tuple(int(n) for n in text.split(","))
    except ValueError:
        raise ValueError(f"--input-shape must be positive integers, got {text!r}") from None
    if any(n < 1 for n in shape):
        raise ValueError(f"--input-shape must be positive integers, got {text!r}")
    return shape


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``certify`` subcommand's options: ``ARCH`` or ``--module FILE.py:FACTORY --input-shape``, sizes, seed.

    Examples
    ========
    >>> parser = argparse.ArgumentParser()
    >>> add_arguments(parser)
    >>> args = parser.parse_args(["toy", "--seed", "1"])
    >>> args.arch, args.module, args.seed, args.json, args.laws
    ('toy', None, 1, False, False)
    """
    parser.add_argument(
        "arch", nargs="?", help="a registered architecture (toy, ffn-gelu, swiglu, mha-rope, ...), or FILE.py[:FACTORY]"
    )
    own = "certify FACTORY() from FILE.py instead (or FACTORY itself, a module the file builds; FILE.py: its model)"
    parser.add_argument("--module", metavar="FILE.py:FACTORY", help=own)
    add_input_arguments(parser, "with --module")
    parser.add_argument("--device", help="with --module: count on this device (cuda: in float64 on the GPU)")
    parser.add_argument("--list", action="store_true", help="print the named architectures and their size options")
    add_size_arguments(parser)
    parser.add_argument(
        "--at-own", action="store_true",
        help="with --module: count near the θ the file builds (a cast or clamp that reads θ itself), not at random θ",
    )  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--seconds", type=float, metavar="S",
        help="stop the count (and the search) after S seconds: inconclusive; the laws a stopped search found are "
        "checked after it",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--laws", action="store_true", help="also find the laws themselves (degree ≤ 2) and print them")


class _Sizes(argparse.Action):
    """``--input-shape 1,28,28`` or ``--input-shape 1 28 28``: the sizes joined by commas, for :func:`parse_shape`."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        setattr(namespace, self.dest, ",".join(v.strip(",") for v in values))


def add_input_arguments(parser: argparse.ArgumentParser, scope: str) -> None:
    """``--input-shape``, ``--input-dtype`` and ``--vocab``: the inputs of a module of one's own (``scope``: when).

    Examples
    ========
    >>> parser = argparse.ArgumentParser()
    >>> add_input_arguments(parser, "with FILE.py")
    >>> args = parser.parse_args(["--input-shape", "5", "--input-dtype", "long", "--vocab", "7"])
    >>> args.input_shape, args.input_dtype, args.vocab
    ('5', 'long', 7)
    >>> parser.parse_args(["--input-shape", "1", "28", "28"]).input_shape  # as a user types a shape too
    '1,28,28'
    """
    parser.add_argument(
        "--input-shape", metavar="3,4", nargs="+", action=_Sizes,
        help=f"{scope}: one input's shape (no batch dimension), its sizes between commas or spaces",
    )  # fmt: skip
    parser.add_argument(
        "--input-dtype", choices=("float64", "long"), default="float64",
        help=f"{scope}: float64 inputs (standard normal) or long (token ids 0..V-1, with --vocab V)",
    )  # fmt: skip
    parser.add_argument("--vocab", type=int, metavar="V", help="with --input-dtype long: the number of token ids")


def run(args: argparse.Namespace) -> int:
    """Certify what ``args`` names, print the table (or JSON), and return the exit code.

    0 when the count ``N = D − dim Lie(W)(θ)`` is conclusive (and so are the laws found, with
    ``--laws``), 1 when either is not; bad input raises ``ValueError`` (the CLI turns it into exit code 2),
    a size option the architecture does not read too, since it would change nothing.

    Examples
    ========
    >>> parser = argparse.ArgumentParser()
    >>> add_arguments(parser)
    >>> run(parser.parse_args(["toy", "--dim", "3", "--json"]))  # a·b·c·x: N = 3 − 1 = 2
    {
      "arch": "toy",
      "num_params": 3,
      "rank_lie": 1,
      "num_laws": 2,
    ...
      "complete": true,
    ...
    0
    >>> run(parser.parse_args([]))
    Traceback (most recent call last):
    ...
    ValueError: give an architecture name (certify --list names them) or --module FILE.py:FACTORY
    >>> run(parser.parse_args(["swiglu", "--heads", "7", "--seq", "9"]))
    Traceback (most recent call last):
    ...
    ValueError: swiglu takes no --heads, --seq (its size options: --dim, --hidden, --out)
    """
    if args.list:
        return _print_archs(args.json)
    if args.module is None and args.arch is not None and names_a_file(args.arch):
        args.module, args.arch = args.arch, None  # `certify mine.py:build`, as a user first types it
    if args.arch is not None and args.module is not None:
        raise ValueError("give either an architecture name or --module FILE.py:FACTORY, not both")
    if args.arch is None and args.module is None:
        raise ValueError("give an architecture name (certify --list names them) or --module FILE.py:FACTORY")
    started = time.perf_counter()
    try:
        with time_limit(args.seconds):
            result = _certified(args)
    except OutOfTime:
        took = time.perf_counter() - started
        reason = f"stopped at {took:.0f} s: its next step would pass --seconds {args.seconds:g}"
        if args.json:  # a script reading stdout gets JSON whatever came of the count
            print(json_text({"arch": args.arch or args.module, "conclusive": False, "reason": reason}))
        print(f"inconclusive: {reason}; no count reported", file=sys.stderr)
        return 1
    print(json_text(result.to_dict()) if args.json else table(result))
    if not result.conclusive:
        print(f"inconclusive: {result.reason}; no count reported", file=sys.stderr)
        return 1
    if result.found is not None and not result.found["conclusive"]:
        print(f"the laws found are inconclusive: {result.found['reason']}", file=sys.stderr)
        return 1
    if result.found is not None and result.found["stopped"]:  # the count holds; the list of laws may not be whole
        print(f"inconclusive list of laws: {result.found['message']} (--seconds)", file=sys.stderr)
        return 1
    return 0


def _certified(args: argparse.Namespace) -> Certificate:
    """The certificate of the architecture or the ``--module`` that ``args`` names (bad input: ``ValueError``)."""
    options = size_options(args, seed=args.seed)
    if args.module is not None:
        given = [size_flag(size) for size in given_sizes(options)]
        if given:
            raise ValueError(f"--module FILE.py:FACTORY builds its model at its sizes: leave out {', '.join(given)}")
        shape = None if args.input_shape is None else parse_shape(args.input_shape)
        device = None if args.device is None else str(default_device(args.device))
        with contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext():  # the file's prints
            result = certify_module(
                args.module, shape, seed=args.seed, laws=args.laws, vocab=vocab_option(args), device=device,
                progress=None, at_own=args.at_own,
            )  # fmt: skip
    else:
        path = Path(args.arch.rpartition(":")[0] or args.arch)
        if args.arch not in list_archs() and (path.is_file() or Path(args.arch).exists()):
            kind = "folder" if Path(args.arch).is_dir() else "file"
            raise ValueError(f"{args.arch} is a {kind}, not an architecture: a module file is FILE.py[:NAME]")
        get_arch(args.arch)  # an unknown name: said before the options it would not take
        if args.input_shape is not None or args.vocab is not None or args.input_dtype != "float64":
            raise ValueError("--input-shape, --input-dtype and --vocab are for --module; an arch knows its inputs")
        if args.device is not None or args.at_own:
            raise ValueError("--device and --at-own are for --module; a named architecture is counted on the cpu")
        check_sizes(args.arch, options)
        result = certify(args.arch, options, laws=args.laws)
    return result


def vocab_option(args: argparse.Namespace) -> int | None:
    """``--vocab`` for ``--input-dtype long`` (each needs the other), ``None`` for float inputs."""
    if args.input_dtype == "long" and args.vocab is None:
        raise ValueError("--input-dtype long needs --vocab V, the number of token ids (0..V-1)")
    if args.input_dtype != "long" and args.vocab is not None:
        raise ValueError("--vocab is for token ids: add --input-dtype long")
    return args.vocab


def _print_archs(as_json: bool = False) -> int:
    """``certify --list``: each named architecture, its one-line summary and its size options (``--json``: as one
    JSON object, ``{name: {"summary": ..., "options": ["--dim", ...]}}``).

    Examples
    ========
    >>> import contextlib, io, json
    >>> with contextlib.redirect_stdout(io.StringIO()) as out:
    ...     code = _print_archs()
    >>> lines = out.getvalue().splitlines()
    >>> code, len(lines) == len(list_archs()), lines[-1].split()[0]  # one line each, in alphabetical order
    (0, True, 'toy')
    >>> with contextlib.redirect_stdout(io.StringIO()) as out:
    ...     code = _print_archs(as_json=True)
    >>> listed = json.loads(out.getvalue())
    >>> sorted(listed) == list_archs(), listed["toy"]["options"]
    (True, ['--dim'])
    """
    archs = [get_arch(name) for name in list_archs()]
    if as_json:
        print(json_text({arch.name: {"summary": arch.summary, "options": arch.flags} for arch in archs}))
        return 0
    width = max(len(arch.name) for arch in archs)
    for arch in archs:
        print(f"{arch.name:<{width}}  {arch.summary}  [{' '.join(arch.flags)}]")
    return 0
