"""Layer 1: ctypes declarations of the CUDA driver, NVRTC and nvJitLink, and library discovery.

Nothing here is loaded on import: ``driver()``, ``nvrtc()`` and ``nvjitlink()`` (in the submodules)
find and bind their library on first call. No policy lives here (no cuInit, no contexts).
"""
