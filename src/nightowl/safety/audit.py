"""The audit log as the safety gate writes it; stored by `store/audit.py`.

Only `engine/gate.py` still imports it from here (as `audit.record`); other callers use
`nightowl.store.audit` directly, and so can the gate, which retires this module.
"""

from __future__ import annotations

from nightowl.store.audit import AuditInfo, audit_log, record_audit_event

record = record_audit_event

__all__ = ["AuditInfo", "audit_log", "record"]
