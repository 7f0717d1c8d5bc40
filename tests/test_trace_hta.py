"""Agreement with HolisticTraceAnalysis's get_comm_comp_overlap on real multi-GPU traces (within 0.1 pp).

The traces are HTA's public test data, kept outside the repository: $MBRIDGE_SKILL_TRACES, else
<repo>/../shared/data/traces. holistictraceanalysis is a test-only dependency.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from mbridge_overlap.trace import analyze

REPO = Path(__file__).resolve().parent.parent
TRACES = Path(os.environ.get("MBRIDGE_SKILL_TRACES", REPO.parent / "shared" / "data" / "traces"))
FILES = sorted(TRACES.glob("*.json.gz")) + sorted(TRACES.glob("*.json")) if TRACES.is_dir() else []

pytestmark = [
    pytest.mark.skipif(not FILES, reason=f"no real traces at {TRACES} (set MBRIDGE_SKILL_TRACES)"),
    pytest.mark.filterwarnings("ignore"),  # pandas warnings from inside HTA
]


def hta_overlap_pct(path: Path) -> float:
    hta = pytest.importorskip("hta.trace_analysis", reason="holistictraceanalysis is not installed (test-only)")
    logging.getLogger("hta").setLevel(logging.ERROR)
    analysis = hta.TraceAnalysis(trace_files={0: str(path)}, trace_dir=str(path.parent))
    return float(analysis.get_comm_comp_overlap(visualize=False)["comp_comm_overlap_pctg"].iloc[0])


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_overlap_agrees_with_hta(path):
    ours = analyze(path).ranks[0].figures.hidden_pct
    theirs = hta_overlap_pct(path)
    assert ours is not None
    assert abs(ours - theirs) <= 0.1, f"{path.name}: ours {ours} vs HTA {theirs}"
