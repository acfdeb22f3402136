"""``dataforge`` command line: parses arguments and calls library functions.

Exit codes: 0 ok, 1 run failed, 2 bad usage or bad config, 130 interrupted (Ctrl-C), 143
terminated (SIGTERM); the last two print one line and leave nothing looking complete.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from dataforge.lazy import skip_pandas_probe
from dataforge.text.terminal import printable, printable_json

if TYPE_CHECKING:
    from dataforge.runtime.executors import ExecutorChoice

__all__ = ["main"]

# Subcommands contributed by other packages; a module that is absent is skipped.
_EXTENSIONS = {"tokenizer": "dataforge.tokenization.cli", "lm": "dataforge.lm.cli",
               "classifier": "dataforge.classifier.cli",
               "train": "trainer.cli", "ablate": "trainer.ablate.cli"}  # fmt: skip
"""Subcommands other packages add (name -> module with ``add_subcommand``). Only the one a
command line names is imported (``dataforge.lm.cli`` alone took 0.32 s to import, paid by
every ``dataforge run``); all of them for help and unknown commands."""


def _say(*lines: str) -> None:
    """Each of ``lines`` as one line on stderr, control characters escaped (a newline
    too): a message may quote a file name, a key or a value from a stranger's data
    (:mod:`dataforge.text.terminal`)."""
    for line in lines:
        print(printable(line), file=sys.stderr, flush=True)


def _checked_config(args: argparse.Namespace):
    """Load the pipeline and run every validation check; print the problems and return
    None if there are any."""
    from dataforge.config import ConfigError, load_pipeline
    from dataforge.runtime.validate import validate_pipeline

    try:
        config = load_pipeline(args.pipeline, args.set)
        problems = validate_pipeline(config, _output_location(args, config))
    except ConfigError as exc:
        problems = [str(exc)]
    for p in problems:
        _say(f"error: {p}")
    return None if problems else config


def _cmd_run(args: argparse.Namespace) -> int:
    from dataforge.io.fs import StorageError
    from dataforge.rundir.lease import LeaseHeldError
    from dataforge.runtime.failures import RunFailed, one_line
    from dataforge.runtime.manifest import AccountingError, RunDirError

    config = _checked_config(args)
    if config is None:
        return 2
    choice = _executor(args, config)
    if choice is None:
        return 2
    out = _output_location(args, config)
    log = lambda m: _say(f"[dataforge] {m}")  # noqa: E731
    log(choice.why)
    from dataforge.runtime.cluster import ClusterError
    from dataforge.runtime.executors import EXECUTORS
    from dataforge.runtime.progress import RunProgress

    progress = RunProgress(mode=args.progress, verbose=args.verbose)
    run = EXECUTORS[choice.name].run
    try:
        manifest = run(
            config, out, choice.address, overwrite=args.overwrite, log=log, progress=progress
        )
    except (RunDirError, LeaseHeldError) as exc:
        _say(f"error: {exc}")
        return 2
    except StorageError as exc:
        _say(f"error: {exc}")
        return 1
    except (AccountingError, ClusterError, RunFailed) as exc:
        # RunFailed's second line, when it has one, names the file holding the full trace
        _say(*f"error: run failed: {exc}".split("\n"))
        return 1
    except OSError as exc:  # e.g. a full disk or a permission before any task ran
        _say(f"error: run failed: {one_line(exc, out)}")
        return 1
    except KeyboardInterrupt as exc:
        _say(
            f"{_stopped_by(exc)}: {out} holds no complete output; the same command resumes it "
            "(committed tasks are kept)"
        )
        return 143 if isinstance(exc, Terminated) else 130
    if "://" not in out:  # the report is drawn from local files (object storage: not yet)
        _write_report(Path(out))
    total = manifest["counts"]["total"]
    print(
        printable_json(
            {
                "output": str(out),
                "input": total["input"],
                "kept": total["kept"],
                "repeated": total["repeated"],
                "dropped": total["dropped"],
            }
        )
    )
    return 0


def _executor(args: argparse.Namespace, config) -> ExecutorChoice | None:
    """The executor the run uses, its cluster and why
    (:func:`dataforge.runtime.executors.choose_executor`); None (the error printed) when the
    choice contradicts the addresses given."""
    from dataforge.config import ConfigError
    from dataforge.runtime.executors import choose_executor

    try:
        return choose_executor(args.executor, getattr(args, "address", None), config)
    except ConfigError as exc:
        _say(f"error: {exc}")
        return None


def _output_location(args: argparse.Namespace, config) -> str:
    """``-o`` (relative to the working directory) or ``output.path`` (relative to the
    pipeline file); a URI is kept as it is."""
    given = getattr(args, "output", None)
    if not given:
        return config.locate(config.output.path)
    return given if "://" in given else str(Path(given).resolve())


def _write_report(out: Path) -> None:
    """``OUT/report.html`` after a run; a report that cannot be drawn does not fail the run
    (its data is all in the manifest), it is said once."""
    from dataforge.report import write_report

    try:
        path = write_report(out)
    except Exception as exc:  # noqa: BLE001 - the run succeeded; say why the report did not
        _say(f"[dataforge] report not written: {type(exc).__name__}: {exc}")
        return
    _say(f"[dataforge] report: {os.path.normpath(path)}")


def _cmd_report(args: argparse.Namespace) -> int:
    """Exit 0: the report of a complete run; 1: the report of a run whose manifest says it
    did not complete (written, saying so at its top); 2: no report (bad path or files)."""
    from dataforge.report import ReportError, run_status, write_report

    try:
        path = write_report(Path(args.path), Path(args.output) if args.output else None)
    except ReportError as exc:
        _say(f"error: {exc}")
        return 2
    print(printable(path))
    status = run_status(Path(args.path))
    if status not in (None, "complete"):
        _say(
            f"error: {args.path} is a run that did not complete (status {status}); the "
            f"report at {path} shows what it recorded"
        )
        return 1
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from dataforge.io.readers import plan_input_tasks
    from dataforge.io.splits import split_summary

    if _names_an_ablation(args.pipeline):
        return _validate_ablation(args)
    config = _checked_config(args)
    choice = None if config is None else _executor(args, config)
    if choice is None:
        return 2
    tasks = plan_input_tasks(config)
    splits = split_summary(tasks, config.inputs, config.read.split_bytes)
    print(
        printable(
            f"ok: {config.name}: {len(config.inputs)} sources, {len(tasks)} files, "
            f"{sum(t.bytes for t in tasks)} bytes, {splits}, "
            f"stages: {[s.op for s in config.stages]}"
        )
    )
    print(printable(choice.why))
    return 0


def _names_an_ablation(path: str) -> bool:
    """Whether ``path`` is an ablation file (``dataforge ablate``), not a pipeline; an
    unreadable file is left to the pipeline checks, which name the problem."""
    from dataforge.typed_config import ConfigError, read_yaml_file
    from trainer.ablate.validate import is_ablation_file

    try:
        return is_ablation_file(read_yaml_file(path, "pipeline file"))
    except ConfigError:
        return False


def _validate_ablation(args: argparse.Namespace) -> int:
    """``dataforge validate ABLATION.yaml``: the ablation's checks, nothing run."""
    from dataforge.runtime.validate import validate_pipeline
    from trainer.ablate.validate import ablation_problems

    config, problems = ablation_problems(args.pipeline, args.set, validate_pipeline, args.output)
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    if config is None or problems:
        return 2
    variants = ", ".join(f"{v.name} ({config.pipeline_of(v)})" for v in config.variants)
    print(
        f"ok: ablation {config.name}: variants {variants}; "
        f"eval sets {[e.name for e in config.eval]}; seeds {list(config.seeds)}; "
        f"{config.train.tokens} tokens per model"
    )
    return 0


