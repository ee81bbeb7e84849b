"""Import time of each Lambda entry module against the bare import of the libraries it needs:
``python -m bench.cold_start``.

For each entry module, in fresh interpreters (``python -c``, bytecode already compiled, files in the page cache,
as on a warm Lambda host; the interpreter's own start-up is excluded, the clock runs around the import only):

1. **discover**: import the module once and list the third-party modules it loaded (files outside the project
   and outside the standard library), in load order;
2. **ours**: ``import <entry module>``;
3. **bare (modules)**: import exactly those third-party modules and nothing of ours: the floor for this entry,
   so ``ours / bare`` is what our own code adds (our modules, plus any library *submodule* we pull in that the
   entry does not need);
4. **bare (packages)**: ``import <top-level package>`` of each library, the naive baseline, shown for scale.

The children run with the environment every deployed function gets: the variables template.yaml sets with a
literal value under ``Globals.Function.Environment`` (``PYDANTIC_DISABLE_PLUGINS``, ``AUTH_MODE``, ...; values
that CloudFormation resolves at deploy time are left out), for ours and bare alike; ``--no-template-env`` drops
them.

Each child reports two clocks around the import: wall time (``time.perf_counter``) and the CPU time of the process
(``time.process_time``, user + system). On a shared machine other jobs stretch the wall time of an import (the
child waits for a core) but hardly its CPU time, so the CPU ratio is the steadier figure there; both are reported.
Runs alternate ours / bare so both see the same machine noise; the median of ``--repeats`` (>= 10) is reported.
``-X importtime`` then names the heaviest libraries and which of our modules imports each at module level: the
candidates for a lazy import.

``--instructions`` adds a third measure that does not depend on the machine's speed at all: the CPU instructions
each import executes, counted by valgrind's callgrind (``Ir``), with the interpreter's own start-up (``python -c
pass``) subtracted from both sides and a fixed ``PYTHONHASHSEED``. Two runs of the same tree agree to within a few
thousand instructions of several hundred million, so this ratio tells a change of 1 % where the timed ratios, on a
shared machine, move by 10 % between runs. It counts work, not time: cache misses and page faults are not in it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # pyyaml ships no type stubs

from bench.stats import machine, markdown_table

ROOT = Path(__file__).resolve().parent.parent
ENTRY_MODULES = (
    "functions.agent_api.app",
    "functions.agent_api.lambda_buffered",
    "functions.memory_extract.handler",
    "functions.automation.handler",
)
PROJECT_PACKAGES = ("shared", "functions", "bench", "tests")

_DISCOVER = """
import importlib, json, sys, sysconfig, time
stdlib = sysconfig.get_paths()["stdlib"]
before = set(sys.modules)
t = time.perf_counter()
importlib.import_module({module!r})
elapsed = time.perf_counter() - t
project = ("shared", "functions", "bench", "tests")
loaded = []
for name, mod in list(sys.modules.items()):
    if name in before or name.split(".")[0] in project:
        continue
    path = getattr(mod, "__file__", None) or ""
    if not path or path.startswith(stdlib + "/") and "site-packages" not in path:
        continue
    loaded.append(name)
print(json.dumps({{"seconds": elapsed, "third_party": loaded}}))
"""

_TIMED = """
import importlib, sys, time
names = {names!r}
c, t = time.process_time(), time.perf_counter()
for name in names:
    try:
        importlib.import_module(name)
    except Exception:
        pass
t, c = time.perf_counter() - t, time.process_time() - c
print(t, c)
"""


class _CfnLoader(yaml.SafeLoader):  # type: ignore[misc]
    """A YAML loader that keeps CloudFormation's short-form tags (``!Ref``, ``!Sub``, ...) as tagged values."""


def _tagged(loader: yaml.SafeLoader, suffix: str, node: yaml.Node) -> dict[str, Any]:
    return {f"!{suffix}": None}


_CfnLoader.add_multi_constructor("!", _tagged)


def template_environment(path: Path | None = None) -> dict[str, str]:
    """The variables template.yaml gives every function with a literal value (``Globals.Function.Environment``)."""
    template = yaml.load((path or ROOT / "template.yaml").read_text(encoding="utf-8"), Loader=_CfnLoader)
    variables = template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {})
    return {name: str(value) for name, value in variables.items() if isinstance(value, str | int | float)}


TEMPLATE_ENV: dict[str, str] = {}
"""Set by :func:`main` (``--no-template-env`` leaves it empty)."""


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(TEMPLATE_ENV)
    env.update({"PYTHONPATH": str(ROOT), "AWS_DEFAULT_REGION": env.get("AWS_DEFAULT_REGION", "us-east-1")})
    return env


def _python(code: str, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *flags, "-c", code], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120,
        check=False,
    )


