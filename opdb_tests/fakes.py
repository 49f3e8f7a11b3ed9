"""Test doubles for the op-database tests: an entry whose OpInfo is a changed copy."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from opdb_tests.cases import Entry


@dataclasses.dataclass(frozen=True)
class _ChangedEntry(Entry):
    """An entry whose OpInfo is a given copy (compare=False: OpInfos do not hash)."""

    changed: Any = dataclasses.field(default=None, compare=False)

    @property
    def opinfo(self) -> Any:
        return self.changed


def changed_entry(real: Entry, key: str | None = None, **attributes: Any) -> Entry:
    """``real`` with a copy of its OpInfo whose ``attributes`` are replaced (``op``,
    ``sample_inputs_func``...), under ``key`` (default: the same key)."""
    op = copy.copy(real.opinfo)
    for name, value in attributes.items():
        setattr(op, name, value)
    return _ChangedEntry(key or real.key, real.index, real.dtype, op)
