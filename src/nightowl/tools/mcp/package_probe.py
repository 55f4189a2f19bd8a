"""What package a stdio connector's command runs, and a digest of its files.

Runs inside the owner's computer before the server starts, as the computer's own user, in the
system's Python (`/usr/bin/python3 -I -S -c <this source> ARGV...`), so it uses the standard
library only and must not import nightowl. It prints one JSON object:

- `kind`: `npm` (a script inside a folder with a package.json), `pypi` (`python -m MODULE`, or
  a script, of an installed distribution: its RECORD lists the files), `file` (a script of no
  package: the script alone), or `none` (nothing in the home or on the system it can name,
  e.g. `npx some-package`, which fetches at each start and cannot be pinned);
- `name`, `version`, `integrity` (npm's recorded `integrity` of the tarball, from
  `node_modules/.package-lock.json`, when there is one), `root` (the package's folder);
- `files`: each file's path (relative to `root`) and its SHA-256, and `digest` over them.

The caller compares it with the pin taken when the owner added the connector
(harness/tool_pins.py: `package_change`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

TYPE_CHECKING = False  # not typing's: the probe starts without it
if TYPE_CHECKING:
    from typing import Any

MAX_FILES = 5000
MAX_BYTES = 256 * 1024 * 1024
SKIPPED_PARTS = ("__pycache__",)
INTERPRETERS = ("node", "nodejs", "python", "python3")


class TooBig(Exception):
    pass


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _digest(files: dict[str, str]) -> str:
    joined = "\n".join(f"{path} {files[path]}" for path in sorted(files))
    return hashlib.sha256(joined.encode()).hexdigest()


def _walk(root: str) -> dict[str, str]:
    files: dict[str, str] = {}
    total = 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_PARTS)
        for name in names:
            if name.endswith(".pyc"):
                continue
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            total += os.path.getsize(path)
            if len(files) >= MAX_FILES or total > MAX_BYTES:
                raise TooBig(root)
            files[os.path.relpath(path, root)] = _sha256(path)
    return files


def _split(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """The command's environment (from a leading `env A=B …`), interpreter and the rest."""
    env: dict[str, str] = {}
    rest = list(argv)
    if rest and os.path.basename(rest[0]) == "env":
        rest.pop(0)
        while rest and "=" in rest[0] and not rest[0].startswith("-"):
            key, _, value = rest.pop(0).partition("=")
            env[key] = value
    return env, rest


def _absolute(path: str, home: str) -> str:
    return os.path.normpath(path if os.path.isabs(path) else os.path.join(home, path))


def _json_object(path: str) -> dict[str, Any]:
    """A JSON file's object ({} when it is missing, unreadable or not an object)."""
    try:
        with open(path, encoding="utf-8") as handle:
            found = json.load(handle)
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def _npm(script: str) -> dict[str, Any] | None:
    folder = os.path.dirname(script)
    while folder and folder != os.path.dirname(folder):
        manifest = os.path.join(folder, "package.json")
        package = _json_object(manifest) if os.path.isfile(manifest) else {}
        # A package.json without a name (`{"type": "module"}` in dist/) is not the package's.
        if package.get("name"):
            name = str(package["name"])
            return {
                "kind": "npm",
                "name": name,
                "version": str(package.get("version") or ""),
                "integrity": _npm_integrity(folder, name),
                "root": folder,
                "files": _walk(folder),
            }
        folder = os.path.dirname(folder)
    return None


def _npm_integrity(folder: str, name: str) -> str:
    """npm's recorded integrity of the package's tarball, if a lock file names it."""
    here = folder
    while here and here != os.path.dirname(here):
        if os.path.basename(here) == "node_modules":
            for lock in (
                os.path.join(here, ".package-lock.json"),
                os.path.join(os.path.dirname(here), "package-lock.json"),
            ):
                packages = _json_object(lock).get("packages")
                entry = packages.get(f"node_modules/{name}") if isinstance(packages, dict) else None
                if isinstance(entry, dict) and entry.get("integrity"):
                    return str(entry["integrity"])
            return ""
        here = os.path.dirname(here)
    return ""


def _python_paths(env: dict[str, str], interpreter: str, home: str) -> list[str]:
    paths = [_absolute(p, home) for p in env.get("PYTHONPATH", "").split(":") if p]
    venv = os.path.dirname(os.path.dirname(_absolute(interpreter, home)))
    if os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        lib = os.path.join(venv, "lib")
        for entry in sorted(os.listdir(lib)) if os.path.isdir(lib) else ():
            paths.append(os.path.join(lib, entry, "site-packages"))
    import site

    paths += [site.getusersitepackages(), *site.getsitepackages()]
    return [p for p in paths if os.path.isdir(p)]


def _distribution(top: str, folder: str) -> tuple[str, list[str]] | None:
    """The installed distribution in `folder` whose RECORD holds the package `top`."""
    for entry in sorted(os.listdir(folder)):
        if not entry.endswith(".dist-info"):
            continue
        record = os.path.join(folder, entry, "RECORD")
        try:
            with open(record, encoding="utf-8") as handle:
                listed = [line.split(",")[0] for line in handle if line.strip()]
        except OSError:
            continue
        if any(path.split("/")[0] in (top, top + ".py") for path in listed):
            return entry, listed
    return None


