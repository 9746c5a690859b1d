"""onceonly's benchmark suite: every comparison in one run, against the same
local servers. Run it with ``python -m bench --out docs/`` (see docs/benchmarks.md)."""
