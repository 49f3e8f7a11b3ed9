"""The docs and README stay true: their snippets and doctests run, their tables match code."""
