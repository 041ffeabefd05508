"""Each paper preset reports the metric its table reports, first, under the name docs/metrics.md
maps to the table's column (issue 16)."""

from __future__ import annotations

import pytest

from conftest import compose_cfg
from kgreason.metrics import METRICS

TABLE_COLUMNS = {  # preset → (table columns in order, our metric for each)
    "sgr_table1": (("Hits@1", "Acc"), ("tog_hits_at_1", "tog_exact_top1")),
    "sgr_table2": (("Hits@1", "Acc"), ("tog_hits_at_1", "tog_exact_top1")),
    "kgqa_baselines": (("Hits@1",), ("tog_hits_at_1",)),
    "reknos_width_depth": (("Hits@1", "Retrieval rate"), ("tog_hits_at_1", "answer_coverage")),
    "subqrag_table1": (("EM", "F1"), ("em", "f1")),
    "subqrag_table2": (("EM", "F1"), ("em", "f1")),
}


@pytest.mark.parametrize("preset", sorted(TABLE_COLUMNS))
def test_preset_reports_its_tables_metrics_first(tmp_path, preset):
    cfg = compose_cfg([f"experiment={preset}"], tmp_path)
    _, ours = TABLE_COLUMNS[preset]
    names = list(cfg.dataset.metrics)
    assert names[: len(ours)] == list(ours)
    assert all(n in METRICS for n in names)
    assert "accuracy" not in names


def test_docs_map_every_table_column():
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "metrics.md").read_text()
    for cols, ours in TABLE_COLUMNS.values():
        for metric in ours:
            assert f"`{metric}`" in doc
    for table in ("SGR Table 1", "SGR Table 2", "ReKnoS", "SubQRAG", "LogosKG Table 5"):
        assert table in doc
