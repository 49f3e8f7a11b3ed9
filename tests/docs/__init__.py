"""The docs and README stay true: snippets and doctests run, tables and figures match code."""
