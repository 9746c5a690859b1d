"""The cost floor's section of docs/benchmarks.md: its verdicts come from the
runs measured (a target met only when every run meets it; simulate's when
every run held its invariants and every run's printed rate, the whole run's,
reached it; the --events rates are shown beside), and the full run keeps the
section as the floor command wrote it."""

from __future__ import annotations

from typing import Any

from bench.delivery_cost import FLOOR_BEGIN, FLOOR_END, floor_section, kept_section, replace_section

META = {"command": "python -m bench.delivery_cost --floor 8 --repeat 1", "when": "2026-12-02 18:00 UTC",
        "commit": "abc1234", "minutes": 1.0, "load": (0.5, 0.5, 0.5), "load_end": (0.6, 0.6, 0.6), "batches": 8}


def run(latency_ms: int, over: float, cpu: float, rep: int = 1, once: bool = True) -> dict[str, Any]:
    return {"latency_ms": latency_ms, "rep": rep, "invocation_ms": latency_ms * over, "over_receiver": over,
            "cpu_ms_per_delivery": cpu, "first_invocation_ms": 130.0, "exactly_once": once, "not_yet_delivered": 0,
            "items": 80}


def simulated(rep: int, whole: float, ordinary: float, ok: bool = True) -> dict[str, Any]:
    return {"rep": rep, "ok": ok, "run": whole, "ordinary": ordinary, "deferred": 30}


def verdicts(section: str) -> list[str]:
    return [line.rsplit("|", 2)[1].strip() for line in section.splitlines() if line.startswith("| billed time")
            or line.startswith("| handler CPU") or line.startswith("| `onceonly simulate")]


def test_a_target_is_met_only_when_every_run_meets_it() -> None:
    met = floor_section([run(200, 1.12, 1.8), run(50, 1.50, 1.9)], [], META)
    assert verdicts(met) == ["met", "met", "met"]
    one_run_over = floor_section([run(200, 1.12, 1.8), run(50, 1.5, 1.9), run(200, 1.16, 2.8, rep=2),
                                  run(50, 1.58, 1.9, rep=2)], [], META)
    assert verdicts(one_run_over) == ["**MISSED**", "met", "**MISSED**"]
    assert "exactly once in every run: yes" in met
    assert "exactly once in every run: **NO**" in floor_section([run(200, 1.1, 1.8, once=False)], [], META)


def test_the_section_is_replaced_and_kept() -> None:
    page = "# Benchmarks\n\nthe full run's tables\n"
    first = replace_section(page, floor_section([run(200, 1.12, 1.8)], [], META))
    assert first.count(FLOOR_BEGIN) == 1 and first.rstrip().endswith(FLOOR_END)
    again = replace_section(first, f"{FLOOR_BEGIN}\nnew\n{FLOOR_END}")
    assert kept_section(again) == f"{FLOOR_BEGIN}\nnew\n{FLOOR_END}" and "the full run's tables" in again


def test_simulates_target_needs_every_run_held_and_every_whole_run_at_20() -> None:
    floor_runs = [run(200, 1.12, 1.8), run(50, 1.50, 1.9)]
    met = floor_section(floor_runs, [simulated(1, 25.0, 17.0), simulated(2, 24.0, 21.0),
                                     simulated(3, 20.0, 20.5)], META)
    assert verdicts(met)[-1] == "met" and "median 20.5" in met and "whole run 20.0-25.0/s" in met
    for runs in ([simulated(1, 25.0, 21.0), simulated(2, 19.9, 21.0)],  # one whole run short
                 [simulated(1, 25.0, 21.0, ok=False)]):  # an invariant broken
        assert verdicts(floor_section(floor_runs, runs, META))[-1] == "**MISSED**", runs
    assert len(verdicts(floor_section(floor_runs, [], META))) == 3  # not run: no line
