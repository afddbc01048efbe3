"""The ``tilejit`` logger hierarchy: what ``TILEJIT_LOG`` sets up, and how code on launch paths logs for free.

Every module logs to a child of the ``tilejit`` logger (``tilejit.compiler.cache``, ...), at debug level for what
the compiler did (front end, passes, code generation, NVRTC and tileiras with their times, disk cache hits and
misses, module loads). tilejit adds no handler of its own unless asked: with ``TILEJIT_LOG=debug|info|warning``
set when ``tilejit`` is imported, :func:`configure` puts one stream handler (stderr) on the ``tilejit`` logger at
that level. Otherwise the application's own ``logging`` setup decides what is shown.

:func:`logger_for` returns a logger only when a record of the level would be handled, so callers build no message
(and time nothing) otherwise; it imports nothing: where ``logging`` is not loaded, no handler can exist, and a
first launch in such a process does not pay for importing it.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from logging import Logger

ROOT = "tilejit"
DEBUG = 10  # logging.DEBUG, without importing logging
INFO = 20
#: The name of the handler ``TILEJIT_LOG`` adds, so that configuring again replaces it instead of adding another.
HANDLER_NAME = "tilejit:TILEJIT_LOG"
FORMAT = "[tilejit %(levelname)s %(name)s] %(message)s"


def logger_for(name: str, level: int = DEBUG) -> Logger | None:
    """The logger ``name`` (a child of ``tilejit``) when it would handle a record of ``level``, else None; never
    imports ``logging`` (not loaded: nobody can be listening)."""
    logging = sys.modules.get("logging")
    if logging is None:
        return None
    log: Logger = logging.getLogger(name)
    return log if log.isEnabledFor(level) else None


def configure() -> bool:
    """Set up the ``tilejit`` logger as ``TILEJIT_LOG`` asks (a stderr handler at its level, replacing one this
    function added before); True when it did. A value it does not know is a warning, not an error: a typo in a
    debugging aid must not stop ``import tilejit``."""
    from tilejit import config
    from tilejit.errors import ConfigError

    try:
        level = config.LOG.get()
    except ConfigError as exc:
        import warnings

        warnings.warn(f"{exc}; tilejit's log is left as it is", RuntimeWarning, stacklevel=2)
        return False
    if level is None:
        return False
    import logging

    log = logging.getLogger(ROOT)
    for old in [h for h in log.handlers if h.get_name() == HANDLER_NAME]:
        log.removeHandler(old)
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(logging.Formatter(FORMAT))
    log.addHandler(handler)
    log.setLevel(level.upper())
    return True


def ms_since(start: float) -> float:
    """Milliseconds from ``start`` (a ``time.perf_counter()`` reading) to now."""
    import time

    return (time.perf_counter() - start) * 1e3


__all__ = ["DEBUG", "FORMAT", "HANDLER_NAME", "INFO", "ROOT", "configure", "logger_for", "ms_since"]
