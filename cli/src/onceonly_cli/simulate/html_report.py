"""The simulation report as one self-contained HTML page: the charts are SVG
drawn here in Python, the data sits in a JSON block, and nothing is fetched
from anywhere (no CDN, no fonts, no images)."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from .report import scenario_rows

# Nothing may be fetched: the page is one file, opened offline.
CSP = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777"]
WIDTH, HEIGHT, PAD = 640, 240, 40

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:980px;
color:#111827;padding:0 1rem}
h1{font-size:1.5rem}h2{font-size:1.15rem;margin-top:2rem}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #e5e7eb;padding:.3rem .6rem;text-align:left}
.ok{color:#15803d;font-weight:600}.bad{color:#b91c1c;font-weight:600}
.verdict{font-size:1.2rem;padding:.6rem 1rem;border-radius:.4rem;display:inline-block}
.verdict.ok{background:#dcfce7}.verdict.bad{background:#fee2e2}
svg{background:#f9fafb;border:1px solid #e5e7eb;border-radius:.3rem}
.axis{stroke:#9ca3af;stroke-width:1}.label{font-size:11px;fill:#4b5563}
.legend span{display:inline-block;margin-right:1rem}.swatch{display:inline-block;width:.8rem;height:.8rem;
margin-right:.3rem;vertical-align:middle}
"""

# Proves in the browser that the embedded data parses and matches the charts.
SCRIPT = """
(function () {
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var lines = document.querySelectorAll("#throughput-chart polyline").length;
  var expected = 1 + data.timeline.per_replica.length;
  document.getElementById("loaded").textContent =
    "Data loaded: " + data.webhooks.events_in + " events, " + lines + " throughput series.";
  document.body.setAttribute("data-rendered", lines === expected ? "ok" : "mismatch");
})();
"""

# The comparison page: every store's run is on the page, with its own chart.
COMPARISON_SCRIPT = """
(function () {
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var sections = document.querySelectorAll("section.store-run").length;
  var charts = data.reports.filter(function (r) {
    return document.querySelector("#throughput-chart-" + r.config.store + " polyline") !== null;
  }).length;
  document.getElementById("loaded").textContent =
    "Data loaded: " + data.stores.length + " stores, " + charts + " throughput charts.";
  var ok = sections === data.stores.length && charts === data.stores.length;
  document.body.setAttribute("data-rendered", ok ? "ok" : "mismatch");
})();
"""


def _frame(title: str, max_y: float, x_label: str) -> list[str]:
    parts = [f'<text class="label" x="{PAD}" y="14">{escape(title)}</text>',
             f'<line class="axis" x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - 10}" y2="{HEIGHT - PAD}"/>',
             f'<line class="axis" x1="{PAD}" y1="20" x2="{PAD}" y2="{HEIGHT - PAD}"/>',
             f'<text class="label" x="{PAD - 4}" y="26" text-anchor="end">{max_y:g}</text>',
             f'<text class="label" x="{PAD - 4}" y="{HEIGHT - PAD}" text-anchor="end">0</text>',
             f'<text class="label" x="{WIDTH // 2}" y="{HEIGHT - 8}" text-anchor="middle">{escape(x_label)}</text>']
    return parts


def _svg(element_id: str, parts: list[str]) -> str:
    body = "".join(parts)
    return (f'<svg id="{element_id}" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
            f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img">{body}</svg>')


def line_chart(element_id: str, title: str, series: list[tuple[str, list[int]]], x_step: float) -> str:
    length = max((len(values) for _, values in series), default=0)
    max_y = max([1, *(v for _, values in series for v in values)])
    plot_w, plot_h = WIDTH - PAD - 10, HEIGHT - PAD - 20
    parts = _frame(title, max_y, f"seconds (buckets of {x_step:g} s)")
    for index, (name, values) in enumerate(series):
        points = " ".join(
            f"{PAD + (i / max(1, length - 1)) * plot_w:.1f},{HEIGHT - PAD - (v / max_y) * plot_h:.1f}"
            for i, v in enumerate(values))
        color = PALETTE[index % len(PALETTE)]
        width = 2.5 if index == 0 else 1.5
        parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="{width}" points="{points}">'
                     f"<title>{escape(name)}</title></polyline>")
    return _svg(element_id, parts)


