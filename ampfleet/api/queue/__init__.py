"""The queue: every queued job in the order the scheduler considers them."""
