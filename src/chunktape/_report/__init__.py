"""Reading cassettes for people and CI: per-interaction summaries, file checks, and interaction-level diffs."""
