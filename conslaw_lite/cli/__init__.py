"""The command line: ``python -m conslaw_lite {certify,drift,experiment} ...``.

Each subcommand lives in its own module of this package, which provides ``add_arguments(parser)``
and ``run(args) -> int``. Exit codes: 0 a conclusive result, 1 an inconclusive one, 2 bad input
(one line on stderr), 3 an internal error (a bug: the traceback on stderr), 4 an error raised by the
user's ``--module`` file (syntax, import, factory: one line ``FILE:LINE: ...`` on stderr), 130 interrupted
(Ctrl-C).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import traceback
import warnings
from importlib.metadata import version
from typing import NoReturn, TextIO

from conslaw_lite.flows import Diverged
from conslaw_lite.user_module import UserCodeError

USER_CODE = 4  # the exit code of an error raised by the user's --module file
INTERRUPTED = 130  # Ctrl-C, as a shell reports a process that SIGINT ended

EXIT_CODES = (
    "exit codes: 0 success (a conclusive count), 1 inconclusive, 2 bad input, 3 internal error, "
    f"{USER_CODE} the --module file raised, {INTERRUPTED} interrupted"
)
SUBCOMMANDS = {
    "certify": ("conslaw_lite.cli.certify", "count the conservation laws of a block and check the known list"),
    "drift": ("conslaw_lite.cli.drift", "measure how far the laws drift under discrete training"),
    "experiment": ("conslaw_lite.cli.experiment", "run the paper's experiments (language model, ViT)"),
}


def json_text(value: object) -> str:
    """``value`` as strict JSON (what ``jq`` and every parser read): a NaN or infinite number is ``null``.

    Examples
    ========
    >>> print(json_text({"slope": float("nan")}))
    {
      "slope": null
    }
    """

    def finite(v: object) -> object:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: finite(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [finite(x) for x in v]
        return v

    return json.dumps(finite(value), indent=2)


def one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """Show a warning as ``warning: message``, one line on stderr, as the CLI's other warnings are.

    Python's own form starts with the line that warned and echoes its source: on the command line that is a line
    of the package or ``<frozen runpy>``, which says nothing to the user (the message names the layer).

    Examples
    ========
    >>> one_line_warning(UserWarning("rows 5..9 get no gradient"), UserWarning, "<frozen runpy>", 88, sys.stdout)
    warning: rows 5..9 get no gradient
    """
    print(f"warning: {message}", file=sys.stderr if file is None else file)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the subcommand, and return its exit code.

    0 success, 1 an inconclusive result, 2 bad input (one ``error: ...`` line on stderr),
    3 an internal error (traceback on stderr): never 1, which scripts read as "inconclusive";
    4 the user's ``--module`` file raised (one ``error: FILE:LINE: ...`` line on stderr); 130 interrupted (Ctrl-C).

    Examples
    ========
    ``f = a·b·x`` has ``N = D − rank = 2 − 1 = 1`` law:

    >>> main(["certify", "toy"])
    architecture       toy
    parameters D       2
    rank of Lie(W)     1
    laws N = D − rank  1
    ...
    0
    >>> main(["certify", "no-such-block"])  # stderr: error: unknown architecture 'no-such-block'; valid: ...
    2

    ``--version`` prints the package's version and exits, as ``--help`` does:

    >>> try:
    ...     main(["--version"])
    ... except SystemExit as done:
    ...     print("exit", done.code)
    conslaw_lite ...
    exit 0
    """
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser_class("--json" in argv)(prog="python -m conslaw_lite", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"conslaw_lite {version('conslaw_lite')}")
    sub = parser.add_subparsers(dest="command", required=True)
    chosen = next((a for a in argv if not a.startswith("-")), None)  # the subcommand, when one is named
    module = None
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        subparser = sub.add_parser(name, help=help_text, description=help_text, epilog=EXIT_CODES)
        if name == chosen:  # import only the subcommand that runs: certify never loads the experiment stack
            module = importlib.import_module(module_name)
            module.add_arguments(subparser)
    args = parser.parse_args(argv)  # --help and --version exit with 0, a usage error with 2
    try:
        with warnings.catch_warnings():  # restores the caller's showwarning (main runs in-process in tests too)
            warnings.showwarning = one_line_warning
            return module.run(args)
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's code for it, not a traceback and not 1
        return _failed(args, "interrupted", INTERRUPTED)
    except BrokenPipeError:  # the reader closed the pipe (``| head``): nothing more to print, and no error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # Python's flush at exit would fail again
        return 0
    except UserCodeError as err:  # the user's file failed: its line, not our traceback, and not "inconclusive"
        return _failed(args, str(err), USER_CODE)
    except (ValueError, TypeError, FileNotFoundError, Diverged) as err:  # bad input; anything else is a bug: traceback
        return _failed(args, str(err), 2)
    except Exception as err:  # a bug: Python's own exit status would be 1, the code of an inconclusive result
        traceback.print_exc()
        return _failed(args, f"internal error: {type(err).__name__}: {err}", 3, said=True)


def _parser_class(json_wanted: bool) -> type[argparse.ArgumentParser]:
    """argparse's parser, whose usage errors (``--seed abc``, ``--lr`` missing) also print ``{"error": ..., "exit_code":
    2}`` on stdout with ``--json``, as every other failure does; the subcommands' parsers are of the same class."""

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            if json_wanted:
                print(json_text({"error": f"{self.prog}: {message}", "exit_code": 2}))
            super().error(message)

    return Parser


def _failed(args: argparse.Namespace, message: str, code: int, said: bool = False) -> int:
    """One line ``error: ...`` on stderr (unless ``said``: the traceback says it) and, with ``--json``, the same on
    stdout as ``{"error": ..., "exit_code": ...}``: a script that reads stdout gets JSON whatever happened."""
    if not said:
        print(f"error: {message}", file=sys.stderr)
    if getattr(args, "json", False):
        print(json_text({"error": message, "exit_code": code}))
    return code
