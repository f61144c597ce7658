"""``certify``: registered architectures against their formulas, a module of one's own, and the CLI's exit codes."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import conslaw_lite.cli as cli
import conslaw_lite.law_search as law_search
from conslaw_lite.archs import SIZE_OPTIONS, ArchOptions, Built, get_arch, list_archs, size_flag
from conslaw_lite.certify import certify
from conslaw_lite.time_limit import OutOfTime

KEYS = {"arch", "num_params", "rank_lie", "num_laws", "known_laws", "max_residual", "complete", "seconds", "formula"}

FACTORIES = """
import torch
from torch import nn


def relu_net():  # A·relu(Bx), d = 4, r = 5, m = 2, on inputs of shape (2, 2)
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(4, 5, bias=False), nn.ReLU(), nn.Linear(5, 2, bias=False))


class Argmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.W = nn.Linear(4, 3)

    def forward(self, x):
        return self.W(x.flatten(1)).argmax(-1)


def argmax():
    return Argmax()


class Weak(nn.Module):  # f = a x1 + (a + 1e-7 b) x2 + (a + 1e-10 c) x3: no clear gap
    def __init__(self):
        super().__init__()
        self.theta = nn.Parameter(torch.ones(3, dtype=torch.float64))

    def forward(self, x):
        a, b, c = self.theta
        return (x * torch.stack([a, a + 1e-7 * b, a + 1e-10 * c])).sum(-1, keepdim=True)


def weak():
    return Weak()


class SelfAttention(nn.Module):  # nn.MultiheadAttention inside a module of one's own, d = 4, 2 heads of k = 2
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(4, 2, bias=False, batch_first=True)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


def attention():
    torch.manual_seed(0)
    return SelfAttention()


class LogitsAndHidden(nn.Module):  # a ReLU MLP returning a dict: the laws of both tensors
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 3), nn.Linear(3, 2)

    def forward(self, x):
        h = torch.relu(self.a(x.flatten(1)))
        return {"logits": self.b(h), "hidden": h}


not_a_module = 3
built = relu_net()  # a module the file builds itself


def broken():
    raise RuntimeError("no weights file")
"""


@pytest.fixture
def factories(tmp_path: Path) -> Path:
    path = tmp_path / "mine.py"
    path.write_text(FACTORIES)
    return path


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    """``python -m conslaw_lite certify ...`` in-process: (exit code, stdout, stderr)."""
    monkeypatch.setattr(cli, "SUBCOMMANDS", {"certify": cli.SUBCOMMANDS["certify"]})  # this file tests certify only

    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main(["certify", *argv])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.mark.parametrize("dim, expected", [(2, 1), (3, 2)])
def test_toy(dim: int, expected: int) -> None:
    result = certify("toy", ArchOptions(dim=dim))
    assert KEYS <= result.to_dict().keys()
    assert result.num_laws == result.known_laws == result.formula == expected
    assert result.num_params == dim and result.rank_lie == 1
    assert result.complete and result.max_residual < 1e-12


@pytest.mark.parametrize("arch", ["ffn-linear", "ffn-relu", "swiglu", "mha-rope"])
def test_more_architectures_match_their_formula(arch: str) -> None:
    # test_families.py certifies each family's first architecture; these are the book's other landmarks
    result = certify(arch, ArchOptions(heads=1))
    assert result.conclusive, result.reason
    assert result.num_laws == result.formula, result.formula_text
    assert result.known_laws == result.num_laws and result.complete


def test_cli_json(run_cli) -> None:
    code, out, _ = run_cli("toy", "--dim", "3", "--json")
    result = json.loads(out)
    assert code == 0 and KEYS <= result.keys()
    assert (result["num_laws"], result["known_laws"], result["complete"]) == (2, 2, True)


def test_cli_table(run_cli) -> None:
    code, out, _ = run_cli("ffn-linear", "--dim", "3", "--hidden", "2", "--out", "3")
    assert code == 0
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines())
    assert rows["laws N = D − rank"] == "3" and rows["complete"] == "True"


def test_cli_own_module(run_cli, factories: Path) -> None:
    code, out, _ = run_cli("--module", f"{factories}:relu_net", "--input-shape", "2,2", "--json")
    result = json.loads(out)
    assert code == 0
    assert (result["num_params"], result["num_laws"]) == (30, 5)  # r = 5 laws for a ReLU net
    assert result["known_laws"] is None and result["formula"] is None


def test_cli_own_module_checks_the_laws_of_the_blocks_it_holds(run_cli, factories: Path) -> None:
    """An nn.MultiheadAttention inside one's own module: its closed-form laws (2 heads · 2·3 = 12) against the count."""
    code, out, _ = run_cli("--module", f"{factories}:attention", "--input-shape", "3,4")
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines())
    assert code == 0 and rows["laws N = D − rank"] == "12" and rows["known laws"] == "12" and rows["complete"] == "True"
    assert "formula" not in rows


