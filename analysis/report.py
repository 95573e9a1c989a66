"""The HTML report of a results folder: figures, tables, manifest; from the data alone."""

from __future__ import annotations

import html
import importlib
import json
from pathlib import Path

import pandas as pd

from analysis import findings as findings_mod
from testbed.results import atomic_write


def generate(results: Path) -> Path:
    """(Re)write ``results/report/`` and return the path of its index.html."""
    config = json.loads((results / "config.json").read_text())
    manifest_path = results / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    out = results / "report"
    out.mkdir(exist_ok=True)
    summary_path = results / "summary.csv"
    try:
        summary = pd.read_csv(summary_path) if summary_path.exists() else pd.DataFrame()
    except pd.errors.EmptyDataError:  # every point failed: the report lists the errors only
        summary = pd.DataFrame()
    figures: list[Path] = []
    tables: list[tuple[str, pd.DataFrame]] = []
    if not summary.empty:
        from testbed.kinds import KINDS

        module = importlib.import_module(f"analysis.{KINDS[config['experiment']['kind']].analysis}")
        figures, tables = module.analyse(summary, config, out)
    for i, (title, table) in enumerate(tables):
        table.to_csv(out / f"table{i + 1}.csv", index=False)
    statuses = []
    for st in sorted((results / "points").glob("p[0-9]*/status.json")):
        s = json.loads(st.read_text())
        statuses.append((st.parent.name, s.get("label", ""), s["state"], s.get("error") or ""))
    pcaps = sorted((results / "pcap").glob("*.pcap")) if (results / "pcap").is_dir() else []
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(config['experiment']['name'])}</title>",
             "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
             "td,th{border:1px solid #ccc;padding:3px 8px;font-size:90%}img{max-width:100%}"
             f"{findings_mod.CSS}</style></head><body>",
             f"<h1>{e(config['experiment']['name'])}</h1><p>{e(config['experiment'].get('description', ''))}</p>",
             f"<p>kind <code>{e(config['experiment']['kind'])}</code> · time dilation factor D = "
             f"{config['run']['tdf']} (all values in paper units) · ran on "
             f"{e(str(manifest.get('where', {}).get('place', '?')))} kernel "
             f"{e(str(manifest.get('where', {}).get('kernel', '?')))} · git "
             f"{e(str(manifest.get('git', {}).get('sha', '?'))[:12])}</p>",
             "<p><a href='../config.json'>config.json</a> · <a href='../manifest.json'>manifest.json</a> · "
             "<a href='../summary.csv'>summary.csv</a> · <a href='../logs/run.log'>run log</a></p>"]
    # the findings first (verdict per claim of the paper), then the figures, then the other tables
    for i, (title, table) in enumerate(tables):
        if findings_mod.is_findings(title, table):
            counts = ", ".join(f"{(table['verdict'] == v).sum()} {v}" for v in findings_mod.VERDICTS)
            parts.append(f"<h2>{e(title)}</h2><p>{e(counts)} · <a href='table{i + 1}.csv'>CSV</a>"
                         + (" · <a href='findings.md'>Markdown</a>" if (out / "findings.md").exists() else "")
                         + f"</p><p style='font-size:90%'>{e(findings_mod.LEGEND)}</p>")
            parts.append(findings_mod.to_html(table))
    for fig in figures:
        parts.append(f"<p><img src='{e(fig.name)}'></p>")
    for i, (title, table) in enumerate(tables):
        if findings_mod.is_findings(title, table):
            continue
        parts.append(f"<h2>{e(title)}</h2><p><a href='table{i + 1}.csv'>CSV</a></p>")
        parts.append(table.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="–"))
    parts.append("<h2>Points</h2><table><tr><th>point</th><th>parameters</th><th>state</th><th>error</th></tr>")
    parts += [f"<tr><td><a href='../points/{e(p)}/'>{e(p)}</a></td><td>{e(lbl)}</td><td>{e(s)}</td>"
              f"<td>{e(err)}</td></tr>" for p, lbl, s, err in statuses]
    parts.append("</table>")
    if pcaps:
        parts.append("<h2>Captures</h2><ul>" + "".join(
            f"<li><a href='../pcap/{e(p.name)}'>{e(p.name)}</a></li>" for p in pcaps) + "</ul>")
    parts.append("</body></html>\n")
    index = out / "index.html"
    atomic_write(index, "\n".join(parts))
    return index
