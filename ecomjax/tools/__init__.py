"""Tool execution over the episode world (SPEC §4.7, §5)."""
