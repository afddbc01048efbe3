"""The front end: a Python kernel's AST to typed tile IR (``translate.translate``).

``source`` parses and locates, ``values`` and ``scope`` hold what names mean, ``builder`` emits ops
with the typing rules, ``handlers`` translates statements and expressions, ``calls`` implements
the ``tj.*`` builtins; ``translate`` is the entry point the api layer uses.
"""
