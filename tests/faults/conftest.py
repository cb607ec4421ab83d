from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.support.fleet import Fleet, running_fleet

FleetFactory = Callable[..., Fleet]


@pytest.fixture
def make_fleet(tmp_path: Path) -> Iterator[FleetFactory]:
    with ExitStack() as stack:
        counter = iter(range(100))

        def start(backend: str = "postgres+redis", **kwargs: object) -> Fleet:
            root = tmp_path / f"fleet{next(counter)}"
            return stack.enter_context(running_fleet(root, backend, **kwargs))

        yield start
