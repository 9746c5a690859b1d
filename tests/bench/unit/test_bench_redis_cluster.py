"""The Redis Cluster section of docs/benchmarks.md: written by its own command
(bench/redis_cluster.py) and kept by the full run's rewrite of the page."""

from __future__ import annotations

from bench.redis_cluster import BEGIN, END, kept_section, replace_section


def test_the_section_is_appended_then_replaced_and_kept() -> None:
    page = "# Benchmarks\n\nthe full run's tables\n"
    first = replace_section(page, f"{BEGIN}\nold figures\n{END}")
    assert first.startswith(page.rstrip("\n")) and first.endswith(f"{END}\n")
    second = replace_section(first, f"{BEGIN}\nnew figures\n{END}")
    assert "old figures" not in second and second.count(BEGIN) == 1 and "the full run's tables" in second
    assert kept_section(second) == f"{BEGIN}\nnew figures\n{END}"
    assert kept_section(page) is None
