"""The independent safety core: validation, limiter, e-stop latch, stop state machine."""
