"""Packages that export names lazily (``dataforge.lazy``): every exported name resolves to
its module's object, unknown names raise AttributeError, and building the CLI parser
loads none of the heavy modules behind them."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = ("dataforge.lm", "dataforge.tokenization")


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_resolves_to_its_module_object(name: str) -> None:
    package = importlib.import_module(name)
    assert sorted(package.__all__) == sorted(package._HOMES)
    for export in package.__all__:
        home = importlib.import_module(package._HOMES[export])
        assert getattr(package, export) is getattr(home, export)
        assert export in vars(package)  # kept: the next lookup does not import again
    with pytest.raises(AttributeError, match=f"module '{name}' has no attribute 'missing'"):
        package.missing  # noqa: B018


def test_building_the_cli_parser_loads_no_tokenizer_or_scorer_module() -> None:
    program = (
        "import sys\n"
        "from dataforge.cli import build_parser\n"
        "build_parser()\n"
        "heavy = ('dataforge.tokenization.tokenizer', 'dataforge.tokenization.train',\n"
        "         'dataforge.lm.score', 'dataforge.lm.train', 'sentencepiece', 'jieba')\n"
        "print([m for m in heavy if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "command, loaded",
    [
        ("run", []),
        ("inspect", []),
        ("lm", ["dataforge.lm.cli"]),
        ("train", ["trainer.cli"]),
        ("classifier", ["dataforge.classifier.cli"]),
        ("ablate", ["trainer.ablate.cli"]),
        (
            None,
            [
                "dataforge.tokenization.cli",
                "dataforge.lm.cli",
                "dataforge.classifier.cli",
                "trainer.cli",
                "trainer.ablate.cli",
            ],
        ),
        (
            "bogus",
            [
                "dataforge.tokenization.cli",
                "dataforge.lm.cli",
                "dataforge.classifier.cli",
                "trainer.cli",
                "trainer.ablate.cli",
            ],
        ),
    ],
)
def test_the_parser_imports_only_the_subcommand_module_a_command_line_names(command, loaded):
    """``dataforge run`` imports no other command's module (``dataforge.lm.cli`` took 0.32
    s); help and an unknown command list every command."""
    program = (
        "import sys\n"
        "from dataforge.cli import build_parser\n"
        f"parser = build_parser({command!r})\n"
        "modules = ('dataforge.tokenization.cli', 'dataforge.lm.cli', 'dataforge.classifier.cli',\n"
        "           'trainer.cli', 'trainer.ablate.cli')\n"
        "print([m for m in modules if m in sys.modules])\n"
        "print(sorted(parser._subparsers._group_actions[0].choices))\n"
    )
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    imported, choices = out.stdout.strip().splitlines()
    assert imported == repr(loaded)
    names = {"dataforge.tokenization.cli": "tokenizer", "dataforge.lm.cli": "lm",
             "dataforge.classifier.cli": "classifier", "trainer.cli": "train",
             "trainer.ablate.cli": "ablate"}  # fmt: skip
    assert choices == repr(
        sorted(["run", "report", "validate", "inspect", *map(names.get, loaded)])
    )


def test_pyarrow_answers_its_pandas_probe_without_pandas_and_converts_when_asked(
    tmp_path: Path,
) -> None:
    """After ``skip_pandas_probe`` pyarrow's implicit checks import no pandas (arrays,
    tables, Parquet, compute), an explicit conversion still imports it and works, and
    from then on pandas objects are recognised as such (a categorical stays one)."""
    program = (
        "import sys\n"
        "from dataforge.lazy import skip_pandas_probe\n"
        "skip_pandas_probe()\n"
        "import numpy as np, pyarrow as pa, pyarrow.compute as pc, pyarrow.parquet as pq\n"
        "t = pa.table({'a': pa.array([2, 1]), 'b': pa.array(np.arange(2))})\n"
        "pq.write_table(t, sys.argv[1]); t = pq.read_table(sys.argv[1])\n"
        "pc.sort_indices(t, sort_keys=[('a', 'ascending')])\n"
        "print('pandas' in sys.modules)\n"
        "df = t.to_pandas()\n"
        "print(type(df).__name__, df['a'].tolist())\n"
        "import pandas as pd\n"
        "print(pa.array(pd.Categorical(['x', 'y', 'x'])).type)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path / "t.parquet")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out[:2] == ["False", "DataFrame [2, 1]"]
    assert out[2].startswith("dictionary<values=") and "indices=int8" in out[2]  # categorical
