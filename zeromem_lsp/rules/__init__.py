"""Rules: the one registry (`registry`), the kinds table, and the modules that turn an analysis into findings."""
