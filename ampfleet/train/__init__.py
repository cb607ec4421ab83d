"""The rank-side API of script mode: the job's precision, sharding, gradient reduction,
reporting and checkpoints in a script's own training loop, the way HF Accelerate's
`prepare`/`backward`, Ray Train's `prepare_model`/`report` and Determined's Core API put a
platform into a loop.

    import ampfleet.train

    session = ampfleet.train.init()  # the job's spec, the process group, the device
    model, optimizer = session.prepare(model, optimizer, grad_clip=1.0, batch_size=64)
    state = {"model": model, "optimizer": optimizer, "scheduler": scheduler}
    step = session.restore(state)  # the latest checkpoint's step, or 0
    for x, y in batches(after=step):
        with session.autocast():
            loss = loss_fn(model(x), y)
        session.backward(loss)
        session.step()  # unscale, finite check, clip, optimizer step, scaler update
        scheduler.step()  # the schedule stays the script's
        step = session.steps_completed
        if step % 10 == 0:
            session.report(step, {"loss": loss})
        if step % 100 == 0:
            session.save(state)
        if session.should_stop():  # preempted, cancelled, stop.max_steps, out of time
            break
    session.save(state)
    session.close()
    del model, optimizer, state  # the DDP wrapper holds the process group
    ampfleet.train.leave_process_group()

Importing it loads torch and the rank's side of the platform, never its server side (no
database, web framework or message broker).
"""

from __future__ import annotations

from ampfleet.train.job import NotInAJobError, RankJob, join_process_group
from ampfleet.train.session import Session
from ampfleet.workers.training import group

__all__ = ["NotInAJobError", "RankJob", "Session", "init", "leave_process_group"]


def init() -> Session:
    """The session of this rank: reads the job from its run folder (`AMPFLEET_RUN_DIR`),
    joins the process group unless the script has (torchrun's environment), picks the
    device, and takes over the job's records from the script's wrapper. Every rank calls it."""
    job = RankJob.from_environment()
    device, backend = join_process_group(job)
    session = Session(job, device, backend)
    session.begin()
    return session


def leave_process_group() -> None:
    """Leaves the process group after a completed run, as the platform's own ranks do: a
    collection first (DDP's wrapper, a reference cycle, holds the group, and freed only at
    interpreter exit, after the group is gone, it can abort the process), then a barrier, so
    that no rank closes its connections while a peer still uses them. After
    `session.close()`, with the script's own references to the model dropped. Every rank
    calls it."""
    group.leave_process_group(completed=True)
