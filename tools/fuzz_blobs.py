"""Fuzz the importers: damaged NPU blobs, NPUW LLM artefacts and CPU exports must never run.

Every mutant (bit flips, random bytes, truncation, extension, splices, deleted or inserted ranges,
header and trailer edits) is imported and, if that succeeds, run. The contract:

* ``sealed`` mutants (the file as a user would get it): **0 ran**, 0 foreign exceptions (anything
  not an ``ov_npu_emu.errors.NpuEmuError``), none slower than the time limit.
* ``resealed`` NPU-blob mutants (checksums recomputed after the damage, as a buggy or hostile
  writer would): the parsers behind the checksum must stay bounded -- running is allowed, but
  0 foreign exceptions and none slower than the limit.

* structure-aware mutants (``--kinds``, ``--fields N``; tools/fuzz_structure.py): fields edited --
  sizes, offsets, counts, shapes, element types, the NPUW configuration -- with every checksum
  recomputed; each ends in its typed error naming the field (``--kinds``) or runs, within 20 s and
  300 MB of peak RSS growth.

``python tools/fuzz_blobs.py --mutants 10000`` is the long run (minutes); ``--mutants 0
--resealed 0 --kinds --fields 1000`` the structure-aware one; the test suite runs a few hundred
with a fixed seed (tests/robustness/test_fuzz.py).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import random
import signal
import sys
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tools") not in sys.path:  # fuzz_structure beside it, whether run or imported
    sys.path.insert(0, str(ROOT / "tools"))

#: what one mutant may cost at most (import + one inference), seconds
TIME_LIMIT = 5.0

Mutator = Callable[[bytes, random.Random, bytes], bytes]


def _flip(b: bytes, rng: random.Random, _: bytes) -> bytes:
    out = bytearray(b)
    for _ in range(rng.choice((1, 1, 2, 4))):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def _byte(b: bytes, rng: random.Random, _: bytes) -> bytes:
    out = bytearray(b)
    i = rng.randrange(len(out))
    out[i] = (out[i] + rng.randrange(1, 256)) & 0xFF
    return bytes(out)


def _truncate(b: bytes, rng: random.Random, _: bytes) -> bytes:
    return b[:rng.randrange(len(b))]


def _extend(b: bytes, rng: random.Random, _: bytes) -> bytes:
    return b + rng.randbytes(rng.choice((1, 8, 64, 4096)))


def _splice(b: bytes, rng: random.Random, other: bytes) -> bytes:
    """A range overwritten by bytes from elsewhere in this file or in another artefact."""
    src = rng.choice((b, other))
    n = rng.randrange(1, min(256, len(src), len(b)) + 1)
    i, j = rng.randrange(len(b) - n + 1), rng.randrange(len(src) - n + 1)
    out = bytearray(b)
    out[i:i + n] = src[j:j + n]
    return bytes(out)


def _delete(b: bytes, rng: random.Random, _: bytes) -> bytes:
    i = rng.randrange(len(b))
    return b[:i] + b[i + rng.randrange(1, 65):]


def _insert(b: bytes, rng: random.Random, _: bytes) -> bytes:
    i = rng.randrange(len(b))
    return b[:i] + rng.randbytes(rng.randrange(1, 65)) + b[i:]


def _head(b: bytes, rng: random.Random, other: bytes) -> bytes:
    """Damage in the first 128 bytes (ELF header / artefact framing)."""
    out = bytearray(b)
    out[rng.randrange(min(128, len(out)))] ^= 1 << rng.randrange(8)
    return bytes(out)


def _tail(b: bytes, rng: random.Random, other: bytes) -> bytes:
    """Damage in the last 4 KiB (section headers, checksum table, trailer)."""
    out = bytearray(b)
    out[len(out) - 1 - rng.randrange(min(4096, len(out)))] ^= 1 << rng.randrange(8)
    return bytes(out)


MUTATORS: dict[str, Mutator] = {
    "flip": _flip, "byte": _byte, "truncate": _truncate, "extend": _extend, "splice": _splice,
    "delete": _delete, "insert": _insert, "head": _head, "tail": _tail,
}


def mutants(blob: bytes, other: bytes, rng: random.Random, n: int) -> Iterator[tuple[str, bytes]]:
    """``n`` (kind, mutant) pairs, each different from ``blob``."""
    kinds = list(MUTATORS)
    made = 0
    while made < n:
        kind = kinds[made % len(kinds)]
        m = MUTATORS[kind](blob, rng, other)
        if m != blob:
            made += 1
            yield kind, m


class _Slow(BaseException):
    """Raised by the watchdog; a BaseException so no ``except Exception`` in the code under test eats it."""


@contextlib.contextmanager
def _watchdog(seconds: float) -> Iterator[None]:
    def fire(*_: Any) -> None:
        raise _Slow

    old = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@dataclasses.dataclass
class Target:
    """One artefact to fuzz: its bytes, the device to import it on and a feed to run it with."""

    name: str
    blob: bytes
    device: str
    feed: dict[str, np.ndarray] | None  # None: ones of every input's shape and type
    steps: int = 2  # inferences per successful import (the second takes the replay path)
    config: dict[str, Any] | None = None  # import config (a weightless artefact's WEIGHTS_PATH)


def outcome(core: Any, target: Target, blob: bytes, limit: float = TIME_LIMIT) -> tuple[str, float]:
    """("rejected" | "ran" | "foreign:<Type>: <message>" | "slow", seconds) for one mutant."""
    res, _, dt = attempt(core, target, blob, limit)
    return res, dt


def run_once(core: Any, target: Target, blob: bytes, config: dict[str, Any] | None = None) -> list[np.ndarray]:
    """Import ``blob``, run ``target.steps`` inferences, read every state back: the last outputs
    and the states (what a mutant that runs must reproduce)."""
    cm = core.import_model(blob, target.device, {**(target.config or {}), **(config or {})})
    feed = target.feed if target.feed is not None else {
        p.get_any_name(): np.ones(list(p.get_shape()), p.get_element_type().to_dtype()) for p in cm.inputs}
    req = cm.create_infer_request()
    for _ in range(target.steps):
        res = req.infer(feed)
    return [np.array(res[i], copy=True) for i in range(len(res))] + [
        np.array(s.state.data, copy=True) for s in req.query_state()]


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y, equal_nan=x.dtype.kind == "f")
                                    for x, y in zip(a, b, strict=True))


def attempt(core: Any, target: Target, blob: bytes, limit: float = TIME_LIMIT,
            config: dict[str, Any] | None = None,
            reference: list[np.ndarray] | None = None) -> tuple[str, BaseException | None, float]:
    """:func:`outcome` with the exception caught (None when it ran or was slow); ``config`` is
    added to the target's import config. Given the intact artefact's ``reference`` results
    (:func:`run_once`), a mutant that runs to different ones is ``"wrong"``."""
    from ov_npu_emu.errors import NpuEmuError

    t0 = time.perf_counter()
    err: BaseException | None = None
    try:
        with _watchdog(limit), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = run_once(core, target, blob, config)
        result = "ran" if reference is None or _same(got, reference) else "wrong"
    except _Slow:
        result = "slow"
    except NpuEmuError as e:
        result, err = "rejected", e
    except Exception as e:  # noqa: BLE001 - the point: anything else is a finding
        result, err = f"foreign:{type(e).__name__}: {str(e)[:200]}", e
    return result, err, time.perf_counter() - t0


#: structure-aware mutants: what one may cost at most (import, two inferences, the states read
#: back) and how much the process's peak RSS may grow over it (issue 30's acceptance)
STRUCTURED_LIMIT = 20.0
RSS_LIMIT_MB = 300.0


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _peak_rss_window() -> Callable[[], float]:
    """Start measuring: returns a function giving the peak RSS growth since, in MB (Linux: the
    peak is reset through /proc/self/clear_refs; elsewhere ru_maxrss, which only grows)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS
        base = _status_kb("VmRSS")
        return lambda: max(0, _status_kb("VmHWM") - base) / 1024
    except OSError:
        import resource

        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return lambda: max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) / 1024