def test_cli_says_that_the_laws_of_several_outputs_keep_every_one(run_cli, factories: Path) -> None:
    code, out, _ = run_cli("--module", f"{factories}:LogitsAndHidden", "--input-shape", "2,2")
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines())
    assert code == 0 and rows["laws N = D − rank"] == "0", out
    note = rows["note"]
    assert "returns 2 tensors (`logits`, `hidden`)" in note and "count a module that returns only" in note


def test_cli_stops_at_its_seconds_as_inconclusive(run_cli, factories: Path) -> None:
    """--seconds: a count past it prints no count and exits 1; one within it is as without the limit."""
    code, out, err = run_cli("--module", f"{factories}:relu_net", "--input-shape", "2,2", "--seconds", "0")
    assert code == 1 and out == ""
    said = r"inconclusive: stopped at \d+ s: its next step would pass --seconds 0; no count reported\n"
    assert re.fullmatch(said, err)
    code, out, _ = run_cli("--module", f"{factories}:relu_net", "--input-shape", "2,2", "--seconds", "0", "--json")
    report = json.loads(out)
    assert code == 1 and report.pop("reason").endswith("its next step would pass --seconds 0")
    assert report == {"arch": f"{factories}:relu_net", "conclusive": False}
    code, out, _ = run_cli("--module", f"{factories}:relu_net", "--input-shape", "2,2", "--seconds", "600", "--json")
    assert code == 0 and json.loads(out)["num_laws"] == 5
    code, _, err = run_cli("toy", "--seconds", "-1")
    assert code == 2 and "seconds must be a number ≥ 0" in err


def test_cli_prints_the_laws_of_a_search_stopped_at_its_seconds_and_exits_1(run_cli, factories: Path, monkeypatch):
    """The count done, the search's clock runs out before its first block: the count and what was found (nothing)
    are printed, and the exit code says the list of laws is not whole."""

    def out_of_time(need: float = 0.0) -> None:
        raise OutOfTime("stopped at its time limit of 600 s (seconds=600)")

    monkeypatch.setattr(law_search, "check_time", out_of_time)
    argv = ("--module", f"{factories}:relu_net", "--input-shape", "2,2", "--laws", "--seconds", "600", "--json")
    code, out, err = run_cli(*argv)
    result = json.loads(out)
    assert code == 1 and result["num_laws"] == 5 and result["found"]["laws"] == []
    assert result["found"]["stopped"] == "stopped at its time limit of 600 s (seconds=600)"
    assert err.endswith(
        "inconclusive list of laws: found 0 of N = 5: the search stopped at its time limit of 600 s "
        "(seconds=600) before it found the other 5 (--seconds)\n"
    )


def test_cli_takes_a_module_file_in_place_of_an_architecture(run_cli, factories: Path) -> None:
    """``certify mine.py:build``, the form a user first types, is ``--module mine.py:build``."""
    code, out, _ = run_cli(f"{factories}:relu_net", "--input-shape", "2,2", "--json")
    assert code == 0 and json.loads(out)["num_laws"] == 5
    code, _, err = run_cli(f"{factories}:relu_net", "--module", f"{factories}:relu_net", "--input-shape", "2,2")
    assert code == 2 and "not both" in err


def test_cli_takes_a_module_the_file_builds(run_cli, factories: Path) -> None:
    code, out, _ = run_cli("--module", f"{factories}:built", "--input-shape", "2,2", "--json")
    assert code == 0 and json.loads(out)["num_laws"] == 5


def test_cli_takes_the_model_of_a_file_given_alone(run_cli, tmp_path: Path) -> None:
    """``--module FILE.py`` without a name: the file's ``model``, or the one module it builds; else what to write."""
    one = tmp_path / "one.py"
    one.write_text("from torch import nn\n\nnet = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 2))\n")
    code, out, _ = run_cli("--module", str(one), "--input-shape", "2", "--json")
    assert code == 0 and json.loads(out)["num_laws"] == 3
    two = tmp_path / "two.py"
    two.write_text("from torch import nn\n\na = nn.Linear(2, 3)\nb = nn.Linear(3, 2)\n")
    code, _, err = run_cli("--module", str(two), "--input-shape", "2")
    assert code == 2 and "builds a, b: name the model" in err


