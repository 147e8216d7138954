"""The audit's report: one self-contained HTML page (inline SVG, no network) that a person can
read without a Parquet reader: the verdict, a chart of the findings by category, and the first
rows of every finding (lost acked messages first). A pure function of the audit's result and
the rows collected from its result frames."""

from __future__ import annotations

from autoswitch.pipeline.report import MAX_TABLE_ROWS, STYLE, LegendEntry, bars_svg, esc, html_table

# What each category means for the operator: the colour of its bar and its legend entry.
LOSS, OPERATOR, UNSAFE, ALLOWED = "#d62728", "#4e79a7", "#f28e2b", "#59a14f"
LEGEND = [LegendEntry(LOSS, "acknowledged data lost"), LegendEntry(OPERATOR, "lost by an operator's unclean recovery"),
          LegendEntry(UNSAFE, "a replica unsafe (nothing lost at the master)"),
          LegendEntry(ALLOWED, "allowed: a producer's retry written twice (at least once)")]
SECTIONS: list[tuple[str, str, str, list[str]]] = [
    # (category, colour, heading, columns)
    ("lost", LOSS, "Lost acknowledged messages (absent from the master's log)",
     ["group", "msg_id", "topic", "queue_offset", "acked_offset", "epoch", "acked_by", "ack_ts_ms", "master_id"]),
    ("lost_by_operator", OPERATOR, "Lost by an operator's unclean recovery (chosen, acknowledged before it)",
     ["group", "msg_id", "topic", "queue_offset", "acked_offset", "epoch", "recovery_epoch", "ack_ts_ms"]),
    ("moved", UNSAFE, "Moved: on the master, not at the acknowledged offset",
     ["group", "msg_id", "acked_offset", "found_offset_min", "found_offset_max", "found_copies", "epoch"]),
    ("replica_missing", UNSAFE, "Missing on a replica that confirmed past it",
     ["group", "msg_id", "broker_id", "acked_offset", "epoch", "master_id"]),
    ("divergence", UNSAFE, "Divergent records below confirmOffset",
     ["group", "broker_id", "phy_offset", "kind", "msg_id", "master_msg_id", "crc", "master_crc", "size",
      "master_size"]),
    ("duplicates", ALLOWED, "Duplicated msg_ids in the master's log (producer retries)",
     ["group", "msg_id", "copies", "offsets"]),
]
# the order each category's first rows are taken in (a stable, readable page)
SORT_KEYS = {"lost": ("group", "acked_offset"), "lost_by_operator": ("group", "acked_offset"),
             "moved": ("group", "acked_offset"), "replica_missing": ("group", "acked_offset", "broker_id"),
             "divergence": ("group", "phy_offset", "broker_id"), "duplicates": ("group", "msg_id")}


def render_audit_html(result: dict, rows: dict[str, list[dict]]) -> str:
    """``rows``: per category, its first MAX_TABLE_ROWS rows in SORT_KEYS order."""
    counts = result["counts"]
    chart = bars_svg([(c, counts.get(c, 0)) for c, _, _, _ in SECTIONS], "findings by category",
                     colours=[colour for _, colour, _, _ in SECTIONS], legend=LEGEND)
    off = result["consumer_offsets"]
    cards = [("acked rows", result["acked_rows"]), ("groups", result["groups"]), ("replicas", result["replicas"]),
             ("problem acks", result["problem_acks"]), ("consumer offsets lost", off["lost"]),
             ("offsets moved backwards", off["backwards"]),
             ("offsets reset by an operator", off.get("reset_by_operator", 0))]
    card_html = "".join(f'<div class="card"><div class="v">{esc(v)}</div><div class="k">{esc(k)}</div></div>'
                        for k, v in cards)
    sections = []
    for cat, _, heading, cols in SECTIONS:
        n = counts.get(cat, 0)
        shown = rows.get(cat, [])
        body = html_table([_readable(r) for r in shown], cols, cat, total=n) if n else "<p>none</p>"
        first = f" (the first {min(n, MAX_TABLE_ROWS)})" if n > MAX_TABLE_ROWS else ""
        sections.append(f'<h2 id="{cat}">{esc(heading)}: {n}{first}</h2>\n{body}')
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>autoswitch durability audit: {esc(result['verdict'])}</title>
{STYLE}</head>
<body>
<h1>autoswitch durability audit</h1>
<p id="verdict">Verdict <b>{esc(result['verdict'])}</b> (exit code {esc(result['exit_code'])}). Every row of
every category is in the Parquet output beside this page ({esc(result['out'])}).</p>
<div class="cards" id="summary">{card_html}</div>
{chart}
{"".join(sections)}
</body></html>
"""


def _readable(r: dict) -> dict:
    """Lists (a duplicate's offsets) as text."""
    return {k: ", ".join(map(str, v)) if isinstance(v, list | tuple) else v for k, v in r.items()}