def _metadata(folder: str, entry: str) -> tuple[str, str]:
    name, version = entry[: -len(".dist-info")], ""
    try:
        with open(os.path.join(folder, entry, "METADATA"), encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("Name:"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("Version:"):
                    version = line.split(":", 1)[1].strip()
                elif not line.strip():
                    break
    except OSError:
        pass
    return name, version


def _pypi(top: str, paths: list[str]) -> dict[str, Any] | None:
    for folder in paths:
        found = _distribution(top, folder)
        if found is None:
            continue
        entry, listed = found
        files: dict[str, str] = {}
        total = 0
        for relative in listed:
            path = os.path.normpath(os.path.join(folder, relative))
            if relative.endswith(".pyc") or relative == f"{entry}/RECORD":
                continue
            if not path.startswith(folder + os.sep) or not os.path.isfile(path):
                continue  # a script installed elsewhere (bin/): not part of the package here
            total += os.path.getsize(path)
            if len(files) >= MAX_FILES or total > MAX_BYTES:
                raise TooBig(folder)
            files[relative] = _sha256(path)
        name, version = _metadata(folder, entry)
        return {
            "kind": "pypi",
            "name": name,
            "version": version,
            "integrity": "",
            "root": folder,
            "files": files,
        }
    return None


PYTHON_VALUE_FLAGS = ("-W", "-X", "-c", "--check-hash-based-pycs")
NODE_VALUE_FLAGS = (
    "-r",
    "--require",
    "--import",
    "--loader",
    "--experimental-loader",
    "-e",
    "--eval",
    "-p",
    "--print",
    "--env-file",
    "--conditions",
    "-C",
    "--title",
)


def _operands(args: list[str], value_flags: tuple[str, ...]) -> list[str]:
    """The arguments that are not options (nor an option's value)."""
    found, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in value_flags:
            skip = True
        elif not arg.startswith("-"):
            found.append(arg)
    return found


def _shebang(script: str) -> str:
    try:
        with open(script, "rb") as handle:
            first = handle.readline(512)
    except OSError:
        return ""
    if not first.startswith(b"#!"):
        return ""
    words = first[2:].decode("utf-8", "replace").split()
    return words[0] if words else ""


def _console_script(script: str) -> str | None:
    """The top-level module a Python console script (`from MODULE import main`) runs."""
    if "python" not in os.path.basename(_shebang(script)):
        return None
    try:
        with open(script, encoding="utf-8", errors="replace") as handle:
            text = handle.read(4096)
    except OSError:
        return None
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 4 and words[0] == "from" and words[2] == "import":
            return words[1].split(".")[0]
    return None


def _local(path: str) -> dict[str, Any]:
    """A module in the home: the file, or every file of the folder."""
    folder = os.path.isdir(path)
    return {
        "kind": "file",
        "name": os.path.basename(path),
        "version": "",
        "integrity": "",
        "root": path if folder else os.path.dirname(path),
        "files": _walk(path) if folder else {os.path.basename(path): _sha256(path)},
    }


def probe(argv: list[str], home: str) -> dict[str, Any]:
    env, rest = _split(argv)
    if not rest:
        return {"kind": "none"}
    interpreter = os.path.basename(rest[0])
    args = rest[1:]
    if interpreter.startswith("python"):
        if "-m" in args and args.index("-m") + 1 < len(args):
            top = args[args.index("-m") + 1].split(".")[0]
            # The server starts in the home, which comes first on its path: a module of
            # that name there is what runs.
            # (A folder without __init__.py is only a namespace portion: an installed
            # package later on the path still wins.)
            if os.path.isfile(os.path.join(home, top + ".py")):
                return _local(os.path.join(home, top + ".py"))
            if os.path.isfile(os.path.join(home, top, "__init__.py")):
                return _local(os.path.join(home, top))
            found = _pypi(top, _python_paths(env, rest[0], home))
            return found if found is not None else {"kind": "none"}
        scripts = _operands(args, PYTHON_VALUE_FLAGS)
    elif interpreter in INTERPRETERS:
        scripts = _operands(args, NODE_VALUE_FLAGS)
    else:
        scripts = [rest[0]]  # the command itself: a script or a program in the home
    if not scripts:
        return {"kind": "none"}
    script = _absolute(scripts[0], home)
    if not os.path.isfile(script):
        return {"kind": "none"}
    if interpreter in ("node", "nodejs") or script.endswith((".js", ".mjs", ".cjs")):
        found = _npm(script)
        if found is not None:
            return found
    entry = _console_script(script)
    if entry is not None:  # a distribution's console script: the distribution runs
        found = _pypi(entry, _python_paths(env, _shebang(script) or "python3", home))
        if found is not None:
            found["files"]["(script) " + script] = _sha256(script)
            return found
    return {
        "kind": "file",
        "name": os.path.basename(script),
        "version": "",
        "integrity": "",
        "root": os.path.dirname(script),
        "files": {os.path.basename(script): _sha256(script)},
    }


def main() -> None:
    home = os.environ.get("HOME") or os.getcwd()
    found: dict[str, Any]
    try:
        found = probe(sys.argv[1:], home)
    except TooBig as error:
        found = {"kind": "too_big", "root": str(error)}
    except (OSError, ValueError) as error:
        found = {"kind": "error", "error": f"{type(error).__name__}: {error}"}
    if found.get("files") is not None:
        found["digest"] = _digest(found["files"])
    sys.stdout.write(json.dumps(found, sort_keys=True))


if __name__ == "__main__":
    main()