def _cmd_inspect(args: argparse.Namespace) -> int:
    from dataforge.inspect import inspect_path, local_dataset
    from dataforge.io.fs import StorageError
    from dataforge.io.mds import MDSCorruptError, MDSFormatError

    try:
        with local_dataset(args.path) as path:
            return inspect_path(path, head=args.head, verify=args.verify, as_json=args.json)
    except MDSCorruptError as exc:
        _say(f"error: corrupt dataset: {exc}")
        return 1
    except (MDSFormatError, StorageError) as exc:
        _say(f"error: {exc}")
        return 2


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The ``dataforge`` parser; ``command``: the subcommand a command line names (a
    built-in one loads no extension, an extension loads only its own); None: all."""
    parser = argparse.ArgumentParser(
        prog="dataforge",
        description="Data preprocessing pipelines on Ray for LLM training (Chinese and English).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = sub.add_parser(
        "run",
        help="run (or resume) a pipeline on Ray or local worker processes",
        description="Run PIPELINE.yaml on embedded local Ray, an existing cluster, or "
        "(--executor local) forked worker processes. "
        "Re-running into an OUT of the same config and inputs resumes; a different config "
        "or input set is refused unless --overwrite; one run writes an OUT at a time.",
    )
    run.add_argument("pipeline", metavar="PIPELINE.yaml")
    run.add_argument("-o", "--output", metavar="OUT", help="run directory (default: output.path)")
    run.add_argument(
        "--address", help="Ray cluster address (default: ray.address, RAY_ADDRESS, else local)"
    )
    run.add_argument(
        "--executor",
        choices=("ray", "local"),
        help="ray: every task on Ray actors (default); local: forked worker processes, no Ray "
        "(default: the pipeline's executor key)",
    )
    run.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="key.path=value",
        help="override a config value (YAML syntax), e.g. --set stages.0.batch_size=500",
    )
    run.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a run of another config or input set in OUT (removes only what "
        "dataforge wrote; never a folder that is not a run)",
    )
    run.add_argument(
        "--progress",
        choices=("auto", "live", "plain", "off"),
        default="auto",
        help="auto: a live table in a terminal, else a status line every 10 s "
        "(DATAFORGE_PROGRESS_INTERVAL)",
    )
    run.add_argument(
        "-v", "--verbose", action="store_true", help="a line per task, and Ray's own info lines"
    )
    run.set_defaults(func=_cmd_run)

    rep = sub.add_parser(
        "report",
        help="write an HTML report of a pipeline run or a training run",
        description="Write one self-contained HTML file with plots: for a pipeline run "
        "directory (manifest.json) or a training run directory (metrics.jsonl).",
    )
    rep.add_argument("path", metavar="OUT|RUN_DIR")
    rep.add_argument("-o", "--output", metavar="FILE", help="default: PATH/report.html")
    rep.set_defaults(func=_cmd_report)

    val = sub.add_parser(
        "validate",
        help="check a pipeline (or an ablation file) without running it",
        description="Check the config, input paths, models and tokenizers, without Ray. "
        "Given an ablation file (dataforge ablate), check every variant's pipeline, the "
        "training recipe and the evaluation sets.",
    )
    val.add_argument("pipeline", metavar="PIPELINE.yaml|ABLATION.yaml")
    val.add_argument(
        "-o", "--output", metavar="OUT", help="check this run directory (default: output.path)"
    )
    val.add_argument("--set", action="append", default=[], metavar="key.path=value")
    val.add_argument("--executor", choices=("ray", "local"), help="as for run")
    val.set_defaults(func=_cmd_validate)

    ins = sub.add_parser(
        "inspect",
        help="summarize, print or verify MDS output",
        description="Summarize an MDS dataset (a run directory or its mds/ dir).",
    )
    ins.add_argument("path", metavar="PATH")
    ins.add_argument("--head", type=int, default=0, metavar="N", help="print the first N samples")
    ins.add_argument(
        "--verify",
        action="store_true",
        help="check shard hashes, sizes and sample counts; exit 1 on corruption",
    )
    ins.add_argument("--json", action="store_true", help="machine-readable output")
    ins.set_defaults(func=_cmd_inspect)

    names = [command] if command in _EXTENSIONS else [] if command in sub.choices else _EXTENSIONS
    for module_name in (_EXTENSIONS[name] for name in names):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                continue
            raise
        module.add_subcommand(sub)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so that every cleanup an interrupt runs (temporary
    files removed, run state left resumable) runs for it too."""


_MAIN_PID = os.getpid()


def _raise_terminated(signum: int, frame: object) -> None:
    if os.getpid() != _MAIN_PID:  # a forked worker inherited the handler: die as before
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # The top level takes no option but -h: a command line names its command first.
    command = argv[0] if argv and not argv[0].startswith("-") else None
    args = build_parser(command).parse_args(argv)
    if args.command == "run":
        skip_pandas_probe()  # before the run's first pyarrow call
    handle = (  # not in a program's own thread, nor over its own handler
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    )
    if handle:
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return int(args.func(args))
    except KeyboardInterrupt as exc:
        _say(f"{_stopped_by(exc)}: dataforge {args.command} stopped; what it was writing was "
             "not put in place")  # fmt: skip
        return 143 if isinstance(exc, Terminated) else 130
    finally:
        if handle and signal.getsignal(signal.SIGTERM) is _raise_terminated:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a caller that goes on


def _stopped_by(exc: KeyboardInterrupt) -> str:
    return "terminated (SIGTERM)" if isinstance(exc, Terminated) else "interrupted"


if __name__ == "__main__":
    sys.exit(main())
