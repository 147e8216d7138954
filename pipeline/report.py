"""The analyze report: one self-contained HTML page with inline SVG charts (no plotting
library, no network), and the console summary. Pure functions of collected rows."""

from __future__ import annotations

import html
import time
from typing import NamedTuple

PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#76b7b2", "#edc948", "#9c755f", "#bab0ac")
MAX_TABLE_ROWS = 200
STYLE = """<style>
body { font-family: sans-serif; margin: 24px; color: #222; background: #fff; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; }
.card { border: 1px solid #ccc; border-radius: 6px; padding: 8px 14px; min-width: 110px; }
.card .v { font-size: 24px; font-weight: bold; } .card .k { font-size: 12px; color: #555; }
.wide { max-width: 100%; overflow-x: auto; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0 24px; width: 100%; }
th, td { border: 1px solid #ddd; padding: 3px 6px; text-align: right; }
th { background: #f3f3f3; white-space: normal; } td { white-space: nowrap; }
svg.chart { display: block; margin: 12px 0; border: 1px solid #eee; }
</style>"""


def _broker_colour(broker_id: int) -> str:
    """A master's colour in the timeline, and in its legend."""
    return PALETTE[broker_id % len(PALETTE)]


def esc(x) -> str:
    return html.escape("" if x is None else str(x))


def _ts(ms: int | None) -> str:
    if ms is None:
        return ""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ms / 1000)) + f".{int(ms) % 1000:03d}Z"


def histogram_svg(values: list[float], title: str, unit: str, bins: int = 20, width: int = 640,
                  height: int = 220) -> str:
    """Bar histogram; equal-width bins over [min, max]."""
    pad_l, pad_b, pad_t = 50, 40, 24
    head = (f'<svg class="chart" data-kind="histogram" xmlns="http://www.w3.org/2000/svg" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">'
            f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13">{esc(title)}</text>')
    if not values:
        return head + f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle">no data</text></svg>'
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / span * bins))] += 1
    top = max(counts)
    pw, ph = width - pad_l - 10, height - pad_b - pad_t
    bw = pw / bins
    parts = [head]
    for i, c in enumerate(counts):
        h = ph * c / top
        x = pad_l + i * bw
        parts.append(f'<rect x="{x:.1f}" y="{pad_t + ph - h:.1f}" width="{max(bw - 1, 1):.1f}" height="{h:.1f}" '
                     f'fill="{PALETTE[0]}"><title>{lo + i * span / bins:.0f}-{lo + (i + 1) * span / bins:.0f} '
                     f'{unit}: {c}</title></rect>')
    parts.append(f'<line x1="{pad_l}" y1="{pad_t + ph}" x2="{pad_l + pw}" y2="{pad_t + ph}" stroke="#333"/>')
    parts.append(f'<text x="{pad_l}" y="{height - 20}" font-size="11">{lo:.0f}</text>')
    parts.append(f'<text x="{pad_l + pw}" y="{height - 20}" font-size="11" text-anchor="end">{hi:.0f} {unit}</text>')
    parts.append(f'<text x="{pad_l - 6}" y="{pad_t + 10}" font-size="11" text-anchor="end">{top}</text>')
    parts.append("</svg>")
    return "".join(parts)


