"""tilejit IR ``Function`` → Tile IR ``TModule``: ``core`` is the frame and the rule registry; each other
module holds the rules for one kind of op."""

from tilejit.backends.tileir.lower.core import lower_function

__all__ = ["lower_function"]
