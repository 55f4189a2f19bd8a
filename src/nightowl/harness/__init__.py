"""Pure agent-loop logic: prompt assembly and next-action decisions. No I/O, no clock."""
