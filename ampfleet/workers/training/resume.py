"""Where a resumed run continues in its data: pure arithmetic on what the checkpoint
recorded, so that a resume onto another world size (resharding) is testable without one."""

from __future__ import annotations

from ampfleet.workers.training import checkpoint


def resume_position(
    restored: checkpoint.Restored, batch_size: int, world_size: int, batches_per_epoch: int
) -> int:
    """The micro-batch to continue from: the same epoch, past the samples the saved world
    had consumed of it (rounded up to whole global batches of this world)."""
    consumed, per_epoch = restored.micro_batches_consumed, restored.micro_batches_per_epoch
    saved_world = int(restored.setup["world_size"])
    if saved_world == world_size:
        return consumed
    epoch, within = divmod(consumed, per_epoch)
    samples = within * batch_size * saved_world
    per_batch = batch_size * world_size
    return epoch * batches_per_epoch + min(-(-samples // per_batch), batches_per_epoch)
