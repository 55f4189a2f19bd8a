"""Finding secret values in text, in the forms a tool commonly echoes them (pure).

A secret rarely comes back exactly as it went out: an HTTP client prints it base64-encoded in
a basic-auth header (`user:secret`, `:secret` or the value alone, at any alignment), a JSON
body escapes its quotes, slashes and non-ASCII letters (again for each level of JSON in a JSON
string), a URL percent-encodes it (in upper, lower or mixed case, some characters or all), a
debug dump shows it in hex. One regular expression per set of secrets matches every one of
these forms, character by character, so the forms may even mix.

The expression works on bytes (a command's output need not be UTF-8); `redact` applies it to
text through UTF-8; `stream()` to a stream in chunks (safety/stream_filter.py).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nightowl.safety.stream_filter import StreamRedactor, reference

MIN_SECRET_CHARS = 4  # a shorter value would redact ordinary words; `secrets set` refuses it
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_B64_STD = _B64 + "+/"
_B64_URL = _B64 + "-_"
_JSON_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n"}
_JSON_SHORT |= {"\r": "\\r", "\t": "\\t"}


def _nibble(value: int) -> bytes:
    """A hex digit in either case."""
    digit = "0123456789abcdef"[value]
    if digit.isdigit():
        return digit.encode()
    return f"[{digit}{digit.upper()}]".encode()


def _byte_hex(value: int) -> bytes:
    return _nibble(value >> 4) + _nibble(value & 15)


# A JSON escape's backslash, doubled once per level of JSON inside JSON (up to eight); and
# what follows the first one.
_MORE_BACKSLASHES = rb"\\{0,7}"
Form = tuple[int, bytes]  # a pattern as its first (literal) byte and the pattern after it


def _json_unit_rest(code: int) -> bytes:
    r"""What follows the first backslash of `\uXXXX` (at any depth of JSON in JSON), the hex
    digits in either case."""
    digits = b"".join(_nibble((code >> shift) & 15) for shift in (12, 8, 4, 0))
    return _MORE_BACKSLASHES + b"u" + digits


def _char_forms(char: str) -> list[Form]:
    """One character of a secret as it may appear: itself, percent-encoded (any case), `+`
    for a space, or JSON-escaped."""
    raw = char.encode("utf-8", "surrogatepass")
    forms = [
        (raw[0], re.escape(raw[1:])),
        (ord("%"), _byte_hex(raw[0]) + b"".join(b"%" + _byte_hex(b) for b in raw[1:])),
    ]
    if char == " ":
        forms.append((ord("+"), b""))
    if char in _JSON_SHORT:  # \" \\ \/ \n ..., at any depth of JSON in JSON
        forms.append((ord("\\"), _MORE_BACKSLASHES + re.escape(_JSON_SHORT[char][1:].encode())))
    code = ord(char)
    if code > 0xFFFF:  # a surrogate pair in JSON
        code -= 0x10000
        high, low = 0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)
        forms.append((ord("\\"), _json_unit_rest(high) + rb"\\" + _json_unit_rest(low)))
    elif code >= 0x7F or code < 0x20 or char in "\"\\/'<>&":
        forms.append((ord("\\"), _json_unit_rest(code)))
    return forms


def _pattern(form: Form) -> bytes:
    return re.escape(bytes([form[0]])) + form[1]


def _b64_chars(mask: int, bits: int) -> list[str]:
    """The base64 characters (standard and URL-safe) whose 6 bits agree with `bits` where
    `mask` is set."""
    return sorted(
        {alphabet[i] for i in range(64) if i & mask == bits for alphabet in (_B64_STD, _B64_URL)}
    )


def _b64_forms(raw: bytes, offset: int) -> list[Form]:
    """The base64 text of any data that holds `raw` starting `offset` bytes into a 3-byte
    group (what comes before and after is unknown): from its first fully known character,
    the characters it fixes, and classes where a character mixes in unknown bits."""
    known_from, known_to = offset * 8, (offset + len(raw)) * 8
    total_bits = -(-(offset + len(raw)) // 3) * 24
    pieces: list[list[str]] = []
    for start in range(0, total_bits, 6):
        mask = bits = 0
        for position in range(start, start + 6):
            mask, bits = mask << 1, bits << 1
            if known_from <= position < known_to:
                index = position - known_from
                mask |= 1
                bits |= (raw[index // 8] >> (7 - index % 8)) & 1
        if mask == 0b111111 or (mask and pieces):
            pieces.append(_b64_chars(mask, bits))
    rest = b"".join(
        re.escape(p[0].encode()) if len(p) == 1 else b"[" + re.escape("".join(p).encode()) + b"]"
        for p in pieces[1:]
    )
    return [(ord(first), rest) for first in pieces[0]] if pieces else []


def value_forms(value: str) -> list[Form]:
    """Patterns that together match the value in every form it commonly takes, each split
    into its first byte and the rest (so forms can be grouped by their first byte)."""
    raw = value.encode("utf-8", "surrogatepass")
    following = b"".join(
        b"(?:" + b"|".join(_pattern(f) for f in _char_forms(c)) + b")" for c in value[1:]
    )
    forms = [(first, rest + following) for first, rest in _char_forms(value[0])]
    first_hex = "0123456789abcdef"[raw[0] >> 4]
    rest_hex = _nibble(raw[0] & 15) + b"".join(_byte_hex(b) for b in raw[1:])
    forms += [(ord(c), rest_hex) for c in sorted({first_hex, first_hex.upper()})]
    for offset in range(3):
        forms += _b64_forms(raw, offset)
    return forms


@functools.lru_cache(maxsize=16)
def _compiled(secrets: tuple[tuple[str, str], ...]) -> re.Pattern[bytes]:
    """The pattern for these secrets, built once per process (a tool call opens the owner's
    secrets each time; building the pattern takes tens of milliseconds)."""
    return re.compile(_grouped(secrets))


def _grouped(secrets: Sequence[tuple[str, str]]) -> bytes:
    """One pattern for every form of every secret: alternatives grouped by their first byte,
    so at each position the engine compares one byte per group, not one per form. Each form
    ends in an empty group named after its secret (`s<i>_<form>`): the match's last group."""
    groups: dict[int, list[bytes]] = {}
    for i, (_, value) in enumerate(secrets):  # longer values first: a value that holds a
        for k, (first, rest) in enumerate(value_forms(value)):  # shorter one goes whole
            groups.setdefault(first, []).append(rest + b"(?P<s%d_%d>)" % (i, k))
    return b"|".join(
        re.escape(bytes([first])) + b"(?:" + b"|".join(rests) + b")"
        for first, rests in groups.items()
    )


