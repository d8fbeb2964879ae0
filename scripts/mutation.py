"""Mutation testing of the decision core: ``python scripts/mutation.py [module ...]``.

Install the tool first: ``pip install -e ".[mutation]"`` (mutmut 3.x; CI does not install it and
does not run this: a full run takes about an hour on two cores).

Each module of the decision core (``--list`` shows them) is mutated on its own, in a scratch
directory ``.mutation/<module>/`` (gitignored), with its own fast test selection: mutmut reads its
settings from the ``pyproject.toml`` of the directory it runs in, so this script writes one there
(the project's own, which carries the pytest settings, plus a ``[tool.mutmut]`` table for that
module) and links ``failopen/``, ``integrations/`` and ``tests/`` in. mutmut then copies them into
``mutants/`` and, for each mutant, runs only the tests of the selection that call the mutated
function. Results are cached there: a second run re-tests only what changed (``--fresh`` starts
over).

The report is one table row per module (mutants, killed, survived, equivalent, score, minutes)
and each surviving mutant's name; ``mutmut show NAME`` in the module's directory prints its diff.
The mutants listed in ``scripts/mutation_equivalent.txt`` cannot change behaviour (the file says
why for each); they are counted apart, and the score is killed / (mutants - equivalent).

Runs under ``nice`` with one worker unless ``--jobs`` says otherwise: it shares the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRATCH = ROOT / ".mutation"
EQUIVALENT_FILE = ROOT / "scripts" / "mutation_equivalent.txt"


@dataclass(frozen=True)
class Module:
    """A part of the decision core: the files mutated and the tests that should notice."""

    sources: tuple[str, ...]
    tests: tuple[str, ...]


MODULES: dict[str, Module] = {
    "guard": Module(
        ("failopen/engine/guard.py", "failopen/engine/decision.py", "failopen/engine/shadow.py"),
        ("tests/test_guard.py", "tests/test_guard_decisions.py", "tests/test_guard_records.py",
         "tests/test_guard_outage.py", "tests/test_outage_policy.py",
         "tests/test_first_reading.py", "tests/test_audit.py", "tests/test_metrics.py",
         "tests/test_forksafe.py")),
    "paths": Module(
        ("failopen/_internal/paths.py",),
        ("tests/test_paths.py", "tests/test_config.py", "tests/test_outage_policy.py")),
    "verify_answers": Module(
        ("failopen/providers/verify_answers.py",),
        ("tests/test_verify_answers.py", "tests/test_verify.py")),
    "override": Module(
        ("failopen/stores/override.py",),
        ("tests/test_override.py", "tests/test_stores.py", "tests/test_flag.py")),
    "flag": Module(
        ("failopen/engine/flag.py", "failopen/engine/flag_state.py"),
        ("tests/test_flag.py", "tests/test_flag_events.py", "tests/test_stores.py",
         "tests/test_watcher.py", "tests/test_listeners.py",
         "tests/test_forksafe.py")),
    "global_component": Module(
        ("failopen/providers/global_component.py",),
        ("tests/test_global_component.py", "tests/test_status_components.py",
         "tests/test_status.py")),
    "redact": Module(
        ("failopen/_internal/redact.py",),
        ("tests/test_redact.py", "tests/test_watcher.py")),
}

# mutmut's exit codes per mutant (mutmut/stats.py): 1 and 3 are kills, 0 a survivor; 5 and 33
# "no tests" (no selected test calls the function: a survivor too, for the score).
_KILLED = {1, 3}
_TIMEOUT = {24, -24, 36, 152, 255}


def _equivalents() -> dict[str, str]:
    """Mutant name -> why it cannot change behaviour, from ``mutation_equivalent.txt``."""
    found: dict[str, str] = {}
    for line in EQUIVALENT_FILE.read_text().splitlines():
        name, _, why = line.partition("#")
        if name.strip():
            found[name.strip()] = why.strip()
    return found


def _prepare(name: str, module: Module, fresh: bool) -> Path:
    """The module's scratch directory, with the pyproject mutmut reads and the links it copies."""
    work = SCRATCH / name
    if fresh and work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True, exist_ok=True)
    table = "\n".join([
        "", "[tool.mutmut]",
        'source_paths = ["failopen"]',
        f"only_mutate = {json.dumps(list(module.sources))}",
        f"pytest_add_cli_args_test_selection = {json.dumps(list(module.tests))}",
        # -x: one failing test kills the mutant; no need for the rest of the selection.
        'pytest_add_cli_args = ["-x", "-q", "-p", "no:randomly"]',
        # Tests import the examples (the chat-alert recipe) from the repository root.
        'also_copy = ["examples"]',
        "",
    ])
    (work / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text() + table)
    for linked in ("failopen", "integrations", "tests", "examples"):
        link = work / linked
        if not link.exists():
            link.symlink_to(ROOT / linked, target_is_directory=True)
    return work