def matches(kind: Any, res: str, err: BaseException | None) -> bool:
    """Whether a structure-aware kind ended as it must: ran, or its typed error naming its field."""
    import re

    if kind.expect == "ran":
        return res == "ran"
    if err is None or res != "rejected" or type(err).__name__ != kind.expect:
        return False
    named = " ".join(str(x) for x in (getattr(err, "field", ""), getattr(err, "key", ""), err) if x)
    return re.search(kind.field, named) is not None


def run_kinds(core: Any, tg: dict[str, Target], kinds: list[Any] | None = None,
              limit: float = STRUCTURED_LIMIT) -> list[dict[str, Any]]:
    """One row per structure-aware kind: what it must end in, what it did, seconds, RSS growth."""
    from fuzz_structure import KINDS, describe

    rows = []
    refs: dict[str, list[np.ndarray]] = {}
    for kind in kinds if kinds is not None else KINDS:
        target = tg[kind.target]
        if kind.target not in refs:
            refs[kind.target] = run_once(core, target, target.blob)
        mutant = kind.make(target.blob)
        peak = _peak_rss_window()
        res, err, dt = attempt(core, target, mutant, limit, kind.config, refs[kind.target])
        rss = peak()
        got = "ran" if res == "ran" else describe(err, kind.field) if res == "rejected" and err is not None else res
        rows.append({"kind": kind.name, "target": kind.target, "what": kind.what, "expect": kind.expect,
                     "got": got, "ok": matches(kind, res, err) and dt < limit and rss < RSS_LIMIT_MB,
                     "seconds": dt, "rss_mb": rss, "message": str(err)[:300] if err else ""})
    return rows


