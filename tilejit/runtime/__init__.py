"""Layer 2: devices, contexts, streams, events, memory, arrays, interop, modules and launches.

Nothing is imported here: each concept is its own module (``device``, ``context``, ``stream``,
``event``, ``memory``, ``array``, ``interop``, ``module``, ``launch``), loaded when first used.
"""
