"""The docs' key tables are generated from the owners' option tables (tools/option_tables.py):
a key added, removed or re-documented in NPUW_OPTIONS, NPU_OPTIONS or CPU_OPTIONS without
``python tools/option_tables.py --write`` fails here."""

from __future__ import annotations

import pytest

from tools.option_tables import TABLES, in_doc


@pytest.mark.parametrize(("doc", "name", "render"), TABLES, ids=[name for _, name, _ in TABLES])
def test_doc_key_table_is_generated_from_the_option_table(doc, name, render):
    assert in_doc(doc, name) == render().strip(), (
        f"{doc.name}'s {name} table is stale: run python tools/option_tables.py --write")


def test_every_table_is_in_a_doc_once():
    names = [name for _, name, _ in TABLES]
    assert len(set(names)) == len(names)
    for doc, name, _ in TABLES:
        assert doc.read_text(encoding="utf-8").count(f"<!-- BEGIN {name} -->") == 1
