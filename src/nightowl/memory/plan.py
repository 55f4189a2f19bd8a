"""The memory pass's plan, worked out on a copy of the profile (pure): apply the model's
operations to the facts it was shown, and, when the result is over the bounds, consolidate.

The pass sees facts by number. An operation naming a number it was not shown is ignored (and
reported), so a fact the pass never saw is never touched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from nightowl.memory.facts import MAX_FACT_CHARS, MAX_FACTS, MAX_PROFILE_CHARS, NO_SECRETS
from nightowl.safety.policy import SECRET_REF

TRUST_RANK = {"untrusted": 0, "member": 1, "owner": 2}


@dataclass(frozen=True)
class Item:
    """A fact in the plan: shown (with its stored id) or proposed by this pass (`fact_id`
    None). `number` is how the pass refers to it."""

    number: int
    text: str
    trust: str
    fact_id: str | None = None
    message_id: str | None = None
    use_count: int = 0
    last_used: float = 0.0  # when it was last used or made (seconds since the epoch)


@dataclass(frozen=True)
class Operations:
    """What a pass (or a consolidation) asks for."""

    add: list[tuple[str, str | None]] = field(default_factory=list)  # (text, source message)
    replace: list[tuple[int, str, str | None]] = field(default_factory=list)
    remove: list[int] = field(default_factory=list)
    used: list[int] = field(default_factory=list)
    log: str = ""


@dataclass
class Outcome:
    """The plan's result and what it ignored or dropped."""

    items: list[Item]
    ignored: list[str] = field(default_factory=list)
    dropped: list[Item] = field(default_factory=list)


def clean(text: str) -> str:
    """A proposed fact's text on one line."""
    return " ".join(str(text).split())


def size(items: Sequence[Item]) -> tuple[int, int]:
    """(facts, characters)."""
    return len(items), sum(len(item.text) for item in items)


def fits(items: Sequence[Item]) -> bool:
    """Whether the facts are within 100 facts and 4,000 characters."""
    count, chars = size(items)
    return count <= MAX_FACTS and chars <= MAX_PROFILE_CHARS


def apply_operations(
    items: Sequence[Item],
    ops: Operations,
    trust_of: dict[str, str],
    default_trust: str,
    now: float,
) -> Outcome:
    """`items` after `ops`. New facts take the trust of the message they cite (or the turn's
    least trusted content when they cite none); an unknown number is ignored."""
    by_number = {item.number: item for item in items}
    outcome = Outcome(list(items))
    next_number = max(by_number, default=0) + 1

    def source(message: str | None) -> tuple[str, str | None]:
        if message is not None and message in trust_of:
            return trust_of[message], message
        return default_trust, None

    gone = set()
    for number in ops.remove:
        if number not in by_number:
            outcome.ignored.append(f"remove {number}: not a fact it was shown")
            continue
        gone.add(number)
    changed: dict[int, Item] = {}
    for number, text, message in ops.replace:
        if number not in by_number or number in gone:
            outcome.ignored.append(f"replace {number}: not a fact it was shown")
            continue
        cleaned, refused = _cleaned(text)
        if refused:
            outcome.ignored.append(f"replace {number}: {refused}")
            continue
        trust, cited = source(message)
        old = by_number[number]
        # A rewrite is as trusted as the least trusted of what it was drawn from.
        trust = min(trust, old.trust, key=lambda t: TRUST_RANK.get(t, 0))
        changed[number] = replace(
            old, text=cleaned, trust=trust, message_id=cited or old.message_id
        )
    outcome.items = [changed.get(i.number, i) for i in items if i.number not in gone]
    known = {item.text.lower() for item in outcome.items}
    for text, message in ops.add:
        cleaned, refused = _cleaned(text)
        if refused:
            outcome.ignored.append(f"add: {refused}")
            continue
        if cleaned.lower() in known:
            continue  # already known, word for word
        known.add(cleaned.lower())
        trust, cited = source(message)
        outcome.items.append(Item(next_number, cleaned, trust, None, cited, 0, now))
        next_number += 1
    used = set(ops.used)
    outcome.items = [
        replace(i, use_count=i.use_count + 1, last_used=now) if i.number in used else i
        for i in outcome.items
    ]
    return outcome


def least_used_first(item: Item) -> tuple[int, int, float, int]:
    """Eviction order: untrusted before trusted, then fewest uses, then longest unused."""
    return (TRUST_RANK.get(item.trust, 0), item.use_count, item.last_used, item.number)


def drop_least_used(items: Sequence[Item]) -> tuple[list[Item], list[Item]]:
    """Drop facts, least used first, until the rest fit; (kept, dropped)."""
    kept = list(items)
    dropped: list[Item] = []
    for victim in sorted(items, key=least_used_first):
        if fits(kept):
            break
        kept.remove(victim)
        dropped.append(victim)
    return kept, dropped


def _cleaned(text: str) -> tuple[str, str]:
    """A fact's text as the model wrote it, cleaned; and why it is refused ("": it is not)."""
    cleaned = clean(text)
    if not cleaned or len(cleaned) > MAX_FACT_CHARS:
        return cleaned, f"text empty or over {MAX_FACT_CHARS} characters"
    if SECRET_REF.search(cleaned):
        return cleaned, NO_SECRETS
    return cleaned, ""
