"""Memory: profile facts, the dated work log, notes, skills, search and the memory pass."""