def bar_chart(element_id: str, title: str, bars: list[tuple[str, int]], x_label: str,
              color_offset: int = 0) -> str:
    max_y = max([1, *(v for _, v in bars)])
    plot_w, plot_h = WIDTH - PAD - 10, HEIGHT - PAD - 20
    slot = plot_w / max(1, len(bars))
    parts = _frame(title, max_y, x_label)
    for i, (name, value) in enumerate(bars):
        h = value / max_y * plot_h
        x = PAD + i * slot + slot * 0.1
        parts.append(f'<rect x="{x:.1f}" y="{HEIGHT - PAD - h:.1f}" width="{slot * 0.8:.1f}" height="{h:.1f}" '
                     f'fill="{PALETTE[(i + color_offset) % len(PALETTE)] if color_offset else PALETTE[0]}">'
                     f"<title>{escape(name)}: {value}</title></rect>")
        if len(bars) <= 12:
            parts.append(f'<text class="label" x="{x + slot * 0.4:.1f}" y="{HEIGHT - PAD + 12}" '
                         f'text-anchor="middle">{escape(name)}</text>')
    return _svg(element_id, parts)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _mark(ok: bool) -> str:
    return '<span class="ok">ok</span>' if ok else '<span class="bad">BROKEN</span>'


def _embedded_json(report: dict[str, Any]) -> str:
    # "</" would end the script element early; JSON allows "<\\/" as the same string.
    return json.dumps(report, sort_keys=True).replace("</", "<\\/")


def _sections(report: dict[str, Any], suffix: str = "") -> str:
    """One run's tables and charts; ``suffix`` keeps element ids unique on a page
    that holds several runs."""
    wh, timeline, latency = report["webhooks"], report["timeline"], report["latency_ms"]
    per_replica = timeline["per_replica"]
    series = [("all replicas (first 2xx at the receiver)", timeline["total"])] + [
        (f"replica {i}", values) for i, values in enumerate(per_replica)]
    legend = "".join(f'<span><i class="swatch" style="background:{PALETTE[i % len(PALETTE)]}"></i>'
                     f"{escape(name)}</span>" for i, (name, _) in enumerate(series))
    histogram = latency["histogram"]
    summary_rows = [
        ["events in", str(wh["events_in"])], ["SQS messages (duplicates included)", str(wh["messages_sent"])],
        ["deliveries made", str(wh["deliveries_made"])], ["dead letters", str(wh["dead_letters"])],
        ["SQS dead-letter queue: redriven at the end / parked after", f"{wh['sqs_redriven']} / {wh['sqs_parked']}"],
        ["lost deliveries", str(wh["lost_deliveries"])],
        ["duplicate 2xx POSTs (same webhook-id)", str(wh["duplicate_posts"])],
        ["cut attempts (sender killed mid-body)", str(wh["cut_attempts"])],
        ["replicas killed / restarted", f"{report['replicas']['killed']} / {report['replicas']['restarted']}"],
        ["leases reclaimed", str(report["leases_reclaimed"])],
        ["fenced writes refused", str(report["fenced_writes_refused"])],
        ["throughput", f"{report['throughput_per_second']} deliveries/s"],
        ["latency p50 / p99", f"{latency['p50']} ms / {latency['p99']} ms"],
        ["duration", f"{report['duration_seconds']} s"],
    ]
    invariant_rows = [[escape(i["name"]), _mark(i["ok"]), escape(i["detail"])] for i in report["invariants"]]
    tick_rows = [[escape(t["job"]), escape(t["tick"]), str(t["deliveries"]),
                  escape(", ".join(f"{k} {v}" for k, v in sorted(t["statuses"].items()))), _mark(t["ok"])]
                 for t in report["cron"]["ticks"]]
    effect_rows = [[escape(e["job"]), escape(e["what"]), str(e["expected"]), str(e["actual"]), _mark(e["ok"])]
                   for e in report["cron"]["effects"]]
    payments = report.get("payments")
    payment_rows = [[escape(e["what"]), str(e["expected"]), str(e["actual"]), _mark(e["ok"])]
                    for e in (payments or {}).get("effects", [])]
    if payments:
        payment_rows.append(["invoice.paid deliveries received (one per subscription and paid invoice)",
                             str(payments["invoice_paid_deliveries"]), str(payments["invoice_paid_received"]),
                             _mark(payments["invoice_paid_ok"])])
    scenario_html = [[escape(what), escape(value)] for what, value in scenario_rows(report.get("scenarios") or {})]
    config = ", ".join(f"{k}={v}" for k, v in report["config"].items())
    verdict = ("every invariant held, exactly-once and domain" if report["ok"] else "an invariant broke")
    charts = [
        line_chart(f"throughput-chart{suffix}", "deliveries per second", series, timeline["bucket_seconds"]),
        f'<p class="legend">{legend}</p>',
        bar_chart(f"replica-chart{suffix}", "deliveries per replica",
                  [(f"r{i}", sum(values)) for i, values in enumerate(per_replica)], "replica",
                  color_offset=1),  # the same colours as the replicas' lines
        bar_chart(f"latency-chart{suffix}", "delivery latency histogram (event fed -> first 2xx)",
                  [(f"{b['from_ms']:.0f}", int(b["count"])) for b in histogram], "milliseconds"),
    ]
    return f"""<p class="verdict {'ok' if report['ok'] else 'bad'}">{escape(verdict)}</p>
<p><small>{escape(config)}</small></p>
<h2>Invariants</h2>{_table(["invariant", "result", "detail"], invariant_rows)}
<h2>Summary</h2>{_table(["measure", "value"], summary_rows)}
<h2>Throughput</h2>{"".join(charts[:3])}
<h2>Latency</h2>{charts[3]}
<h2>Cron ticks</h2>{_table(["job", "tick", "deliveries", "outcomes", "once"], tick_rows)}
<h2>Cron effects</h2>{_table(["job", "effect", "expected", "actual", "result"], effect_rows)}
{f'<h2>Payments</h2>{_table(["effect", "expected", "actual", "result"], payment_rows)}' if payment_rows else ""}
{f'<h2>Domain scenarios seeded</h2>{_table(["what", "seeded"], scenario_html)}' if scenario_html else ""}"""


