"""Lowering rules for matrix multiply-accumulate (``mma``, ``@``)."""

from __future__ import annotations