def fuzz_fields(core: Any, target: Target, n: int, seed: int,
                limit: float = STRUCTURED_LIMIT) -> dict[str, Any]:
    """``n`` random structure-aware mutants (one numeric field set to an edge value, checksums
    valid): each must be typed or run to the intact artefact's results, within ``limit`` seconds
    and RSS_LIMIT_MB."""
    from fuzz_structure import random_field_mutant

    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    findings: list[str] = []
    slowest = biggest = 0.0
    reference = run_once(core, target, target.blob)
    for _ in range(n):
        what, m = random_field_mutant(target.blob, target.name, rng)
        peak = _peak_rss_window()
        res, _, dt = attempt(core, target, m, limit, reference=reference)
        rss = peak()
        slowest, biggest = max(slowest, dt), max(biggest, rss)
        key = res.split(":", 1)[0]
        counts[key] += 1
        if key in ("foreign", "slow", "wrong") or rss >= RSS_LIMIT_MB:
            findings.append(f"{target.name}/{what}: {res} ({dt:.2f} s, {rss:.0f} MB)")
    return {"target": target.name, "counts": dict(counts), "slowest_s": slowest, "peak_rss_mb": biggest,
            "findings": findings}


def targets(core: Any, tiny_model_dir: Path | None = None) -> list[Target]:
    """The artefacts fuzzed: a stateful NPU blob, a CPU export and (given a model) an NPUW artefact."""
    from ov_npu_emu.testing import make_add_model, make_model_with_memory

    out = []
    m = make_model_with_memory((1, 4), np.float32, "v")
    # f32: the structure-aware kinds (tools/fuzz_structure.py) edit the f32 lowering's descriptors;
    # the LLM targets below keep the device's default (f16)
    npu_blob = core.compile_model(m, "NPU", {"INFERENCE_PRECISION_HINT": "f32"}).export_model().getvalue()
    out.append(Target("npu", npu_blob, "NPU", None))
    out.append(Target("cpu", core.compile_model(make_add_model(), "CPU").export_model().getvalue(), "CPU", None))
    if tiny_model_dir is not None:
        cfg = {"NPU_USE_NPUW": "YES", "NPUW_LLM": "YES", "NPUW_DEVICES": "NPU",
               "NPUW_LLM_MAX_PROMPT_LEN": 16, "NPUW_LLM_MIN_RESPONSE_LEN": 8}
        # with its weights (NPUW's export is weightless by default): its sub-blobs are plain ELF blobs
        cm = core.compile_model(tiny_model_dir / "openvino_model.xml", "NPU", {**cfg, "CACHE_MODE": "OPTIMIZE_SPEED"})
        # one generate variant alone: an NPU blob with the LLM kernels (gather, matmul, SDPA, rope)
        kv = min(cm.impl.subs.generate)
        out.append(Target("npu-llm", cm.impl.subs.generate[kv].export_model().getvalue(), "NPU", None))
        ids = np.array([[5, 17, 99]], np.int64)
        feed = {"input_ids": ids, "attention_mask": np.ones((1, 3), np.int64),
                "position_ids": np.arange(3, dtype=np.int64)[None], "beam_idx": np.zeros(1, np.int32)}
        out.append(Target("npuw", cm.export_model().getvalue(), "NPU", feed, steps=1))
        # weightless (the default, here explicit): sub-blobs without the IR's weights, restored on import
        slim = core.compile_model(tiny_model_dir / "openvino_model.xml", "NPU", {**cfg, "CACHE_MODE": "OPTIMIZE_SIZE"})
        out.append(Target("npuw-weightless", slim.export_model().getvalue(), "NPU", feed, steps=1,
                          config={"WEIGHTS_PATH": str(tiny_model_dir / "openvino_model.bin")}))
    return out


