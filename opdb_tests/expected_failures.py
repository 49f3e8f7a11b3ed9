"""Expected failures (generated below)."""

SKIP: dict[str, str] = {}

EXPECTED: dict[tuple[str, str], str] = {}