def _tally(work: Path, module: Module, equivalent: dict[str, str]) -> dict[str, object]:
    """Counts from mutmut's ``.meta`` files of the module's sources."""
    codes: dict[str, int | None] = {}
    for source in module.sources:
        meta = work / "mutants" / (source + ".meta")
        if meta.exists():
            codes.update(json.loads(meta.read_text())["exit_code_by_key"])
    killed = sorted(k for k, c in codes.items() if c in _KILLED)
    timeout = sorted(k for k, c in codes.items() if c in _TIMEOUT)
    unchecked = sorted(k for k, c in codes.items() if c is None)
    survived = sorted(k for k in codes if k not in killed and k not in timeout
                      and k not in unchecked)
    equivalent_here = [k for k in survived if k in equivalent]
    alive = [k for k in survived if k not in equivalent]
    checked = len(codes) - len(unchecked)
    # A timeout is a kill: the mutant made the tests hang, which a user would notice.
    dead = len(killed) + len(timeout)
    denominator = checked - len(equivalent_here)
    return {
        "mutants": len(codes), "checked": checked, "killed": dead, "survived": alive,
        "equivalent": equivalent_here,
        "score": 100.0 * dead / denominator if denominator else 100.0,
    }


def main(argv: list[str] | None = None) -> int:
    """Run mutmut over the named modules (default: all) and print the score table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modules", nargs="*", metavar="module",
                        help=f"any of {', '.join(MODULES)} (default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="mutmut workers (default 1)")
    parser.add_argument("--fresh", action="store_true", help="forget cached results")
    parser.add_argument("--report", action="store_true", help="print results; run nothing")
    parser.add_argument("--list", action="store_true", help="list modules and their tests")
    args = parser.parse_args(argv)
    unknown = [name for name in args.modules if name not in MODULES]
    if unknown:
        parser.error(f"unknown module {', '.join(unknown)}: choose from {', '.join(MODULES)}")
    if args.list:
        for name, module in MODULES.items():
            print(f"{name}: {' '.join(module.sources)}\n    tests: {' '.join(module.tests)}")
        return 0
    if shutil.which("mutmut", path=str(Path(sys.executable).parent)) is None:
        print('mutmut is not installed: pip install -e ".[mutation]"', file=sys.stderr)
        return 2
    equivalent = _equivalents()
    rows = []
    for name in args.modules or list(MODULES):
        module = MODULES[name]
        work = _prepare(name, module, args.fresh)
        started = time.monotonic()
        if not args.report:
            command = ["nice", "-n", "19", sys.executable, "-m", "mutmut", "run",
                       "--max-children", str(args.jobs)]
            # mutmut's own output is long: it goes to a log beside the results.
            with open(work / "mutmut.log", "w") as log:
                done = subprocess.run(command, cwd=work, stdout=log, stderr=subprocess.STDOUT,
                                      env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                                      check=False)
            if done.returncode != 0:  # e.g. a test of the selection fails on the real code
                print(f"{name}: mutmut failed (exit {done.returncode}); see "
                      f".mutation/{name}/mutmut.log", file=sys.stderr)
        # --report times nothing: the table says so instead of showing 0.0.
        minutes = "-" if args.report else f"{(time.monotonic() - started) / 60:.1f}"
        tally = _tally(work, module, equivalent)
        rows.append((name, tally, minutes))
        for mutant in tally["survived"]:  # type: ignore[attr-defined]
            print(f"survived: {mutant}  (cd .mutation/{name} && mutmut show {mutant})")
    print("\n| module | mutants | killed | survived | equivalent | score | minutes |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, tally, minutes in rows:
        # A run stopped early leaves mutants unchecked: the row says how many were, honestly.
        shown = tally["mutants"] if tally["checked"] == tally["mutants"] \
            else f"{tally['checked']} of {tally['mutants']}"
        print(f"| {name} | {shown} | {tally['killed']} | {len(tally['survived'])} "
              f"| {len(tally['equivalent'])} | {tally['score']:.1f} % | {minutes} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
