"""Safety: provenance and taint, the auto reviewer, approvals, drafts, secrets and the audit log."""
