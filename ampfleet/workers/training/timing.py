"""Where a step's time goes: data wait, forward, backward, exposed AllReduce, optimizer."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import torch
from torch.profiler import record_function

from ampfleet.workers.training.profile_summary import OWN_ANNOTATION


class StepTimer:
    """Accumulates wall time per phase. On CUDA, work is asynchronous: the device is
    synchronised at phase boundaries, so only steps that are reported (or profiled) are timed
    there."""

    def __init__(
        self,
        device: torch.device,
        enabled: bool,
        annotate: bool = False,
        beat: Callable[[str], None] | None = None,
    ) -> None:
        self.enabled = enabled
        self.beat = beat
        """Told each phase as it begins, timed or not: the rank's heartbeat."""
        self.annotate = annotate
        """Each phase is also a range in a running torch.profiler's trace."""
        self._cuda = device.type == "cuda" and enabled
        self.seconds: dict[str, float] = {}

    def _sync(self) -> None:
        if self._cuda:
            torch.cuda.synchronize()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if self.beat is not None:
            self.beat(name)
        if not self.enabled:
            yield
            return
        with record_function(OWN_ANNOTATION + name) if self.annotate else contextlib.nullcontext():
            self._sync()
            started = time.perf_counter()
            yield
            self._sync()
        self.add(name, time.perf_counter() - started)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def move(self, source: str, target: str, seconds: float) -> None:
        """Re-attribute part of one phase to another (exposed AllReduce out of backward)."""
        seconds = min(max(seconds, 0.0), self.seconds.get(source, 0.0))
        self.add(source, -seconds)
        self.add(target, seconds)
