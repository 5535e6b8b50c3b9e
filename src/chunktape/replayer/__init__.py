"""Replay: the ReplayAdapter, timing, and fault injection on chunk streams."""