def test_cli_says_frozen_parameters_are_left_out_of_d(run_cli, tmp_path: Path) -> None:
    """A layer frozen for fine-tuning is a constant to training: D was 14 of 26 entries, and nothing said why."""
    path = tmp_path / "frozen.py"
    path.write_text(
        "from torch import nn\n\nmodel = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))\n"
        "model[0].weight.requires_grad_(False)\n"
    )
    code, out, _ = run_cli("--module", str(path), "--input-shape", "3", "--json")
    result = json.loads(out)
    assert code == 0 and result["num_params"] == 4 + 8 + 2
    assert result["note"] == "12 frozen entries (requires_grad=False: 0.weight) are constants here, not in D"


def test_cli_is_reproducible_from_its_seed_when_the_file_draws_its_weights(run_cli, tmp_path: Path) -> None:
    """A factory without a seed of its own drew new weights at each run, and they set the scale of the random θ: the
    same command gave other singular values, and near a thin gap another verdict."""
    path = tmp_path / "unseeded.py"
    path.write_text(
        "from torch import nn\n\ndef build():\n"
        "    return nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2), nn.Tanh(), nn.Linear(2, 2))\n"
    )
    runs = [json.loads(run_cli("--module", f"{path}:build", "--input-shape", "3", "--json")[1]) for _ in range(2)]
    assert runs[0]["sigma_kept"] == runs[1]["sigma_kept"] and runs[0]["num_laws"] == runs[1]["num_laws"]


def test_cli_counts_near_the_files_own_theta_with_at_own(run_cli, tmp_path: Path) -> None:
    """x ↦ W₂|W₁|x: a random θ puts W₁'s entries on both pieces of |·|, so only a count near a θ is one; near the
    file's θ, |W₁| is W₁ with signs flipped and the linear net's r(r+1)/2 = 6 laws hold."""
    path = tmp_path / "absolute.py"
    path.write_text(
        "import torch\nfrom torch import nn\n\nclass Abs(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.W1, self.W2 = nn.Parameter(torch.randn(3, 4)), nn.Parameter(torch.randn(2, 3))\n\n"
        "    def forward(self, x):\n        return x @ self.W1.abs().T @ self.W2.T\n\nmodel = Abs()\n"
    )
    code, _, err = run_cli("--module", str(path), "--input-shape", "4", "--json")
    assert code == 1 and "certify --at-own" in err
    code, out, _ = run_cli("--module", str(path), "--input-shape", "4", "--json", "--at-own")
    assert code == 0 and json.loads(out)["num_laws"] == 6
    code, _, err = run_cli("toy", "--at-own")
    assert code == 2 and "--at-own are for --module" in err
    # the laws of random θ beside a count near the file's: a dead unit's 6 coordinates were "not quadratic" laws
    code, out, err = run_cli("--module", str(path), "--input-shape", "4", "--json", "--at-own", "--laws")
    assert code == 2 and "ask for one of them" in json.loads(out)["error"]


def test_a_cast_that_reads_theta_itself_points_to_its_own_theta(run_cli, tmp_path: Path) -> None:
    """torch's Householder orthogonal map multiplies by ``diagonal().int()``: zero at random θ of entries below 1,
    not at the θ it builds. The message said there was no gradient flow to count."""
    path = tmp_path / "householder.py"
    path.write_text(
        "from torch import nn\nfrom torch.nn.utils.parametrizations import orthogonal\n\n"
        "model = nn.Sequential(orthogonal(nn.Linear(4, 3, bias=False), orthogonal_map='householder'), nn.ReLU(), "
        "nn.Linear(3, 2, bias=False))\n"
    )
    code, _, err = run_cli("--module", str(path), "--input-shape", "4")
    assert code == 2 and "casts a value computed from θ to int32" in err and "--at-own" in err


def test_cli_inconclusive_exits_1_without_a_count(run_cli, factories: Path) -> None:
    code, out, err = run_cli("--module", f"{factories}:weak", "--input-shape", "3", "--json")
    assert code == 1 and "inconclusive" in err
    assert json.loads(out)["num_laws"] is None