def fuzz(core: Any, target: Target, other: bytes, n: int, seed: int, *, resealed: bool = False,
         limit: float = TIME_LIMIT) -> dict[str, Any]:
    """Run ``n`` mutants of ``target``; returns counts, the slowest time and examples of findings."""
    from ov_npu_emu_npu.blob.integrity import seal, strip

    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    findings: list[str] = []
    slowest = 0.0
    # resealed: damage the ELF image, then give it valid checksums (without trusting its headers)
    base = strip(target.blob) if resealed else target.blob
    for kind, m in mutants(base, other, rng, n):
        if resealed:
            m = seal(m, by_section=False)
        res, dt = outcome(core, target, m, limit)
        slowest = max(slowest, dt)
        key = res.split(":", 1)[0]
        counts[key] += 1
        if key in ("foreign", "slow") or (key == "ran" and not resealed):
            findings.append(f"{target.name}/{kind}: {res} ({dt:.2f} s)")
    return {"target": target.name, "resealed": resealed, "counts": dict(counts), "slowest_s": slowest,
            "findings": findings}


def kinds_table(rows: list[dict[str, Any]]) -> str:
    """The structure-aware kinds as the markdown table docs/npu_blob_format.md shows."""
    out = ["| kind | target | edit (checksums recomputed) | must end in | outcome | s | RSS growth, MB |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        got = r["got"] if r["ok"] else f"**{r['got']}** (expected {r['expect']})"
        out.append(f"| {r['kind']} | {r['target']} | {r['what']} | {r['expect']} | {got} | "
                   f"{r['seconds']:.2f} | {r['rss_mb']:.0f} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--mutants", type=int, default=10_000, help="sealed mutants in total, spread over the targets")
    p.add_argument("--resealed", type=int, default=2_000, help="resealed NPU-blob mutants (bounded parsers)")
    p.add_argument("--kinds", action="store_true",
                   help="run the structure-aware kinds (tools/fuzz_structure.py) and print their table")
    p.add_argument("--fields", type=int, default=0,
                   help="random structure-aware field edits per target (NPU blob, LLM variant, NPUW artefact)")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--limit", type=float, default=TIME_LIMIT, help="seconds one byte-level mutant may take")
    args = p.parse_args(argv)

    import tempfile

    import ov_npu_emu as ov
    from ov_npu_emu.modelbuilder import make_model_folder

    core = ov.Core()
    with tempfile.TemporaryDirectory() as d:  # the weightless target reads the .bin at each import
        folder = make_model_folder(Path(d) / "tiny", "tiny", "f32", seed=0)
        tg = targets(core, folder)
        return _report(core, tg, args)


def _report(core: Any, tg: list[Target], args: argparse.Namespace) -> int:
    reports = []
    if args.mutants > 0:
        per = max(1, args.mutants // len(tg))
        reports += [fuzz(core, t, tg[(i + 1) % len(tg)].blob, per, args.seed + i, limit=args.limit)
                    for i, t in enumerate(tg)]
    npu = [t for t in tg if t.device == "NPU" and not t.name.startswith("npuw")]
    if args.resealed > 0:
        reports += [fuzz(core, t, tg[1].blob, max(1, args.resealed // len(npu)), args.seed + 99 + i, resealed=True,
                         limit=args.limit) for i, t in enumerate(npu)]
    bad = 0
    for r in reports:
        print(f"{r['target']:5s} {'resealed' if r['resealed'] else 'sealed  '} {r['counts']} "
              f"slowest {r['slowest_s']:.2f} s")
        for f in r["findings"][:20]:
            print("   ", f)
        bad += len(r["findings"])
    by_name = {t.name: t for t in tg}
    if args.kinds:
        rows = run_kinds(core, by_name)
        print(kinds_table(rows))
        print(f"{len(rows)} kinds: {sum(r['ok'] for r in rows)} as expected; slowest "
              f"{max(r['seconds'] for r in rows):.2f} s, largest RSS growth {max(r['rss_mb'] for r in rows):.0f} MB")
        bad += sum(not r["ok"] for r in rows)
    for i, name in enumerate(("npu", "npu-llm", "npuw") if args.fields > 0 else ()):
        r = fuzz_fields(core, by_name[name], args.fields, args.seed + 7 + i)
        print(f"{name:7s} fields {r['counts']} slowest {r['slowest_s']:.2f} s, largest RSS growth "
              f"{r['peak_rss_mb']:.0f} MB")
        for f in r["findings"][:20]:
            print("   ", f)
        bad += len(r["findings"])
    print("OK: no damaged artefact ran, no foreign exception, none slow or large" if not bad else f"{bad} findings")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
