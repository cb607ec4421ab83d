"""Writes tests/module_seconds.json from a JUnit XML report of a `make test` run:

    make test PYTEST_FLAGS=--junitxml=report.xml && python tools/module_seconds.py report.xml

The seconds each test module took (setup, call and teardown of its tests, as the report
counts them). A split run hands the longest modules out first (tests/conftest.py), so that
no long module starts last while the other workers have nothing left to do.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

TARGET = Path(__file__).resolve().parent.parent / "tests" / "module_seconds.json"
SMALLEST = 5.0
"""Modules below this are left out: they keep their collection order, after the long ones,
where they fill the gaps at the end of a split run."""


def module_seconds(report: Path) -> dict[str, int]:
    seconds: dict[str, float] = defaultdict(float)
    for case in ET.parse(report).iter("testcase"):  # noqa: S314 - our own pytest's report
        seconds[_module_file(case.get("classname", ""))] += float(case.get("time") or 0)
    kept = {module: round(total) for module, total in seconds.items() if total >= SMALLEST}
    return dict(sorted(kept.items(), key=lambda item: -item[1]))


def _module_file(classname: str) -> str:
    """`tests.api.test_jobs.TestCancel` -> `tests/api/test_jobs.py`, as test ids begin (a test
    class's report names the class after the module)."""
    parts = classname.split(".")
    while len(parts) > 1 and parts[-1][:1].isupper():
        parts.pop()
    return "/".join(parts) + ".py"


def main(argv: list[str]) -> None:
    if len(argv) != 2:
        sys.exit(__doc__)
    TARGET.write_text(json.dumps(module_seconds(Path(argv[1])), indent=1) + "\n")
    print(f"wrote {TARGET.name}")


if __name__ == "__main__":
    main(sys.argv)
