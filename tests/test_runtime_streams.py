"""CPU tests of the runtime pieces that need no GPU: foreign stream objects, the current stream, and
``device_count()`` / ``Device`` when no driver can be loaded."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tilejit.runtime.stream import Stream, current_stream, set_current_stream, stream_handle


class ProtocolMethod:
    def __cuda_stream__(self) -> tuple[int, int]:
        return (0, 0x1234)


class ProtocolAttribute:
    __cuda_stream__ = (0, 0x5678)


class TorchLike:
    cuda_stream = 0x9ABC


class ProtocolValue:
    def __init__(self, value: object) -> None:
        self.value = value

    def __cuda_stream__(self) -> object:
        return self.value


class TorchValue:
    def __init__(self, handle: object) -> None:
        self.cuda_stream = handle


class BadProtocol:
    def __cuda_stream__(self) -> int:
        return 7


def test_foreign_streams() -> None:
    assert stream_handle(0x42) == 0x42
    assert stream_handle(ProtocolMethod()) == 0x1234
    assert stream_handle(ProtocolAttribute()) == 0x5678
    assert stream_handle(TorchLike()) == 0x9ABC
    s = Stream.from_external(TorchLike())
    assert s.handle == 0x9ABC and s.__cuda_stream__() == (0, 0x9ABC)
    assert Stream.from_external(s) is s
    s.close()  # not ours: nothing is destroyed, the handle stays
    assert s.handle == 0x9ABC
    assert Stream.legacy().handle == 0


@pytest.mark.parametrize(
    ("obj", "error", "pattern"),
    [
        (True, TypeError, "got a bool"),
        (-3, ValueError, "cannot be negative"),
        (1 << 64, ValueError, "64-bit address"),
        (object(), TypeError, r"expected a stream: .*got builtins.object"),
        (BadProtocol(), TypeError, r"must give \(version, handle\)"),
        (ProtocolValue((0, -1)), ValueError, r"handle of ProtocolValue.__cuda_stream__: .*cannot be negative"),
        (ProtocolValue((0, 1 << 70)), ValueError, r"handle of ProtocolValue.__cuda_stream__: .*64-bit address"),
        (ProtocolValue((7, 0x10)), ValueError, r"gave protocol version 7; tilejit reads version 0"),
        (ProtocolValue((0, 3.9)), TypeError, r"must be an int handle, got float 3.9"),
        (ProtocolValue((0, "16")), TypeError, r"must be an int handle, got str '16'"),
        (ProtocolValue((0, True)), TypeError, r"must be an int handle, got a bool"),
        (TorchValue(-5), ValueError, r"TorchValue.cuda_stream: a stream handle cannot be negative"),
    ],
)
def test_bad_streams(obj: object, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        stream_handle(obj)


def test_current_stream_round_trip() -> None:
    assert stream_handle(None) == current_stream().handle == 0
    previous = set_current_stream(ProtocolMethod())
    try:
        assert current_stream().handle == 0x1234
        assert stream_handle(None) == 0x1234
    finally:
        set_current_stream(previous)
    assert stream_handle(None) == 0
    set_current_stream(None)
    assert current_stream() is Stream.legacy()


def test_a_closed_stream_is_refused_and_stops_being_current(monkeypatch: pytest.MonkeyPatch) -> None:
    """Work on a closed stream would go to whatever its handle means next (a crash was seen): refused."""
    from types import SimpleNamespace

    from tilejit.runtime import stream as stream_mod

    destroyed: list[int] = []
    fake = SimpleNamespace(cuStreamDestroy=lambda h: destroyed.append(h.value) or 0,
                           check=lambda status, name: None)
    monkeypatch.setattr(stream_mod, "initialized_driver", lambda: fake)
    s = Stream._wrap(0x5010)
    s._owned = True  # as if Stream() had created it
    previous = set_current_stream(s)
    try:
        assert stream_handle(None) == 0x5010
        s.close()
        assert destroyed == [0x5010]
        assert current_stream() is Stream.legacy() and stream_handle(None) == 0
        assert "closed" in repr(s)
        for use in (lambda: stream_handle(s), s.synchronize, s.query, s.__cuda_stream__):
            with pytest.raises(ValueError, match=r"was closed; use another stream"):
                use()
        s.close()  # twice is fine
        assert destroyed == [0x5010]
    finally:
        set_current_stream(previous)


def test_no_driver_means_zero_devices_and_a_clear_error(tmp_path: object) -> None:
    code = textwrap.dedent(
        """
        from tilejit.errors import LibraryNotFoundError
        from tilejit.runtime.device import Device, device_count
        assert device_count() == 0
        try:
            Device(0)
        except LibraryNotFoundError as exc:
            assert "/nonexistent/libcuda.so.1" in str(exc), str(exc)
            print("ok")
        """
    )
    env = dict(os.environ, TILEJIT_CUDA_DRIVER="/nonexistent/libcuda.so.1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
