"""Whether a mail that says it is from the owner is: a DKIM signature of the owner's domain
that verifies (RFC 6376). The From header alone is anyone's to write.

The signing key is looked up in DNS, or taken from the channel's pinned keys (`dkim_keys`:
`{"<selector>._domainkey.<domain>": "v=DKIM1; k=rsa; p=…"}`) for a private domain or to pin
a provider's key.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable

import dkim

log = logging.getLogger(__name__)


def _domain_of(signature: bytes) -> str:
    found = re.search(rb"(?:^|;)\s*d\s*=\s*([^;\s]+)", re.sub(rb"\s+", b" ", signature))
    return found.group(1).decode("ascii", "replace").lower() if found else ""


def _lookup(pinned: dict[str, str]) -> Callable[..., bytes | None]:
    keys = {name.lower().rstrip("."): value for name, value in pinned.items()}

    def dnsfunc(name: bytes, timeout: float = 5) -> bytes | None:
        wanted = name.decode("ascii", "replace").lower().rstrip(".")
        if wanted in keys:
            return keys[wanted].encode()
        if keys:  # pinned keys only: nothing from DNS
            return None
        return dkim.dnsplug.get_txt(name, timeout=timeout)  # type: ignore[no-any-return]

    return dnsfunc


def signed_by(raw: bytes, domain: str, pinned: dict[str, str] | None = None) -> bool:
    """Whether a DKIM signature of `domain` on the mail verifies."""
    message = dkim.DKIM(raw)
    signatures = [
        value for name, value in dkim.rfc822_parse(raw)[0] if name.lower() == b"dkim-signature"
    ]
    lookup = _lookup(pinned or {})
    for index, signature in enumerate(signatures):
        if _domain_of(signature) != domain.lower():
            continue
        try:
            if message.verify(idx=index, dnsfunc=lookup):
                return True
        except dkim.DKIMException as error:
            log.info("a DKIM signature did not verify", extra={"error": str(error)})
    return False
