"""Your own credential shapes: ``register_pattern(name, regex)`` makes the recorder refuse (``SECRET_DETECTED``)
and every message mask a string of that shape, beside the built-in ones; ``REDACTED`` is what replaces one."""

from chunktape._secrets import REDACTED, register_pattern, unregister_pattern

__all__ = ["REDACTED", "register_pattern", "unregister_pattern"]
