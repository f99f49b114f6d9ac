"""The chart-building shortcuts of ``reports/_altair.py`` and ``chartkit.data`` give what Altair gives:
the schema -> class table is the one Altair builds, a deep copy is still deep (a copy's changes never
reach its original) with only the inline rows shared, and a layered chart's spec draws the same rows."""

from __future__ import annotations

from collections import defaultdict

from scaletrace.reports import _altair  # noqa: F401  first: installs the shortcuts, imports Altair without the IRI grammar

import altair as alt
import pytest
from altair.utils import schemapi
from scaletrace.reports.chartkit import data, point_labels

import polars as pl

ROWS = pl.DataFrame({"world_size": [1, 2, 4], "pct": [90.0, 80.5, 61.25], "run": ["a", "b", "c"]})


def test_the_class_table_is_altairs_and_built_once():
    if not _altair._patchable():
        pytest.skip(f"Altair {alt.__version__}: the speed-ups are for {', '.join(_altair.PATCHED_FOR)}x only")
    classes = list(schemapi.SchemaBase._default_wrapper_classes())
    expected = defaultdict(list)
    for tp in classes:
        if tp._schema is not None:
            expected[schemapi._FromDict.hash_schema(tp._schema)].append(tp)
    first, second = schemapi._FromDict(classes), schemapi._FromDict(iter(classes))
    assert dict(first.class_dict) == dict(expected)
    assert second.class_dict is first.class_dict
    # a shorthand becomes the channel Altair makes of it
    assert alt.Chart().encode(x="pct:Q").encoding.x.to_dict() == alt.X(field="pct", type="quantitative").to_dict()


def _chart():
    base = alt.Chart(data(ROWS)).encode(x=alt.X("world_size:Q", title="GPUs"), y="pct:Q",
                                        tooltip=["run:N", alt.Tooltip("pct:Q", format=".1f")])
    return base.mark_line(color="#333") + point_labels(base, "pct", ".1f")


def test_a_deep_copy_is_deep_but_shares_the_rows():
    chart = _chart()
    before = chart.to_dict()
    copy = chart.copy(deep=True)
    assert copy.to_dict() == before
    copy.layer[0].encoding.x.title = "changed"
    copy.layer[0].encoding.tooltip[1].format = ".3f"
    copy.layer[0].mark.color = "red"
    copy.layer[1].encoding.text.format = ".2f"
    assert chart.to_dict() == before, "a change to the copy reached the original"
    assert copy.to_dict() != before
    assert copy.data is chart.data  # the rows: never changed once a chart holds them


def _drawn_rows(spec: dict) -> list[list[dict]]:
    """The rows each layer draws: its own data, else the layered chart's."""
    top = spec.get("data")
    return [layer.get("data", top)["values"] for layer in spec["layer"]]


def test_a_layered_chart_draws_the_rows_altairs_own_data_would():
    plain = alt.Chart(alt.Data(values=ROWS.to_dicts())).encode(x="world_size:Q", y="pct:Q")
    plain = plain.mark_line() + point_labels(plain, "pct", ".1f")
    shared = _chart()
    assert _drawn_rows(shared.to_dict()) == _drawn_rows(plain.to_dict()) == [ROWS.to_dicts()] * 2