def _timed(names: Sequence[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of importing ``names`` in a fresh interpreter."""
    done = _python(_TIMED.format(names=list(names)))
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    wall, cpu = done.stdout.strip().splitlines()[-1].split()
    return float(wall), float(cpu)


def _load() -> str:
    """The 1/5/15-minute load averages, to read the wall-clock figures against."""
    try:
        return "load average " + ", ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "load average unknown"


def module_exists(module: str) -> bool:
    return (ROOT / (module.replace(".", "/") + ".py")).exists() or (ROOT / module.replace(".", "/")).is_dir()


@dataclass
class EntryResult:
    module: str
    ours_s: list[float] = field(default_factory=list)
    bare_modules_s: list[float] = field(default_factory=list)
    bare_packages_s: list[float] = field(default_factory=list)
    ours_cpu_s: list[float] = field(default_factory=list)
    bare_modules_cpu_s: list[float] = field(default_factory=list)
    bare_packages_cpu_s: list[float] = field(default_factory=list)
    packages: list[str] = field(default_factory=list)
    third_party_modules: int = 0
    heavy: list[tuple[str, float, str]] = field(default_factory=list)
    """(library, cumulative ms, the nearest of our modules that imports it at module level)."""
    ours_instructions: int | None = None
    bare_instructions: int | None = None
    """Instructions of each import, the interpreter's start-up subtracted (``--instructions``); None: not counted."""

    @property
    def instruction_ratio(self) -> float | None:
        if self.ours_instructions is None or not self.bare_instructions:
            return None
        return self.ours_instructions / self.bare_instructions

    @property
    def ours(self) -> float:
        return statistics.median(self.ours_s)

    @property
    def bare(self) -> float:
        return statistics.median(self.bare_modules_s)

    @property
    def bare_packages(self) -> float:
        return statistics.median(self.bare_packages_s)

    @property
    def ratio(self) -> float:
        """Wall-clock ratio, ours / bare (its library modules)."""
        return self.ours / self.bare

    @property
    def ours_cpu(self) -> float:
        return statistics.median(self.ours_cpu_s)

    @property
    def bare_cpu(self) -> float:
        return statistics.median(self.bare_modules_cpu_s)

    @property
    def cpu_ratio(self) -> float:
        """CPU-time ratio, ours / bare (its library modules): what other jobs on the machine distort least."""
        return self.ours_cpu / self.bare_cpu


_IMPORTTIME = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


def heavy_imports(module: str, top: int) -> list[tuple[str, float, str]]:
    """The ``top`` heaviest third-party packages by cumulative import time and who imports them first."""
    done = _python(f"import {module}", "-X", "importtime")
    lines = [m for m in (_IMPORTTIME.match(line) for line in done.stderr.splitlines()) if m]
    parsed = [(int(m.group(2)), len(m.group(3)) // 2, m.group(4)) for m in lines]
    # -X importtime prints a module after everything it imported, one indent level deeper: a line's importer is
    # the next line below it with a smaller depth.
    best: dict[str, tuple[float, str]] = {}
    for index, (cumulative, depth, name) in enumerate(parsed):
        package = name.split(".")[0]
        if package in PROJECT_PACKAGES or package.startswith("_") or package in sys.stdlib_module_names:
            continue
        importer, level = "", depth
        for later_cum, later_depth, later_name in parsed[index + 1 :]:
            del later_cum
            if later_depth < level:
                level = later_depth
                if later_name.split(".")[0] in ("shared", "functions"):
                    importer = later_name
                    break
        if package not in best or cumulative / 1000 > best[package][0]:
            best[package] = (cumulative / 1000, importer or best.get(package, (0.0, ""))[1])
    ranked = sorted(best.items(), key=lambda kv: kv[1][0], reverse=True)
    return [(name, ms, importer) for name, (ms, importer) in ranked[:top] if importer or ms >= 1]


_COLLECTED = re.compile(r"Collected : (\d+)")


def instructions_of(code: str) -> int:
    """Instructions executed by ``python -c code`` (valgrind's callgrind), hash seed fixed."""
    done = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-c", code],
        cwd=ROOT, env={**_env(), "PYTHONHASHSEED": "0"}, capture_output=True, text=True, timeout=600, check=False,
    )
    found = _COLLECTED.search(done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"callgrind failed:\n{done.stderr[-2000:]}")
    return int(found.group(1))


def _settled_count(code: str) -> int:
    """The second count of ``code``: the first, in a tree that just changed, can include compiling its bytecode."""
    instructions_of(code)
    return instructions_of(code)


def count_instructions(result: EntryResult, third_party: Sequence[str]) -> None:
    """Ours and bare in instructions, the interpreter's start-up subtracted from both."""
    start = _settled_count("pass")
    result.ours_instructions = _settled_count(_TIMED.format(names=[result.module])) - start
    result.bare_instructions = _settled_count(_TIMED.format(names=list(third_party))) - start


def measure(module: str, repeats: int, top: int, *, instructions: bool = False) -> EntryResult:
    result = EntryResult(module)
    done = _python(_DISCOVER.format(module=module))
    if done.returncode != 0:
        raise RuntimeError(f"{module} does not import:\n{done.stderr[-2000:]}")
    third_party: list[str] = json.loads(done.stdout.strip().splitlines()[-1])["third_party"]
    result.third_party_modules = len(third_party)
    result.packages = sorted({name.split(".")[0] for name in third_party if not name.split(".")[0].startswith("_")})
    for index in range(repeats):
        runs: list[tuple[str, Callable[[], tuple[float, float]]]] = [
            ("ours", lambda: _timed([module])),
            ("bare", lambda: _timed(third_party)),
            ("packages", lambda: _timed(result.packages)),
        ]
        if index % 2:
            runs.reverse()
        series = {
            "ours": (result.ours_s, result.ours_cpu_s),
            "bare": (result.bare_modules_s, result.bare_modules_cpu_s),
            "packages": (result.bare_packages_s, result.bare_packages_cpu_s),
        }
        for kind, fn in runs:
            wall, cpu = fn()
            series[kind][0].append(wall)
            series[kind][1].append(cpu)
    result.heavy = heavy_imports(module, top)
    if instructions:
        count_instructions(result, third_party)
    return result


def _instruction_table(results: Sequence[EntryResult]) -> None:
    counted = [r for r in results if r.instruction_ratio is not None]
    if not counted:
        return
    print()
    print("Instructions (valgrind callgrind, interpreter start-up subtracted, PYTHONHASHSEED=0):")
    print()
    rows = [[r.module, f"{(r.ours_instructions or 0) / 1e6:.1f}", f"{(r.bare_instructions or 0) / 1e6:.1f}",
             f"{r.instruction_ratio:.3f}"] for r in counted]
    ours, bare = (sum(getattr(r, f"{side}_instructions") or 0 for r in counted) for side in ("ours", "bare"))
    rows.append(["all counted (INIT as a whole)", f"{ours / 1e6:.1f}", f"{bare / 1e6:.1f}", f"{ours / bare:.3f}"])
    print(markdown_table(["entry module", "ours (millions)", "bare (millions)", "instruction ratio"], rows))


def _print_instructions(results: list[EntryResult], started: float) -> list[EntryResult]:
    print(f"machine: {machine()}; instruction counts only (--instructions-only)")
    _instruction_table(results)
    print(f"({time.perf_counter() - started:.1f} s)")
    return results


def main(argv: Sequence[str] | None = None) -> list[EntryResult]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="one module, one repeat")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--top", type=int, default=8, help="heavy imports listed per module")
    parser.add_argument("--modules", default=",".join(ENTRY_MODULES))
    parser.add_argument("--no-template-env", action="store_true",
                        help="run the children without the literal Globals variables of template.yaml")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each import's CPU instructions with valgrind (deterministic; slow: ~1 min "
                             "per module)")
    parser.add_argument("--instructions-only", action="store_true",
                        help="only the instruction counts, no timed rounds (INIT as a whole: the four entries' sum)")
    args = parser.parse_args(argv)
    args.instructions = args.instructions or args.instructions_only
    if args.instructions and shutil.which("valgrind") is None:
        parser.error("--instructions needs valgrind (apt-get install valgrind)")
    TEMPLATE_ENV.clear()
    if not args.no_template_env:
        TEMPLATE_ENV.update(template_environment())
    modules = ["functions.automation.handler"] if args.smoke else [m for m in args.modules.split(",") if m]
    repeats = 1 if args.smoke else args.repeats
    started = time.perf_counter()
    results: list[EntryResult] = []
    skipped: list[str] = []
    for module in modules:
        if not module_exists(module):
            skipped.append(module)
            continue
        results.append(measure(module, 0 if args.instructions_only else repeats, args.top,
                               instructions=args.instructions))
    if args.instructions_only:
        return _print_instructions(results, started)
    print(f"machine: {machine()}; {_load()}; median of {repeats} fresh interpreters per figure (wall and CPU time)")
    print("environment of the children: " + (
        "template.yaml Globals literals " + ", ".join(f"{k}={v}" for k, v in sorted(TEMPLATE_ENV.items()))
        if TEMPLATE_ENV else "the caller's, without template.yaml's variables"))
    print()
    print(
        markdown_table(
            ["entry module", "ours ms", "bare (its library modules) ms", "ratio", "ours CPU ms", "bare CPU ms",
             "CPU ratio", "bare (top-level packages) ms", "library modules", "libraries"],
            [
                [r.module, r.ours * 1000, r.bare * 1000, f"{r.ratio:.2f}", r.ours_cpu * 1000, r.bare_cpu * 1000,
                 f"{r.cpu_ratio:.2f}", r.bare_packages * 1000, r.third_party_modules, ", ".join(r.packages)]
                for r in results
            ],
        )
    )
    _instruction_table(results)
    for name in skipped:
        print(f"skipped {name}: the module does not exist in this tree")
    for r in results:
        print()
        print(f"Heaviest libraries of {r.module} (-X importtime, cumulative, one run):")
        print()
        print(markdown_table(["library", "cumulative ms", "imported at module level by"],
                             [[name, ms, importer or "(a library)"] for name, ms, importer in r.heavy]))
    print(f"({time.perf_counter() - started:.1f} s)")
    return results


if __name__ == "__main__":
    main()
