"""Chunk buffer, merge strategies, staleness, interpolation, watchdog, controller step."""
