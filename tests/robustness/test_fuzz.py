"""A fixed-seed fuzz run over every importer (the long run: ``python tools/fuzz_blobs.py``).

Damaged files never run (the checksums catch them before any parsing); damaged images given valid
checksums (a buggy writer) still meet only bounded parsers: a typed error or a run, nothing else.
Structure-aware mutants (tools/fuzz_structure.py: fields edited, every checksum recomputed) end in
the typed error that names the edited field, or run, within 20 s and 300 MB of RSS growth.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import ov_npu_emu as ov
from tools.fuzz_blobs import RSS_LIMIT_MB, STRUCTURED_LIMIT, Target, fuzz, fuzz_fields, outcome, run_kinds, targets
from tools.fuzz_structure import KINDS

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def core() -> ov.Core:
    return ov.Core()


@pytest.fixture(scope="module")
def all_targets(core: ov.Core, tiny_model_dir: Path) -> dict[str, Target]:
    return {t.name: t for t in targets(core, tiny_model_dir)}


def test_every_target_runs_undamaged(core: ov.Core, all_targets: dict[str, Target]) -> None:
    # the harness can tell "ran" from "rejected": an intact artefact runs
    assert set(all_targets) == {"npu", "cpu", "npu-llm", "npuw", "npuw-weightless"}
    for t in all_targets.values():
        assert outcome(core, t, t.blob)[0] == "ran", t.name


@pytest.mark.parametrize("name", ["npu", "cpu", "npu-llm", "npuw", "npuw-weightless"])
def test_damaged_artefacts_never_run(core: ov.Core, all_targets: dict[str, Target], name: str) -> None:
    t = all_targets[name]
    other = all_targets["cpu" if name != "cpu" else "npu"].blob
    r: dict[str, Any] = fuzz(core, t, other, 120, seed=20261201)
    assert r["counts"] == {"rejected": 120} and r["slowest_s"] < 5, r


@pytest.mark.parametrize(("name", "n"), [("npu", 150), ("npu-llm", 40)])
def test_resealed_damage_meets_bounded_parsers(core: ov.Core, all_targets: dict[str, Target], name: str,
                                               n: int) -> None:
    r = fuzz(core, all_targets[name], all_targets["cpu"].blob, n, seed=7, resealed=True)
    assert not r["findings"], r["findings"][:5]
    assert r["counts"].get("rejected", 0) > 0 and r["slowest_s"] < 5, r


def test_damage_names_the_section(all_targets: dict[str, Target]) -> None:
    from ov_npu_emu.errors import BlobFormatError
    from ov_npu_emu_npu.blob.reader import BlobReader

    blob = all_targets["npu-llm"].blob
    elf = BlobReader(blob).elf
    sec = elf.get_section_by_name(".npu.weights")
    where = sec["sh_offset"] + sec["sh_size"] // 2
    bad = bytearray(blob)
    bad[where] ^= 1
    with pytest.raises(BlobFormatError, match=r"\.npu\.weights fails its checksum \(file offset 0x[0-9a-f]+"):
        BlobReader(bytes(bad))


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_structure_aware_kind(core: ov.Core, all_targets: dict[str, Target], kind: Any) -> None:
    """Each named kind ends in its own typed error naming the field it edited (or runs)."""
    (row,) = run_kinds(core, all_targets, [kind])
    assert row["ok"], row
    assert row["seconds"] < STRUCTURED_LIMIT and row["rss_mb"] < RSS_LIMIT_MB, row


def test_structure_aware_catalogue_is_broad() -> None:
    assert len(KINDS) >= 30 and len({k.name for k in KINDS}) == len(KINDS)
    assert {k.target for k in KINDS} == {"npu", "npu-llm", "npuw"}
    assert sum(k.expect == "MemoryBudgetError" for k in KINDS) >= 5


@pytest.mark.parametrize(("name", "n"), [("npu", 60), ("npu-llm", 30), ("npuw", 40)])
def test_random_field_mutants_are_typed_or_run(core: ov.Core, all_targets: dict[str, Target], name: str,
                                               n: int) -> None:
    r = fuzz_fields(core, all_targets[name], n, seed=20261205)
    assert not r["findings"], r["findings"][:5]
    assert r["counts"].get("rejected", 0) > n // 4, r


def test_every_kind_is_in_the_docs_table() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "npu_blob_format.md").read_text(encoding="utf-8")
    missing = [k.name for k in KINDS if f"| {k.name} | {k.target} |" not in doc]
    assert not missing, f"rerun python tools/fuzz_blobs.py --mutants 0 --resealed 0 --kinds: {missing}"