def bars_svg(items: list[tuple[str, float]], title: str, width: int = 640,
             colours: list[str] | None = None, legend: list[LegendEntry] | None = None) -> str:
    """Horizontal bars, one per labelled item; ``colours`` per item, explained by ``legend``."""
    row, pad_l, pad_t = 16, 150, 24
    leg_h = legend_height(legend, width - 20) + 8 if legend else 0
    height = pad_t + row * max(1, len(items)) + 10 + leg_h
    parts = [f'<svg class="chart" data-kind="bars" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">'
             f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13">{esc(title)}</text>']
    top = max((v for _, v in items), default=0) or 1
    for i, (label, v) in enumerate(items):
        y = pad_t + i * row
        w = (width - pad_l - 60) * v / top
        parts.append(f'<text x="{pad_l - 6}" y="{y + 12}" font-size="11" text-anchor="end">{esc(label)}</text>'
                     f'<rect x="{pad_l}" y="{y + 2}" width="{w:.1f}" height="{row - 4}" '
                     f'fill="{colours[i] if colours else PALETTE[1]}"/>'
                     f'<text x="{pad_l + w + 4:.1f}" y="{y + 12}" font-size="11">{v:g}</text>')
    if not items:
        parts.append(f'<text x="{width / 2}" y="{pad_t + 12}" text-anchor="middle">no data</text>')
    if legend:
        parts.append(legend_svg(legend, 10, height - leg_h, width - 20))
    parts.append("</svg>")
    return "".join(parts)


class LegendEntry(NamedTuple):
    colour: str
    label: str
    mark: str = "box"       # "box": a swatch; "tick": a NoMaster tick; "cross": an unclean election


def _legend_layout(entries: list[LegendEntry], width: float) -> list[tuple[float, int]]:
    """(x, row) of each entry: left to right, wrapped at ``width``."""
    out, x, row = [], 0.0, 0
    for e in entries:
        w = 15 + 6.5 * len(e.label) + 14
        if x > 0 and x + w > width:
            x, row = 0.0, row + 1
        out.append((x, row))
        x += w
    return out


def legend_height(entries: list[LegendEntry], width: float) -> int:
    return 16 * (1 + max((r for _, r in _legend_layout(entries, width)), default=0))


def legend_svg(entries: list[LegendEntry], x: float, y: float, width: float) -> str:
    """Each entry's mark and label, wrapped at ``width``."""
    parts = [f'<g class="legend" transform="translate({x:.1f},{y:.1f})">']
    for e, (cx, row) in zip(entries, _legend_layout(entries, width), strict=True):
        cy = row * 16
        if e.mark == "tick":
            parts.append(f'<line x1="{cx + 5:.1f}" y1="{cy}" x2="{cx + 5:.1f}" y2="{cy + 11}" stroke="{e.colour}" '
                         f'stroke-width="2"/>')
        elif e.mark == "cross":
            parts.append(f'<path d="M{cx + 1:.1f},{cy + 1} L{cx + 9:.1f},{cy + 10} M{cx + 1:.1f},{cy + 10} '
                         f'L{cx + 9:.1f},{cy + 1}" stroke="{e.colour}" stroke-width="2"/>')
        else:
            parts.append(f'<rect x="{cx:.1f}" y="{cy}" width="11" height="11" fill="{e.colour}"/>')
        parts.append(f'<text x="{cx + 15:.1f}" y="{cy + 10}" font-size="11">{esc(e.label)}</text>')
    parts.append("</g>")
    return "".join(parts)


def timeline_svg(timeline: list[dict], ends: dict[str, int], width: int = 900) -> str:
    """One lane per group: master tenures as coloured bars (colour = brokerId), gaps without a
    master left blank with a red tick at each NoMaster, unclean elections marked with a red X."""
    groups = list(dict.fromkeys(r["group"] for r in timeline))
    masters = sorted({int(r["master_broker_id"]) for r in timeline if r["master_broker_id"] is not None})
    legend = [LegendEntry(_broker_colour(b), f"master brokerId {b}") for b in masters]
    legend += [LegendEntry("#d62728", "NoMaster", "tick"), LegendEntry("#d62728", "unclean election", "cross")]
    row, pad_l, pad_t = 20, 120, 28
    leg_h = legend_height(legend, width - pad_l - 10)
    height = pad_t + row * max(1, len(groups)) + 28 + leg_h     # the time axis, then the legend
    parts = [f'<svg class="chart" data-kind="timeline" xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="master timeline">'
             f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13">Master per group over time '
             f'(colour = brokerId)</text>']
    if not groups:
        parts.append(f'<text x="{width / 2}" y="{pad_t + 12}" text-anchor="middle">no elections</text></svg>')
        return "".join(parts)
    t_lo = min(r["ts_ms"] for r in timeline)
    t_hi = max([r["ts_ms"] for r in timeline] + [ends.get(g, t_lo) for g in groups])
    span = (t_hi - t_lo) or 1
    pw = width - pad_l - 10

    def x(t: int) -> float:
        return pad_l + pw * (t - t_lo) / span

    for gi, g in enumerate(groups):
        y = pad_t + gi * row
        rows = [r for r in timeline if r["group"] == g]
        parts.append(f'<text x="{pad_l - 6}" y="{y + 13}" font-size="11" text-anchor="end">{esc(g)}</text>')
        for k, r in enumerate(rows):
            end = rows[k + 1]["ts_ms"] if k + 1 < len(rows) else max(ends.get(g, r["ts_ms"]), r["ts_ms"])
            if r["event"] == "NoMaster" or r["master_broker_id"] is None:
                parts.append(f'<line x1="{x(r["ts_ms"]):.1f}" y1="{y}" x2="{x(r["ts_ms"]):.1f}" y2="{y + row - 2}" '
                             f'stroke="#d62728" stroke-width="2"><title>NoMaster at {_ts(r["ts_ms"])}</title></line>')
                continue
            col = _broker_colour(int(r["master_broker_id"]))
            parts.append(f'<rect x="{x(r["ts_ms"]):.1f}" y="{y + 3}" width="{max(x(end) - x(r["ts_ms"]), 1):.1f}" '
                         f'height="{row - 6}" fill="{col}"><title>{esc(g)}: master {r["master_broker_id"]} '
                         f'epoch {r["master_epoch"]} from {_ts(r["ts_ms"])}</title></rect>')
            if r.get("unclean"):
                cx, cy = x(r["ts_ms"]), y + row / 2
                parts.append(f'<path d="M{cx - 4:.1f},{cy - 4:.1f} L{cx + 4:.1f},{cy + 4:.1f} M{cx - 4:.1f},'
                             f'{cy + 4:.1f} L{cx + 4:.1f},{cy - 4:.1f}" stroke="#d62728" stroke-width="2">'
                             f'<title>unclean election</title></path>')
    axis_y = height - leg_h - 10
    parts.append(f'<text x="{pad_l}" y="{axis_y}" font-size="11">{_ts(t_lo)}</text>'
                 f'<text x="{width - 10}" y="{axis_y}" font-size="11" text-anchor="end">{_ts(t_hi)}</text>')
    parts.append(legend_svg(legend, pad_l, height - leg_h, width - pad_l - 10) + "</svg>")
    return "".join(parts)


def _header(col: str) -> str:
    """A readable column header: ``master_lost_ts_ms`` -> ``master lost (UTC)``, ``*_ms`` -> ``(ms)``."""
    if col.endswith("ts_ms"):
        base = col[: -len("ts_ms")].rstrip("_").replace("_", " ")
        return f"{base} (UTC)".strip() if base else "time (UTC)"
    if col.endswith("_ms"):
        return col[: -len("_ms")].replace("_", " ") + " (ms)"
    return col.replace("_", " ")


def _cell(col: str, v: object) -> str:
    if col.endswith("ts_ms") and isinstance(v, int | float):
        return _ts(int(v)).replace("T", " ")     # the wall time, not epoch milliseconds
    return "" if v is None else str(v)


def html_table(rows: list[dict], cols: list[str], cls: str, total: int | None = None) -> str:
    """``total``: how many rows there are when ``rows`` holds only the first of them."""
    head = "".join(f"<th>{esc(_header(c))}</th>" for c in cols)
    body = []
    for r in rows[:MAX_TABLE_ROWS]:
        body.append("<tr>" + "".join(f"<td>{esc(_cell(c, r.get(c)))}</td>" for c in cols) + "</tr>")
    shown = min(len(rows), MAX_TABLE_ROWS)
    left = (len(rows) if total is None else total) - shown
    more = f'<p class="more">{left} more rows in the Parquet output</p>' if left > 0 else ""
    return (f'<div class="wide"><table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            f'</table></div>{more}')


def _fmt_dist(d: dict) -> str:
    if not d or not d.get("n"):
        return "no data"
    return f"n={d['n']} p50={d['p50']} p90={d['p90']} p99={d['p99']} max={d['max']} ms"


def render_html(summary: dict, failovers: list[dict], churn: list[dict], flapping: list[dict],
                unclean: list[dict], timeline: list[dict], ends: dict[str, int],
                admin_actions: list[dict] | None = None) -> str:
    tte = [r["time_to_elect_ms"] for r in failovers if r.get("time_to_elect_ms") is not None]
    unav = [r["write_unavailable_ms"] for r in failovers if r.get("write_unavailable_ms") is not None]
    top_churn = sorted(churn, key=lambda r: (-r["members_removed"], r["group"]))[:20]
    s = summary
    cards = [("groups", s["groups"]), ("failovers", s["failovers"]),
             ("via NoMaster", s["failovers_via_no_master"]), ("unclean elections", s["unclean_elections"]),
             ("SSS shrinks", s["sss"]["shrinks"]), ("SSS expands", s["sss"]["expands"]),
             ("flapping brokers", len(s["flapping_brokers"]))]
    card_html = "".join(f'<div class="card"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>'
                        for k, v in cards)
    fcols = ["group", "old_master", "new_master", "old_epoch", "new_epoch", "master_lost_ts_ms", "lost_evidence",
             "elect_ts_ms", "time_to_elect_ms", "last_ack_old_ts_ms", "first_ack_new_ts_ms", "write_unavailable_ms",
             "unclean", "decision"]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>autoswitch failover report</title>
{STYLE}</head>
<body>
<h1>autoswitch failover report</h1>
<p id="definitions">A <b>failover</b> is an ElectMaster that names a different master than before, or follows a
NoMaster event. <b>Master lost</b> is the first NoMaster event since the previous election, else the last acked
write of the old epoch. <b>Flapping</b>: removed from the SyncStateSet at least {s['flap_rule']['min_removals']}
times within {s['flap_rule']['window_ms'] / 1000:g} s.</p>
<div class="cards" id="summary">{card_html}</div>
<h2>Time to elect</h2><p>{esc(_fmt_dist(s['time_to_elect_ms']))}</p>
{histogram_svg(tte, "time to elect a new master", "ms")}
<h2>Write unavailability</h2><p>{esc(_fmt_dist(s['write_unavailable_ms']))}</p>
{histogram_svg(unav, "last ack of the old master to first ack of the new one", "ms")}
<h2>Masters over time</h2>
{timeline_svg(timeline, ends)}
<h2>SyncStateSet churn</h2>
{bars_svg([(r["group"], r["members_removed"]) for r in top_churn], "members removed per group (top 20)")}
<h2>Failovers</h2>
{html_table(failovers, fcols, "failovers")}
<h2>Flapping brokers</h2>
{html_table([r for r in flapping if r["flapping"]], ["group", "broker_id", "removals", "max_removals_in_window"], "flapping")}
<h2>Unclean elections</h2>
{html_table(unclean, ["group", "ts_ms", "master_broker_id", "master_epoch", "reason"], "unclean")}
<h2>Admin actions (who did what)</h2>
{html_table(admin_actions or [], ["ts_ms", "actor", "group", "reason"], "admin")}
<script>
document.body.dataset.charts = String(document.querySelectorAll("svg.chart").length);
document.body.dataset.rendered = "yes";
</script>
</body></html>
"""


def console_summary(s: dict) -> str:
    lines = [
        f"groups {s['groups']}, failovers {s['failovers']} ({s['failovers_via_no_master']} via NoMaster), "
        f"unclean elections {s['unclean_elections']}, same-master re-elections {s['reelections_same_master']}",
        f"time to elect: {_fmt_dist(s['time_to_elect_ms'])}",
        f"write unavailability: {_fmt_dist(s['write_unavailable_ms'])}",
        f"SyncStateSet: {s['sss']['shrinks']} shrinks, {s['sss']['expands']} expands "
        f"({s['sss']['members_removed']} removed, {s['sss']['members_added']} added)",
        f"flapping brokers: {len(s['flapping_brokers'])}"
        + "".join(f"\n  {f['group']}/{f['broker_id']}: {f['max_removals_in_window']} removals in window"
                  for f in s["flapping_brokers"][:10]),
        f"report: {s['report']}",
    ]
    return "\n".join(lines)


