"""Target parsing and validation against each toolkit's NVRTC."""

from __future__ import annotations

import pytest
from conftest import Toolkit

from tilejit.compiler.targets import Target, check_supported, parse_target
from tilejit.errors import TargetError


@pytest.mark.parametrize(
    "spelling", ["sm_90", "sm90", "90", 90, (9, 0), "compute_90", "SM_90", " sm_90 ", Target(9, 0)]
)
def test_spellings_of_sm_90(spelling: object) -> None:
    t = parse_target(spelling)  # type: ignore[arg-type]
    assert t == Target(9, 0, "")
    assert (t.sm, t.compute, t.number, str(t)) == ("sm_90", "compute_90", 90, "sm_90")


@pytest.mark.parametrize(
    ("spelling", "major", "minor", "suffix", "sm"),
    [
        ("sm_70", 7, 0, "", "sm_70"),
        ("sm_86", 8, 6, "", "sm_86"),
        ("sm_90a", 9, 0, "a", "sm_90a"),
        ("compute_90a", 9, 0, "a", "sm_90a"),
        ("sm_100f", 10, 0, "f", "sm_100f"),
        ("sm_100a", 10, 0, "a", "sm_100a"),
        (120, 12, 0, "", "sm_120"),
        ("121", 12, 1, "", "sm_121"),
        ((10, 3, "f"), 10, 3, "f", "sm_103f"),
    ],
)
def test_parse(spelling: object, major: int, minor: int, suffix: str, sm: str) -> None:
    t = parse_target(spelling)  # type: ignore[arg-type]
    assert (t.major, t.minor, t.suffix, t.sm) == (major, minor, suffix, sm)
    assert t.compute == "compute_" + sm[3:]


def test_targets_order_by_architecture() -> None:
    assert sorted([parse_target(s) for s in ("sm_90", "sm_75", "sm_120", "sm_80")]) == [
        parse_target(s) for s in ("sm_75", "sm_80", "sm_90", "sm_120")
    ]


@pytest.mark.parametrize(
    ("bad", "why"),
    [
        ("sm_9", "expected e.g."),
        ("sm_1000", "expected e.g."),
        ("sm90x", "expected e.g."),
        ("gfx90a", "expected e.g."),
        ("", "expected e.g."),
        ("sm_05", "not an architecture number"),
        ("sm_80a", "start at sm_90a"),
        ("sm_90f", "start at sm_100f"),
        (True, "expected an architecture"),
        (9.0, "of type float"),
        ((9,), "(major, minor)"),
        ((9, 10), "minor version must be an int in 0..9"),
        ((9, 0, "x"), "(major, minor)"),
        (None, "of type NoneType"),
    ],
)
def test_malformed_targets_name_the_input_and_give_examples(bad: object, why: str) -> None:
    with pytest.raises(TargetError) as info:
        parse_target(bad)  # type: ignore[arg-type]
    msg = str(info.value)
    assert repr(bad) in msg
    assert why in msg


def test_target_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="sm_90"):
        parse_target("sm-ninety")


def test_check_supported_against_each_toolkit(toolkit: Toolkit) -> None:
    from tilejit.bindings.nvrtc import load_nvrtc

    lib = load_nvrtc(str(toolkit.nvrtc))
    archs = lib.supported_archs()
    assert {80, 90} <= set(archs)
    check_supported(parse_target("sm_80"), lib)
    check_supported(parse_target("sm_90"), lib)
    with pytest.raises(TargetError) as info:
        check_supported(parse_target("sm_990"), lib)
    msg = str(info.value)
    version = f"{lib.version[0]}.{lib.version[1]}"
    assert f"sm_990 is not supported by NVRTC {version}" in msg
    assert lib.path in msg
    for a in archs:
        assert f"sm_{a}" in msg
    if lib.version < (12, 0):
        with pytest.raises(TargetError, match=r"sm_90a needs NVRTC 12\.0 or newer"):
            check_supported(parse_target("sm_90a"), lib)
    else:
        check_supported(parse_target("sm_90a"), lib)
    if 100 in archs and lib.version < (12, 9):
        with pytest.raises(TargetError, match=r"sm_100f needs NVRTC 12\.9 or newer"):
            check_supported(parse_target("sm_100f"), lib)
    elif 100 in archs:
        check_supported(parse_target("sm_100f"), lib)
