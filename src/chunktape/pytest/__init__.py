"""chunktape's pytest face: the plugin (entry point ``pytest11: chunktape``), its fault matrix and the fault search.

The plugin itself is loaded by pytest. What a test module imports from here: the type of the ``tape`` fixture
(``Tape``), the type of a ``tape_config`` fixture's defaults (``TapeConfig``), and the fault search, which also
runs outside pytest (``search_faults(agent, cassette)``; it needs hypothesis: ``pip install 'chunktape[search]'``).
"""

import typing as _typing

from chunktape._lazy import lazy_names as _lazy_names

# Loaded on first use: pytest imports this package with the plugin, and the search imports hypothesis.
if _typing.TYPE_CHECKING:
    from chunktape.pytest._plugin import Tape, TapeConfig
    from chunktape.pytest._search import AgentHang, SearchResult, search_faults

__all__ = ["AgentHang", "SearchResult", "Tape", "TapeConfig", "search_faults"]

if not _typing.TYPE_CHECKING:  # type checkers see the imports above, and no __getattr__ hiding typos
    __getattr__, __dir__ = _lazy_names(__name__, __all__, ("chunktape.pytest._plugin", "chunktape.pytest._search"))