def _longest(value: str) -> int:
    """The most bytes any form of the value spans."""
    raw = value.encode("utf-8", "surrogatepass")
    charwise = sum(max(len(c.encode()) * 3, 13 if ord(c) <= 0xFFFF else 26) for c in value)
    return max(charwise, len(raw) * 2, (len(raw) + 4) * 4 // 3 + 4)


@dataclass(frozen=True)
class RedactionSpec:
    """What a redactor needs, as plain data (handed to the filter inside a sandbox)."""

    pattern: str  # the bytes pattern, as latin-1 text
    names: tuple[str, ...]  # the secret of each group `s<i>_<form>`
    holdback: int  # bytes a stream keeps back: the longest form less one
    line_safe: bool  # no secret holds a line break (no form spans a line's end)

    def to_dict(self) -> dict[str, Any]:
        """The spec as JSON-ready data."""
        return {
            "pattern": self.pattern,
            "names": list(self.names),
            "holdback": self.holdback,
            "line_safe": self.line_safe,
        }


class Redactor:
    """Replaces every form of every given secret with `[secret:NAME]`."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        kept = sorted(
            ((n, v) for n, v in secrets.items() if len(v) >= MIN_SECRET_CHARS),
            key=lambda item: (-len(item[1]), item[0]),
        )
        self.names = tuple(name for name, _ in kept)
        self._pattern = _compiled(tuple(kept)) if kept else None
        self.holdback = max((_longest(v) for _, v in kept), default=1) - 1
        self.line_safe = not any("\n" in v for _, v in kept)

    def __bool__(self) -> bool:
        return self._pattern is not None

    def spec(self) -> RedactionSpec:
        """This redactor as data (an empty pattern when there is nothing to redact)."""
        pattern = self._pattern.pattern.decode("latin-1") if self._pattern else ""
        return RedactionSpec(pattern, self.names, self.holdback, self.line_safe)

    def _reference(self, match: re.Match[bytes]) -> bytes:
        return reference(match, self.names)

    def redact_bytes(self, data: bytes) -> bytes:
        """The data with every secret replaced by its reference."""
        if self._pattern is None:
            return data
        return self._pattern.sub(self._reference, data)

    def redact(self, text: str) -> str:
        """The text with every secret replaced by its reference."""
        if self._pattern is None:
            return text
        data = text.encode("utf-8", "surrogatepass")
        redacted = self._pattern.sub(self._reference, data)
        return text if redacted == data else redacted.decode("utf-8", "surrogatepass")

    def finds(self, text: str) -> bool:
        """True when the text holds a secret in any form."""
        return bool(self._pattern and self._pattern.search(text.encode("utf-8", "surrogatepass")))

    def stream(self) -> StreamRedactor:
        """A redactor for one stream, fed in chunks."""
        return StreamRedactor(self._pattern, self.names, self.holdback, self.line_safe)