def _page(title: str, body: str, data: dict[str, Any], script: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<title>{escape(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{escape(title)}</h1>
<p id="loaded">Data not loaded.</p>
{body}
<script type="application/json" id="report-data">{_embedded_json(data)}</script>
<script>{script}</script>
</body></html>
"""


def render_html(report: dict[str, Any]) -> str:
    return _page("onceonly simulate", _sections(report), report, SCRIPT)


def render_comparison_html(comparison: dict[str, Any]) -> str:
    """``simulate --store all``: the comparison table and charts, then each store's run."""
    rows = [[escape(row["store"]), _mark(row["ok"]), f"{row['invariants_held']} / {row['invariants_total']}",
             str(row["throughput_per_second"]), str(row["p50_ms"]), str(row["p99_ms"]),
             f"{row['killed']} / {row['restarted']}", str(row["duration_seconds"])]
            for row in comparison["stores"]]
    table = _table(["store", "verdict", "invariants held", "deliveries/s", "p50 ms", "p99 ms",
                    "replicas killed / restarted", "duration s"], rows)
    names = [row["store"] for row in comparison["stores"]]
    charts = [
        bar_chart("compare-throughput", "throughput (deliveries/s)",
                  [(n, round(r["throughput_per_second"])) for n, r in zip(names, comparison["stores"], strict=True)],
                  "store", color_offset=1),
        bar_chart("compare-p99", "latency p99 (ms)",
                  [(n, round(r["p99_ms"] or 0)) for n, r in zip(names, comparison["stores"], strict=True)],
                  "store", color_offset=4),
    ]
    verdict = ("every invariant held on every store" if comparison["ok"]
               else "an invariant broke")
    runs = "".join(f'<section class="store-run" id="run-{escape(r["config"]["store"])}">'
                   f'<h2>{escape(r["config"]["store"])}</h2>{_sections(r, "-" + r["config"]["store"])}</section>'
                   for r in comparison["reports"])
    body = (f'<p class="verdict {"ok" if comparison["ok"] else "bad"}">{escape(verdict)}</p>'
            f"<h2>Stores compared (same workload, seed {comparison['seed']})</h2>{table}{''.join(charts)}{runs}")
    return _page("onceonly simulate: stores compared", body, comparison, COMPARISON_SCRIPT)
