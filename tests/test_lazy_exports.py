"""Packages that export names lazily (``dataforge.lazy``): every exported name resolves to
its module's object, unknown names raise AttributeError, and building the CLI parser
loads none of the heavy modules behind them."""

from __future__ import annotations

import importlib
import subprocess
import sys

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
