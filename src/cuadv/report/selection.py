"""The selection matrix (the table a performance engineer fills in: which mechanism for which
workload), filled in from this run's measurements.

Each lab adds ``results.Selection`` cells to its LabResult: for a scenario of ``results.SCENARIOS``,
the mechanism measured best on this GPU, the numbers that show it, and the fallback. This module
groups them into one row per scenario, says why a row is empty (which lab would have measured it
and why it did not run), and marks the features this GPU lacks, with the reason and the fallback
that cuadv uses instead.
"""

from __future__ import annotations

from ..features import FEATURES, Feature, cc_text
from .results import SCENARIOS, LabResult, Selection, Table

# The labs (by CLI name) that measure each scenario: used to say why a row is empty.
EXPECTED_LABS: dict[str, tuple[str, ...]] = {
    "variable work per tile": ("scheduling",),
    "heavy prologue": ("scheduling",),
    "work that must yield to higher priority": ("scheduling",),
    "many small tasks": ("launch",),
    "data exchange between blocks": ("histogram", "cooperative"),
    "tiles reused by several blocks": ("tma",),
    "chained kernels": ("pdl",),
    "a hot read-only table": ("l2",),
}


def unsupported_features(caps: dict | None) -> list[tuple[Feature, str]]:
    """(feature, reason) for each feature this GPU lacks; empty without capabilities."""
    if not caps:
        return []
    out = []
    for f in FEATURES:
        if not f.present(caps):
            out.append((f, f"needs {f.needs}; {caps.get('name', 'this GPU')} has compute capability {cc_text(caps)}"
                           + ("" if f.have(caps) == cc_text(caps) else f" and {f.have(caps)}")))
    return out


def unsupported_table(caps: dict | None) -> Table:
    """Every feature this GPU lacks: why, the fallback cuadv uses, and the scenarios it touches."""
    if not caps:
        return Table("Unsupported features", ["feature", "reason", "fallback used", "scenarios affected"],
                     [["(unknown)", "no GPU: capabilities were not read", "-", "-"]])
    rows = [[f.name, reason, f.fallback, ", ".join(f.scenarios) or "-"] for f, reason in unsupported_features(caps)]
    if not rows:
        rows = [["(none)", f"{caps.get('name', 'this GPU')} has every feature cuadv uses", "-", "-"]]
    return Table(f"Unsupported features on {caps.get('name', 'this GPU')}",
                 ["feature", "reason", "fallback used", "scenarios affected"], rows,
                 note="from the capability query of this run; labs needing a missing feature ran their fallback or "
                      "were skipped with this reason")


def _why_not_measured(scenario: str, report) -> str:
    labs = EXPECTED_LABS.get(scenario, ())
    if not labs:
        return "not measured (no lab covers this scenario)"
    by_name = {r.lab: r for r in report.results}
    skipped = {what.removeprefix("lab ").strip(): why for what, why in getattr(report, "skipped", [])}
    reasons = []
    for lab in labs:
        r = by_name.get(lab)
        if r is not None and r.status in ("skipped", "failed"):
            reasons.append(f"lab {lab} {r.status}: {r.reason}")
        elif r is not None:
            reasons.append(f"lab {lab} ran but gave no cell for it")
        elif lab in skipped:
            reasons.append(f"lab {lab} skipped: {skipped[lab]}")
        else:
            reasons.append(f"lab {lab} was not run")
    return "not measured (" + "; ".join(reasons) + ")"


def cells_by_scenario(results: list[LabResult]) -> dict[str, list[tuple[str, Selection]]]:
    """(lab, cell) pairs for each scenario, from labs that ran; unknown scenarios are kept at the end."""
    grouped: dict[str, list[tuple[str, Selection]]] = {s: [] for s in SCENARIOS}
    for r in results:
        if r.status != "ok":
            continue
        for cell in r.selection:
            grouped.setdefault(cell.scenario, []).append((r.lab, cell))
    return grouped


def selection_matrix(report) -> Table:
    """One row per scenario: the choice measured on this GPU, its evidence, the fallback, the lab
    it came from, and the features of that scenario this GPU lacks (reason and fallback)."""
    caps = report.caps
    missing = unsupported_features(caps)
    rows = []
    for scenario, cells in cells_by_scenario(report.results).items():
        gaps = [f"{f.short or f.name} unsupported (needs {f.needs}); fallback: {f.short_fallback or f.fallback}"
                for f, _ in missing if scenario in f.scenarios]
        unsupported = "; ".join(gaps) if caps else "unknown (no GPU)"
        if not cells:
            rows.append([scenario, _why_not_measured(scenario, report), "-", "-", unsupported or "-", "-"])
            continue
        many = len(cells) > 1
        rows.append([scenario,
                     "; ".join(f"{c.choice} [{lab}]" if many else c.choice for lab, c in cells),
                     "; ".join(f"{c.evidence} [{lab}]" if many else c.evidence for lab, c in cells),
                     "; ".join(dict.fromkeys(c.fallback for _, c in cells if c.fallback)) or "-",
                     unsupported or "-",
                     ", ".join(dict.fromkeys(lab for lab, _ in cells))])
    gpu = caps.get("name", "this GPU") if caps else "no GPU"
    return Table(f"Selection matrix: which mechanism to choose ({gpu})",
                 ["scenario", "choice on this GPU", "evidence (measured in this run)", "fallback",
                  "unsupported here", "lab"], rows,
                 note="every choice and number comes from this run's measurements on this GPU; rows without a "
                      "measurement say which lab would supply it and why it did not")
