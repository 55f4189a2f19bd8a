"""A stdio server's package pin: what differs between the pinned package and the one its
command runs now is named (version, files changed, added, removed), and nothing when the
digest is the same or nothing could be pinned."""

from __future__ import annotations

from typing import Any

from nightowl.harness.tool_pins import package_change, package_label


def _package(version: str = "1.0.0", **files: str) -> dict[str, Any]:
    listed = files or {"server.py": "aa", "tools.py": "bb"}
    return {
        "kind": "pypi",
        "name": "mcp-server-notes",
        "version": version,
        "integrity": "",
        "root": "/home/agent/.mcp/python",
        "files": listed,
        "digest": "-".join(f"{k}={v}" for k, v in sorted(listed.items())),
    }


def test_the_same_package_is_no_change() -> None:
    assert package_change(_package(), _package()) is None
    assert package_change(None, _package()) is None  # nothing pinned yet
    assert package_change({"kind": "none"}, {"kind": "none"}) is None
    # Nothing could be pinned when it was added, and now a package runs: that is a change.
    assert str(package_change({"kind": "none"}, _package())).startswith("it was nothing to pin")


def test_a_changed_file_a_new_version_and_added_and_removed_files_are_named() -> None:
    pinned = _package()
    tampered = _package(**{"server.py": "zz", "tools.py": "bb"})
    assert package_change(pinned, tampered) == "changed: server.py"
    upgraded = _package("1.1.0", **{"server.py": "aa", "extra.py": "cc"})
    assert package_change(pinned, upgraded) == (
        "version 1.0.0 -> 1.1.0; added: extra.py; removed: tools.py"
    )
    many = _package(**{f"f{n:02d}.py": "x" for n in range(12)})
    assert str(package_change(_package(**{"f00.py": "y"}), many)).endswith("f08.py and 3 more")


def test_another_package_or_none_at_all_is_a_change() -> None:
    pinned = _package()
    gone = {"kind": "none"}
    assert package_change(pinned, gone) == (
        f"it was {package_label(pinned)}; now it is "
        "nothing to pin (the command names no file in the computer)"
    )
    assert package_label(pinned).startswith("pypi mcp-server-notes 1.0.0, 2 file(s), sha256 ")
    assert package_label(None) == ""
