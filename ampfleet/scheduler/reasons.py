"""What a job is told: the words of every reason a pass gives, kept in one place.

A reason is read by the job's owner (`ampfleet status`, the console, GET /v1/queue), so it
names the owner's own jobs by id and only counts other projects' jobs: their ids are theirs
to see. The decisions behind the words are placement's (`ampfleet.scheduler.placement`);
a pending job gets a reason, a placed one on several nodes where it sits on the network.
"""

from __future__ import annotations

from collections.abc import Sequence

from ampfleet.core.fleet import JobRequest, describe_constraints
from ampfleet.scheduler.capacity_index import CapacityIndex
from ampfleet.scheduler.topology import Spread

Named = tuple[str, str]
"""(job id, project) of a job a reason mentions."""


def slots_quota(project: str, limit: int, holds: int) -> str:
    return f"project {project} is at its quota of {limit} slots (holds {holds})"


def jobs_quota(project: str, limit: int) -> str:
    return f"project {project} is at its quota of {limit} concurrent jobs"


def no_node_matches(why: str) -> str:
    return f"no node matches: {why}"


def no_schedulable_node(job: JobRequest) -> str:
    return f"no schedulable node matches {describe_constraints(job)}"


def with_nodes_down(why: str, down: int) -> str:
    return f"{why}; {down} matching node(s) are cordoned or down"


def preemption_wait(new: Sequence[Named], exiting: Sequence[Named], viewer: str) -> str:
    """A job that preempts: the victims it waits for, newly told to exit or already exiting."""
    parts = []
    if new:
        parts.append(f"{len(new)} lower-priority job(s) to be preempted: {_named(new, viewer)}")
    if exiting:
        parts.append(f"{len(exiting)} preempted job(s) to exit: {_named(exiting, viewer)}")
    return "waiting for " + "; and ".join(parts)


def behind_holders(holders: Sequence[Named], viewer: str) -> str:
    """A job that would fit now but for the slots held for jobs ordered before it."""
    return (
        f"behind {len(holders)} higher-priority job(s) holding the slots it needs "
        f"for a reservation or a preemption: {_named(holders, viewer)}"
    )


def capacity_wait(job: JobRequest, index: CapacityIndex, groups: Sequence[int]) -> str:
    """A job that does not fit the free slots of its matching nodes: what it needs, what is."""
    return f"waiting for capacity: needs {_request(job)}, free now: {_free(job, index, groups)}"


def reserved(waiting: str, starts_in_s: float) -> str:
    return f"{waiting}; reserved, to start in about {starts_in_s:.0f}s"


def no_reservation(waiting: str) -> str:
    return f"{waiting}; no running job reports an end that frees enough"


def spread(where: Spread, job: JobRequest) -> str:
    """'in rack r1', 'in zone eu-1 (no single rack had room for 2 x 4 slots)', 'across racks
    r1, r2 (no single rack or zone had room for 12 slots)': part of the placement event."""
    if where.within:
        text = f"in {where.label} {where.names[0]}"
    else:
        parts = []
        if where.names:
            plural = "s" if len(where.names) > 1 else ""
            parts.append(f"{where.label}{plural} {', '.join(where.names)}")
        if where.unlabelled:
            parts.append(f"{where.unlabelled} node(s) without a {where.label} label")
        text = "across " + " and ".join(parts)
    if where.missed:
        text += f" (no single {' or '.join(where.missed)} had room for {_shape(job)})"
    return text


def _shape(job: JobRequest) -> str:
    if job.total_procs is not None:
        return f"{job.total_procs} slots"
    return f"{job.nodes or 1} x {job.procs_per_node or 1} slots"


def _request(job: JobRequest) -> str:
    """'2 x 4 slots of cuda, pool=a100': what reasons call the request."""
    return f"{_shape(job)} of {describe_constraints(job)}"


def _free(job: JobRequest, index: CapacityIndex, groups: Sequence[int]) -> str:
    total = f"{index.total_free(groups)} free slots on matching nodes"
    if job.total_procs is not None:
        return total
    per_node = job.procs_per_node or 1
    enough = index.nodes_with_at_least(groups, per_node)
    return f"{enough} matching node(s) with >= {per_node} free slots, {total}"


def _named(jobs: Sequence[Named], viewer: str) -> str:
    """Jobs as a reason shows them to a job of project `viewer`: its own by id, other
    projects' only counted."""
    own = [job_id for job_id, project in jobs if project == viewer]
    others = len(jobs) - len(own)
    return ", ".join([*own, *([f"{others} of other projects"] if others else [])])
