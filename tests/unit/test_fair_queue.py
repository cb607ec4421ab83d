"""The node's uploads take turns between attempts: one attempt's backlog never holds back
another's file."""

from __future__ import annotations

from ampfleet.workers.fair_queue import FairQueue


def test_attempts_take_turns_and_close_drains_first() -> None:
    line: FairQueue[str] = FairQueue()
    for n in range(4):
        line.put("chatty", f"chatty-{n}")
    line.put("other", "other-model")
    line.close()
    served = [line.get() for _ in range(6)]
    assert served == ["chatty-0", "other-model", "chatty-1", "chatty-2", "chatty-3", None]
