"""Sessions: one cassette recorded or replayed per a vcrpy-style record mode, for adapter calls and HTTP alike."""