@pytest.mark.parametrize(
    "argv, words",
    [
        (("nope",), "unknown architecture 'nope'"),
        (("--module", "{dir}/missing.py:relu_net", "--input-shape", "4"), "file not found"),
        (("--module", "{dir}/mine.py:nothing", "--input-shape", "4"), "no function or nn.Module 'nothing'"),
        (("--module", "{dir}/mine.py:not_a_module", "--input-shape", "4"), "no function or nn.Module 'not_a_module'"),
        (("--module", "{dir}/mine.py:argmax", "--input-shape", "2,2"), "dtype torch.int64"),
        (("--module", "{dir}/mine.py:relu_net", "--input-shape", "3,3"), "fails on inputs of shape (3, 3)"),
        (("--module", "{dir}/mine.py:relu_net", "--input-shape", "2,x"), "--input-shape"),
        (("--module", "{dir}/mine.py:relu_net"), "needs --input-shape"),
        (("toy", "--module", "{dir}/mine.py:relu_net", "--input-shape", "4"), "not both"),
        (("toy", "--dim", "0"), "--dim must be a positive integer"),
        (("--module", "{dir}/mine.py:relu_net", "--input-dtype", "long", "--input-shape", "4"), "needs --vocab"),
        (("--module", "{dir}/mine.py:relu_net", "--vocab", "4", "--input-shape", "4"), "--input-dtype long"),
        (("toy", "--vocab", "4"), "are for --module"),
        ((), "give an architecture name"),
        (("--module", "{dir}/mine.py:relu_net", "--input-shape", "3", "3"), "fails on inputs of shape (3, 3)"),
        (("--module", "{dir}/mine.py:relu_net", "--input-shape", "4", "x"), "positive integers, got '4,x'"),
        (
            ("swiglu", "--heads", "7", "--seq", "9"),
            "error: swiglu takes no --heads, --seq (its size options: --dim, --hidden, --out)\n",
        ),
        (("toy", "--dim", "3", "--depth", "2"), "toy takes no --depth (its size options: --dim)"),
        (("--module", "{dir}/mine.py:relu_net", "--input-shape", "4", "--hidden", "3"), "leave out --hidden"),
    ],
)
def test_cli_bad_input_exits_2_with_one_line(run_cli, factories: Path, argv: tuple[str, ...], words: str) -> None:
    code, out, err = run_cli(*(a.format(dir=factories.parent) for a in argv))
    assert code == 2 and out == ""
    assert words in err and err.count("\n") == 1


