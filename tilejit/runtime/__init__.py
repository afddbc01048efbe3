"""Layer 2: devices, contexts, streams, events, memory, arrays, interop, modules, launches, snapshots and timing.

Nothing is imported here: each concept is its own module (``device``, ``context``, ``stream``,
``event``, ``memory``, ``array``, ``interop``, ``module``, ``launch``, ``snapshot``, ``bench``),
loaded when first used.
"""
