"""The package probe as a connector's start runs it (the system's Python, `-I -S -c`, in a
home of its own): what it names for an npm script, a module of an installed distribution, a
console script, a module the home shadows, node's options with values, and odd package files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from nightowl.tools.mcp.packages import PROBE_SOURCE, SYSTEM_PYTHON


def _probe(home: Path, *argv: str) -> dict[str, Any]:
    done = subprocess.run(
        [SYSTEM_PYTHON, "-I", "-S", "-c", PROBE_SOURCE, *argv],
        env={"HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return dict(json.loads(done.stdout))


def _distribution(site: Path, name: str, module: str, version: str = "1.2.3") -> None:
    (site / module).mkdir(parents=True)
    (site / module / "__init__.py").write_text("def main():\n    return 0\n")
    (site / module / "server.py").write_text("print('serving')\n")
    info = site / f"{module}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(
        f"{module}/__init__.py,,\n{module}/server.py,,\n{info.name}/METADATA,,\n"
        f"{info.name}/RECORD,,\n../../bin/{name},,\n"
    )


def test_a_module_of_an_installed_distribution_and_its_console_script(tmp_path: Path) -> None:
    site = tmp_path / "lib"
    _distribution(site, "mcp-notes", "mcp_notes")
    found = _probe(tmp_path, "env", f"PYTHONPATH={site}", "python3", "-m", "mcp_notes")
    assert (found["kind"], found["name"], found["version"]) == ("pypi", "mcp-notes", "1.2.3")
    assert sorted(found["files"]) == [
        "mcp_notes-1.2.3.dist-info/METADATA",
        "mcp_notes/__init__.py",
        "mcp_notes/server.py",
    ]
    script = tmp_path / "bin" / "mcp-notes"
    script.parent.mkdir()
    script.write_text(
        "#!/usr/bin/python3\nimport sys\nfrom mcp_notes import main\nsys.exit(main())\n"
    )
    console = _probe(tmp_path, "env", f"PYTHONPATH={site}", str(script))
    assert console["name"] == "mcp-notes" and f"(script) {script}" in console["files"]
    # A file changed in the distribution changes the digest.
    (site / "mcp_notes" / "server.py").write_text("print('exfiltrating')\n")
    assert _probe(tmp_path, "env", f"PYTHONPATH={site}", str(script))["digest"] != console["digest"]


def test_a_module_in_the_home_shadows_the_installed_one(tmp_path: Path) -> None:
    site = tmp_path / "lib"
    _distribution(site, "mcp-notes", "mcp_notes")
    (tmp_path / "mcp_notes.py").write_text("print('not the package')\n")
    found = _probe(tmp_path, "env", f"PYTHONPATH={site}", "python3", "-m", "mcp_notes")
    assert (found["kind"], found["name"]) == ("file", "mcp_notes.py")


def test_node_scripts_name_their_package_past_options_and_odd_files(tmp_path: Path) -> None:
    package = tmp_path / "node_modules" / "server-notes"
    (package / "dist").mkdir(parents=True)
    (package / "package.json").write_text('{"name": "server-notes", "version": "0.4.0"}')
    (package / "dist" / "package.json").write_text('{"type": "module"}')  # not the package's
    (package / "dist" / "index.js").write_text("console.log('hi')\n")
    (tmp_path / "node_modules" / ".package-lock.json").write_text("[1, 2]")  # not an object
    (tmp_path / "preload.js").write_text("// preloaded\n")
    found = _probe(
        tmp_path, "node", "--require", str(tmp_path / "preload.js"), str(package / "dist/index.js")
    )
    assert (found["kind"], found["name"], found["version"]) == ("npm", "server-notes", "0.4.0")
    assert found["root"] == str(package) and found["integrity"] == ""
    assert sorted(found["files"]) == ["dist/index.js", "dist/package.json", "package.json"]
    assert _probe(tmp_path, "npx", "-y", "server-notes") == {"kind": "none"}