def test_cli_internal_error_exits_3_never_1(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """1 means "inconclusive" to a script; a bug (here: the counter raising) must not read as one."""
    import conslaw_lite.certify as certify_module

    def bug(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(certify_module, "count_laws", bug)
    code, out, err = run_cli("toy")
    assert code == 3 and out == "" and "ZeroDivisionError: a bug" in err


def test_version_flag_prints_the_package_version(capsys: pytest.CaptureFixture) -> None:
    import conslaw_lite

    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"conslaw_lite {conslaw_lite.__version__}"


def test_a_checkout_that_is_not_installed_reads_its_version_from_pyproject(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from a source tree on PYTHONPATH (no package metadata), the import still works and says the version."""
    from importlib.metadata import PackageNotFoundError

    import conslaw_lite

    def not_installed(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr(conslaw_lite, "version", not_installed)
    pyproject = (Path(conslaw_lite.__file__).parents[1] / "pyproject.toml").read_text()
    assert f'version = "{conslaw_lite._version()}"' in pyproject


# ---------------------------------------------------------------- the user's own file: token ids, its errors

EMBEDDING = """
import torch
from torch import nn


def make():  # two token ids per input, embedded in 3 dimensions, then a ReLU net 6 → 4 → 2
    torch.manual_seed(0)
    return nn.Sequential(nn.Embedding(10, 3), nn.Flatten(), nn.Linear(6, 4), nn.ReLU(), nn.Linear(4, 2)).double()
"""

# E ↦ E G with every position's columns of the first Linear ↦ G⁻¹: the 3·4/2 = 6 laws EᵀE − Σ_t W_tᵀW_t; and the
# ReLU's 4 hidden units: N = 6 + 4 = 10 (the embedding rows of ids never drawn would add 3 spurious laws each)
EMBEDDING_LAWS = 10


def test_cli_counts_an_embedding_model_on_token_ids(run_cli, tmp_path: Path) -> None:
    (tmp_path / "emb.py").write_text(EMBEDDING)
    spec = f"{tmp_path}/emb.py:make"
    code, out, _ = run_cli("--module", spec, "--input-dtype", "long", "--vocab", "10", "--input-shape", "2", "--json")
    assert code == 0 and json.loads(out)["num_laws"] == EMBEDDING_LAWS


def test_cli_takes_the_inputs_function_of_the_module_file(run_cli, tmp_path: Path) -> None:
    """``inputs(n)`` in the file: here every id at every position, shuffled, as token_inputs draws them."""
    inputs = "\n\ndef inputs(n):\n    from conslaw_lite.user_inputs import token_inputs\n"
    inputs += "    return token_inputs((2,), 10, n)\n"
    (tmp_path / "emb.py").write_text(EMBEDDING + inputs)
    code, out, _ = run_cli("--module", f"{tmp_path}/emb.py:make", "--json")
    assert code == 0 and json.loads(out)["num_laws"] == EMBEDDING_LAWS


UNREAD = "\n\ndef inputs(n):\n    return torch.arange(2 * n).reshape(n, 2) % 5\n"  # ids 0..4 of the 10 rows
UNREAD_LINE = (
    "warning: `0` (Embedding) reads rows 0..4 of 10 on the given inputs: rows 5..9 get no gradient, and each of "
    "their 15 entries counts as a law\n"
)


def test_cli_names_unread_embedding_rows_in_one_line(run_cli, tmp_path: Path) -> None:
    """Not Python's ``FILE:LINE: UnreadRows: ...`` and the source line: on the command line that location is ours."""
    (tmp_path / "emb.py").write_text(EMBEDDING + UNREAD)
    code, out, err = run_cli("--module", f"{tmp_path}/emb.py:make", "--json")
    assert code == 0 and json.loads(out)["num_laws"] == EMBEDDING_LAWS + 5 * 3
    assert UNREAD_LINE in err.splitlines(keepends=True) and "UnreadRows" not in err


@pytest.mark.slow
def test_python_dash_m_names_unread_embedding_rows_without_runpy(tmp_path: Path) -> None:
    (tmp_path / "emb.py").write_text(EMBEDDING + UNREAD)
    argv = [sys.executable, "-m", "conslaw_lite", "certify", "--module", f"{tmp_path}/emb.py:make"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and UNREAD_LINE in done.stderr.splitlines(keepends=True)
    assert "runpy" not in done.stderr


@pytest.mark.parametrize(
    "source, factory, where, words",
    [
        ("import torch\n\ndef make(:\n    pass\n", "make", 3, "SyntaxError: invalid syntax"),
        ("import torch\nimport no_such_package\n", "make", 2, "ModuleNotFoundError: No module named 'no_such_package'"),
        ("def make():\n    x = 1\n    raise RuntimeError('no weights')\n", "make", 3,
         "RuntimeError: no weights (in make())"),
        (EMBEDDING + "\ndef inputs(n):\n    return 1 / 0\n", "make", 11,
         "ZeroDivisionError: division by zero (in inputs(1))"),
        ("import sys\n\ndef make():\n    sys.exit(7)\n", "make", 4,
         "SystemExit: the file called sys.exit(7) (in make())"),
    ],
)  # fmt: skip
def test_cli_errors_of_the_users_file_exit_4_naming_file_and_line(
    run_cli, tmp_path: Path, source: str, factory: str, where: int, words: str
) -> None:
    """Not 1 ("inconclusive"), not 2 (a wrong argument), not 3 (our bug): one line FILE:LINE: Error: message."""
    (tmp_path / "user.py").write_text(source)
    shape = () if "def inputs" in source else ("--input-shape", "2")  # a file's inputs(n) and a shape: bad input
    code, out, err = run_cli("--module", f"{tmp_path}/user.py:{factory}", *shape)
    assert code == cli.USER_CODE == 4 and out == ""
    assert err == f"error: {tmp_path}/user.py:{where}: {words}\n"


def test_cli_input_options_and_a_files_inputs_are_not_both_taken(run_cli, tmp_path: Path) -> None:
    """The file's inputs(n) won over --input-shape unsaid, and --input-dtype long --vocab won over inputs(n)."""
    (tmp_path / "user.py").write_text(EMBEDDING + "\ndef inputs(n):\n    return torch.randint(0, 5, (n, 3))\n")
    for options in (("--input-shape", "9"), ("--input-dtype", "long", "--vocab", "4", "--input-shape", "3")):
        code, out, err = run_cli("--module", f"{tmp_path}/user.py:make", *options)
        assert code == 2 and out == "" and "defines inputs(n), which gives the model's inputs" in err


def test_cli_names_what_a_spec_gets_wrong(run_cli, tmp_path: Path) -> None:
    """A factory that needs arguments, a second name after the file, a file without .py, token ids for a model
    without an embedding, a vocab of 0,
    and a file of classes but no model: each said as such (they read "file not found", "an arch knows its inputs",
    "a cast inside forward", a warning on ids 0..-1, and no class named)."""
    (tmp_path / "net.py").write_text("from torch import nn\n\nclass Net(nn.Sequential):\n    pass\n")
    (tmp_path / "mlp.py").write_text("from torch import nn\n\nmodel = nn.Sequential(nn.Linear(2, 3), nn.ReLU())\n")
    (tmp_path / "noext").write_text("")
    (tmp_path / "wide.py").write_text("from torch import nn\n\ndef make(width):\n    return nn.Linear(2, width)\n")
    cases = [
        (("--module", f"{tmp_path}/wide.py:make", "--input-shape", "2"),
         f"{tmp_path}/wide.py:3: make needs arguments, and it is called with none"),
        (("--module", f"{tmp_path}/mlp.py:model:extra", "--input-shape", "2"), "one name after"),
        ((f"{tmp_path}/noext", "--input-shape", "2"), "is a file, not an architecture"),
        (("--module", f"{tmp_path}/mlp.py", "--input-dtype", "long", "--vocab", "4", "--input-shape", "2"),
         "has no nn.Embedding to read them"),
        (("--module", f"{tmp_path}/mlp.py", "--input-dtype", "long", "--vocab", "0", "--input-shape", "2"),
         "--vocab must be a positive integer, got 0"),
        (("--module", f"{tmp_path}/net.py", "--input-shape", "2"), "(it defines Net)"),
    ]  # fmt: skip
    for options, words in cases:
        code, out, err = run_cli(*options)
        assert code == 2 and words in err and len(err.splitlines()) == 1, (options, err)


def test_cli_lists_the_named_architectures(run_cli) -> None:
    from conslaw_lite.archs import list_archs

    code, out, _ = run_cli("--list")
    assert code == 0 and [line.split()[0] for line in out.splitlines()] == list_archs()
    assert next(line for line in out.splitlines() if line.startswith("swiglu ")).endswith("[--dim --hidden --out]")
    code, out, _ = run_cli("--list", "--json")
    listed = json.loads(out)
    assert code == 0 and listed["mha"]["options"] == ["--dim", "--heads", "--head-dim", "--seq"]
    assert listed["mha"]["summary"] == get_arch("mha").summary


def test_cli_takes_the_size_options_an_architecture_declares(run_cli) -> None:
    """The refusal of an undeclared size leaves the declared ones alone (here all of mla's)."""
    sizes = ("--dim", "4", "--heads", "1", "--head-dim", "1", "--hidden", "2", "--seq", "3")
    code, out, _ = run_cli("mla", *sizes, "--json")
    assert code == 0 and json.loads(out)["num_laws"] == json.loads(out)["formula"]


def _shape(built: Built) -> tuple:
    """What a size can change in an architecture: its parameters' shapes, its input's, its formula and note."""
    params = {name: tuple(p.shape) for name, p in built.model.named_parameters()}
    return built.input_shape, params, built.formula_text, built.note


def _output(built: Built) -> tuple[list[torch.Tensor], torch.Tensor]:
    """θ and f(x) at fixed inputs: what a size that leaves every shape alone (--top-k) changes."""
    x = torch.randn(4, *built.input_shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with torch.no_grad():
        return [p.detach().clone() for p in built.model.parameters()], built.model(x)


def _reads(built: Built, base: Built) -> bool:
    """Whether ``built`` differs from ``base`` by what a size changes: a shape, or f at the same θ."""
    if _shape(built) != _shape(base):
        return True
    (theta, y), (theta0, y0) = _output(built), _output(base)
    return all(torch.equal(a, b) for a, b in zip(theta, theta0)) and not torch.allclose(y, y0)


@pytest.mark.parametrize("name", list_archs())
def test_each_architecture_declares_exactly_the_sizes_its_build_reads(name: str) -> None:
    """The CLI refuses the sizes an architecture does not declare (``Arch.sizes``), so the declaration must be what
    the build reads: an undeclared size changes neither a shape nor f at the same θ (or the build refuses it, naming
    it); a declared one changes one of them for some value. (transformers' blocks are cut from a whole model: a size
    of another part may shift the random θ, never the block.)"""
    arch = get_arch(name)
    try:
        base = arch.build(ArchOptions())
    except ModuleNotFoundError as err:  # a family of an optional extra (hf: transformers) says what to install
        pytest.skip(str(err))
    for size in SIZE_OPTIONS:
        if size in arch.sizes:
            changed = []
            for value in range(1, 9):
                try:
                    changed.append(_reads(arch.build(ArchOptions(**{size: value})), base))
                except Exception:  # noqa: BLE001 - a value the block refuses, building or running (top-k > experts)
                    continue
            assert any(changed), f"{name} declares {size_flag(size)} but no value of it changes the block"
        else:
            for value in (3, 6):
                try:
                    built = arch.build(ArchOptions(**{size: value}))
                except ValueError as err:
                    assert size_flag(size) in str(err), f"{name} refuses {size_flag(size)}={value} without naming it"
                    continue
                assert not _reads(built, base), f"{name} reads {size_flag(size)}: declare it in its Arch"


@pytest.mark.slow
def test_python_dash_m_version_runs() -> None:
    import conslaw_lite

    argv = [sys.executable, "-m", "conslaw_lite", "--version"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == f"conslaw_lite {conslaw_lite.__version__}"


def test_cli_token_models_check_the_vocabulary_against_the_embedding(run_cli, tmp_path: Path) -> None:
    """More ids than rows is bad input; fewer is counted with a warning (each row never read adds laws); float
    inputs to an embedding get the flags that give it ids."""
    (tmp_path / "emb.py").write_text(EMBEDDING)
    code, out, err = run_cli("--module", f"{tmp_path}/emb.py:make", "--input-dtype", "long", "--vocab", "11",
                             "--input-shape", "2")  # fmt: skip
    assert code == 2 and out == "" and "has 10 rows (ids 0..9)" in err
    code, out, err = run_cli("--module", f"{tmp_path}/emb.py:make", "--input-dtype", "long", "--vocab", "8",
                             "--input-shape", "2", "--json")  # fmt: skip
    assert code == 0 and "warning: --vocab 8 draws ids 0..7 only" in err
    assert json.loads(out)["num_laws"] > EMBEDDING_LAWS  # the two rows never read are free
    code, _, err = run_cli("--module", f"{tmp_path}/emb.py:make", "--input-shape", "2")
    assert code == 2 and err.endswith("a model of token ids takes --input-dtype long --vocab V\n")


def test_cli_module_file_imports_its_neighbours_and_forward_errors_name_their_line(run_cli, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "helper.py").write_text(
        "from torch import nn\n\ndef build():\n    return nn.Sequential(nn.Linear(4, 3, bias=False), nn.ReLU(), "
        "nn.Linear(3, 2, bias=False))\n"
    )
    (tmp_path / "sub" / "user.py").write_text("from helper import build\n\ndef make():\n    return build()\n")
    code, out, _ = run_cli("--module", f"{tmp_path}/sub/user.py:make", "--input-shape", "4", "--json")
    assert code == 0 and json.loads(out)["num_laws"] == 3
    broken = "from torch import nn\n\nclass M(nn.Linear):\n    def forward(self, x):\n        raise ValueError('no')\n"
    (tmp_path / "fwd.py").write_text(broken + "\ndef make():\n    return M(2, 2)\n")
    code, _, err = run_cli("--module", f"{tmp_path}/fwd.py:make", "--input-shape", "2")
    expected = f"error: {tmp_path}/fwd.py:5: the model fails on inputs of shape (2,) (ValueError: no)\n"
    assert code == 2 and err == expected
    for error in ("AssertionError", "KeyError", "AttributeError"):  # a typo in forward: not a traceback of ours
        (tmp_path / "fwd.py").write_text(broken.replace("ValueError", error) + "\ndef make():\n    return M(2, 2)\n")
        code, _, err = run_cli("--module", f"{tmp_path}/fwd.py:make", "--input-shape", "2")
        assert code == 2 and err.startswith(f"error: {tmp_path}/fwd.py:5: the model fails on inputs of shape (2,) ")
        assert f"({error}" in err and len(err.splitlines()) == 1


@pytest.mark.slow
def test_cli_stops_quietly_when_its_reader_closes_the_pipe() -> None:
    """``certify --list | head -1``: the first line, exit 0, no BrokenPipeError."""
    done = subprocess.run(
        f"{sys.executable} -m conslaw_lite certify --list | head -1; exit ${{PIPESTATUS[0]}}",
        shell=True, executable="/bin/bash", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and done.stderr == "" and len(done.stdout.splitlines()) == 1


def test_cli_ctrl_c_exits_130_with_one_line(run_cli, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a traceback, and not 1, which a script reads as "inconclusive"; with --json, JSON on stdout too (it was
    empty)."""
    import conslaw_lite.certify as certify_module

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(certify_module, "count_laws", interrupted)
    assert run_cli("toy") == (130, "", "error: interrupted\n")
    code, out, _ = run_cli("toy", "--json")
    assert code == 130 and json.loads(out) == {"error": "interrupted", "exit_code": 130}


def test_cli_json_stays_json_when_the_module_file_prints(run_cli, tmp_path: Path) -> None:
    (tmp_path / "noisy.py").write_text(
        "from torch import nn\nprint('loading')\n\ndef make():\n    print('building')\n"
        "    return nn.Sequential(nn.Linear(3, 4, bias=False), nn.ReLU(), nn.Linear(4, 2, bias=False))\n"
    )
    code, out, err = run_cli("--module", f"{tmp_path}/noisy.py:make", "--input-shape", "3", "--json")
    assert code == 0 and json.loads(out)["num_laws"] == 4 and "building" in err


def test_cli_module_file_with_a_dataclass_config_and_string_annotations(run_cli, tmp_path: Path) -> None:
    """``from __future__ import annotations`` + ``@dataclass``: dataclasses looks the file up in sys.modules (it was
    refused as an error of the file), and a class needing arguments is named at its line."""
    (tmp_path / "config.py").write_text(
        "from __future__ import annotations\nfrom dataclasses import dataclass\nfrom torch import nn\n\n"
        "@dataclass\nclass Config:\n    hidden: int = 4\n\n"
        "class Net(nn.Sequential):\n    def __init__(self, config: Config):\n"
        "        super().__init__(nn.Linear(3, config.hidden, bias=False), nn.ReLU(), "
        "nn.Linear(config.hidden, 2, bias=False))\n\n"
        "def make():\n    return Net(Config())\n"
    )
    code, out, _ = run_cli("--module", f"{tmp_path}/config.py:make", "--input-shape", "3", "--json")
    assert code == 0 and json.loads(out)["num_laws"] == 4
    code, _, err = run_cli("--module", f"{tmp_path}/config.py:Net", "--input-shape", "3")
    assert code == 2 and err.startswith(f"error: {tmp_path}/config.py:9: Net needs arguments")


def test_a_module_file_in_a_folder_with_a_colon_or_of_another_kind_is_named_as_a_file(run_cli, tmp_path: Path) -> None:
    """The CLI split ``runs/a:b/mlp.py:make`` at its first colon ("unknown architecture", every name listed)."""
    folder = tmp_path / "a:b"
    folder.mkdir()
    (folder / "mlp.py").write_text("from torch import nn\n\nmodel = nn.Sequential(nn.Linear(3, 4), nn.ReLU())\n")
    (tmp_path / "mlp.txt").write_text("model = None\n")
    for spec in (f"{folder}/mlp.py:model", f"{folder}/mlp.py"):
        code, out, _ = run_cli(spec, "--input-shape", "3", "--json")
        assert code == 0 and json.loads(out)["num_laws"] == 0
    code, _, err = run_cli(f"{tmp_path}/mlp.txt:model", "--input-shape", "3")
    assert code == 2 and err.startswith(f"error: {tmp_path}/mlp.txt:model is a file, not an architecture: ")
    code, _, err = run_cli(str(tmp_path), "--input-shape", "3")
    assert code == 2 and "is a folder, not an architecture" in err


def test_a_dotted_path_and_an_inputs_function_of_several_tensors_are_named(run_cli, tmp_path: Path) -> None:
    """``--module mlp:make`` and ``torch.nn:Linear`` were "module file not found" alone; ``inputs(n)`` returning a tuple
    of tensors was told to return "a tensor of ≥ n inputs"."""
    (tmp_path / "mlp.py").write_text("from torch import nn\n\ndef make():\n    return nn.Linear(3, 2)\n")
    code, _, err = run_cli("--module", f"{tmp_path}/mlp:make", "--input-shape", "3")
    assert code == 2 and f"give its file name, {tmp_path}/mlp.py" in err
    code, _, err = run_cli("--module", "torch.nn:Linear", "--input-shape", "3")
    assert code == 2 and "a module is given by its file, FILE.py:FACTORY" in err
    pair = "\n\ndef inputs(n):\n    import torch\n    return torch.randn(n, 3), torch.randn(n, 3)\n"
    (tmp_path / "two.py").write_text((tmp_path / "mlp.py").read_text() + pair)
    code, _, err = run_cli("--module", f"{tmp_path}/two.py:make")
    assert code == 2 and "inputs(1) returned a tuple of tensors: a model takes one tensor here; wrap" in err


def test_cli_json_errors_are_json_on_stdout(run_cli, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    """A script reading stdout got nothing from an error with --json; it gets the error and the exit code."""
    (tmp_path / "user.py").write_text("def make(:\n")
    code, out, err = run_cli("--module", f"{tmp_path}/user.py:make", "--input-shape", "2", "--json")
    assert code == 4 and json.loads(out) == {"error": err.removeprefix("error: ").rstrip("\n"), "exit_code": 4}
    code, out, _ = run_cli("toy", "--dim", "3", "--depth", "2", "--json")
    assert code == 2 and json.loads(out) == {"error": "toy takes no --depth (its size options: --dim)", "exit_code": 2}
    with pytest.raises(SystemExit) as usage:  # argparse's own errors printed its usage alone, no JSON
        run_cli("toy", "--seed", "abc", "--json")
    out, err = capsys.readouterr()
    assert usage.value.code == 2 and "usage:" in err
    assert json.loads(out) == {"error": "python -m conslaw_lite certify: argument --seed: invalid int value: 'abc'",
                               "exit_code": 2}  # fmt: skip
