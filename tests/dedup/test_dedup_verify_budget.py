"""Within a budget smaller than its candidates' texts, the dedup planner verifies the pairs
in rounds (each forwarding a slice of the texts) and decides, audits and writes what one
round does, byte for byte: one big cluster of near-copies, near-duplicate pairs and
distinct texts, for MinHash and SimHash."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pytest
from dedup_testkit import HOW_NOT_WHAT, make_table, planner_files, run_dedup

from dataforge.ops.dedup.index import IndexShard
from dataforge.ops.dedup.planner import MAX_VERIFY_ROUNDS

BIG_CLUSTER = 300
TINY = 4096
"""Bytes: far below the candidates' texts, so verification takes the most rounds."""


def _corpus(seed: int = 5) -> pa.Table:
    """``BIG_CLUSTER`` near-copies of one text (one word replaced in each), 200 distinct
    texts and a near-duplicate of every fourth, rows and ids in unrelated orders."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}x" for i in range(4000)]
    base = list(rng.choice(vocab, 80))
    variants = []
    for i in range(BIG_CLUSTER):
        words = base.copy()
        words[i % len(words)] = f"edit{i}"
        variants.append(" ".join(words))
    distinct = [" ".join(rng.choice(vocab, 40)) for _ in range(200)]
    near = [t + " tail" for t in distinct[::4]]
    texts = variants + distinct + near
    n = len(texts)
    ids = [f"r{i:06d}" for i in rng.permutation(n)]
    table = make_table(texts, ["en"] * n, sources=["web"] * n, ids=ids)
    return table.take(pa.array(rng.permutation(n)))


class _Forwards:
    """Records the ``rounds`` of every ``IndexShard.forward`` call and the pairs it sent."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[int, int]] = []
        self.pairs: list[np.ndarray] = []
        self._lock = threading.Lock()
        forward = IndexShard.forward

        def spy(shard, round_=0, rounds=1):
            out = forward(shard, round_, rounds)
            with self._lock:
                self.calls.append((round_, rounds))
                self.pairs.extend(part[0] for part in out)
            return out

        monkeypatch.setattr(IndexShard, "forward", spy)

    def sent(self) -> np.ndarray:
        """Every pair forwarded, sorted."""
        pairs = np.concatenate([np.zeros((0, 2), np.int64), *self.pairs])
        return pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]


@pytest.mark.parametrize("method", ["minhash", "simhash"])
def test_verification_in_rounds_decides_and_writes_the_same(tmp_path, monkeypatch, method):
    table = _corpus()
    free_spy = _Forwards(monkeypatch)
    free = run_dedup(tmp_path / "free", table, batch=150, method=method, index_shards=3)
    monkeypatch.undo()
    tiny_spy = _Forwards(monkeypatch)
    tiny = run_dedup(
        tmp_path / "tiny", table, batch=150, method=method, index_shards=3, memory_bytes=TINY
    )
    # one round without a budget; the most rounds within it, each on every shard
    assert set(free_spy.calls) == {(0, 1)}
    assert sorted(set(tiny_spy.calls)) == [(r, MAX_VERIFY_ROUNDS) for r in range(MAX_VERIFY_ROUNDS)]
    assert len(tiny_spy.calls) == 3 * MAX_VERIFY_ROUNDS
    # every shard's texts waited on disk, and the files are gone
    assert free[0]["texts_spilled_shards"] == 0 and tiny[0]["texts_spilled_shards"] == 3
    if method == "minhash":  # the signature screen went in rounds too
        assert free[0]["screen_rounds"] == 1 and tiny[0]["screen_rounds"] == MAX_VERIFY_ROUNDS
    assert not list((tiny[2].parent / "spill").glob("dedup-shard-*"))
    # the decided pairs were clustered range by range; past MIN_RUN_EDGES on a shard
    # (SimHash's ~6,500 per shard here, not MinHash's ~2,800) they waited on disk
    assert free[0]["edge_runs"] == 0 and free[0]["star_ranges"] == 1
    assert tiny[0]["star_ranges"] > 1
    if method == "simhash":
        assert tiny[0]["edge_runs"] >= 3
    assert not list((tiny[2].parent / "spill").glob("dedup-edges-*"))
    # the candidate pairs were made in rounds of bucket keys, and waited on disk
    assert free[0]["candidate_rounds"] == 1 and free[0]["pair_runs"] == 0
    assert tiny[0]["candidate_rounds"] == MAX_VERIFY_ROUNDS and tiny[0]["pair_runs"] >= 1
    assert not list((tiny[2].parent / "spill").glob("dedup-index-*"))
    assert not list((tiny[2].parent / "spill").glob("dedup-pairs-*"))
    # every pair forwarded exactly once, whatever the rounds
    assert np.array_equal(tiny_spy.sent(), free_spy.sent())
    assert len(free_spy.sent()) >= BIG_CLUSTER - 1
    measured = HOW_NOT_WHAT
    assert {k: v for k, v in tiny[0].items() if k not in measured} == {
        k: v for k, v in free[0].items() if k not in measured
    }
    assert tiny[1].equals(free[1])
    assert planner_files(tiny[2]) == planner_files(free[2])
    # the big cluster was found: all but one of its near-copies dropped
    assert free[0]["dropped"] >= BIG_CLUSTER - 1


def test_a_budget_that_holds_the_texts_verifies_in_one_round(tmp_path, monkeypatch):
    table = _corpus()
    spy = _Forwards(monkeypatch)
    run_dedup(tmp_path / "big", table, batch=150, method="minhash", memory_bytes=1 << 30)
    assert set(spy.calls) == {(0, 1)}


def _zh_corpus(seed: int = 7) -> pa.Table:
    """Chinese pages of one template (the template rule applies to character-shingled
    texts): ``BIG_CLUSTER`` near-copies of one page, 100 distinct pages and an edited
    copy of every third."""
    rng = np.random.default_rng(seed)
    han = [chr(c) for c in range(0x4E00, 0x4E00 + 3000)]
    header = "".join(rng.choice(han, 30))  # every page's template line
    base = list(rng.choice(han, 120))
    pages = []
    for i in range(BIG_CLUSTER):
        body = base.copy()
        body[i % len(body)] = han[-1 - i % 50]
        pages.append(header + "\n" + "".join(body))
    distinct = [header + "\n" + "".join(rng.choice(han, 100)) for _ in range(100)]
    pages += distinct + [p[:-3] + "".join(rng.choice(han, 3)) for p in distinct[::3]]
    n = len(pages)
    ids = [f"z{i:05d}" for i in rng.permutation(n)]
    return make_table(pages, ["zh"] * n, sources=["web"] * n, ids=ids)


@pytest.mark.parametrize("method", ["minhash", "simhash"])
def test_the_template_counted_in_rounds_is_the_same(tmp_path, monkeypatch, method):
    """The same template, counts and output in one round or in many; in many, each
    document's n-grams are still made once (each round's kept in a file until its turn,
    every file removed after the last)."""
    from dataforge.ops.dedup import index

    made = [0]
    real = index.doc_ngrams

    def counted(*args):
        found = real(*args)
        made[0] += len(found)
        return found

    monkeypatch.setattr(index, "doc_ngrams", counted)
    made_dirs = []
    real_dir = index.spill_dir

    def recorded(root, prefix):
        made_dirs.append(real_dir(root, prefix))
        return made_dirs[-1]

    monkeypatch.setattr(index, "spill_dir", recorded)
    table = _zh_corpus()
    free = run_dedup(tmp_path / "free", table, batch=120, method=method, index_shards=3)
    made_free, made[0] = made[0], 0
    tiny = run_dedup(
        tmp_path / "tiny", table, batch=120, method=method, index_shards=3, memory_bytes=TINY
    )
    assert made[0] == made_free > 0
    spill = tiny[2].parent / "spill"
    ngram_dirs = [d for d in made_dirs if d.name.startswith("dedup-ngrams-")]
    assert len(ngram_dirs) == 3 and all(d.parent == spill for d in ngram_dirs)  # a shard each
    assert not any(d.exists() for d in ngram_dirs)
    # one round without a budget; within it, a share of the n-grams per round
    assert free[0]["template_rounds"] == 1
    assert tiny[0]["template_rounds"] == MAX_VERIFY_ROUNDS
    assert free[0]["template_ngrams"] > 0
    measured = HOW_NOT_WHAT
    assert {k: v for k, v in tiny[0].items() if k not in measured} == {
        k: v for k, v in free[0].items() if k not in measured
    }
    assert tiny[1].equals(free[1])
    assert planner_files(tiny[2]) == planner_files(free[2])
    assert free[0]["dropped"] > BIG_CLUSTER // 2  # most of the big cluster found


def _template_shard(tmp_path, monkeypatch, made):
    """A shard of 2 whose pool's n-grams are ``made`` (``(n-grams, times)`` pairs)."""
    from dataforge.ops.base import OpContext
    from dataforge.ops.dedup import Dedup

    op = Dedup(Dedup.Config(method="minhash"), OpContext())
    shard = IndexShard(2, op.method, spill_root=str(tmp_path))
    monkeypatch.setattr(shard, "_template_ngrams", lambda: iter(made()))
    return shard


def test_template_rounds_send_each_ngram_once_in_its_round(tmp_path, monkeypatch):
    """Rounds partition what one round sends: n-gram n in round (n // shards) % rounds,
    a document that stands for t copies counted t times; routed by n % shards; the round
    files gone after the last."""
    rng = np.random.default_rng(3)
    pieces = [(rng.integers(0, 2**32, 500, dtype=np.uint64).astype(np.uint32), t)
              for t in (1, 3, 1, 2)]  # fmt: skip
    shard = _template_shard(tmp_path, monkeypatch, lambda: pieces)
    one = np.concatenate(shard.template_counts(0, 1))
    rounds = 5
    got = []
    for r in range(rounds):
        sent = shard.template_counts(r, rounds)
        for owner, part in enumerate(sent):
            assert np.all(part % 2 == owner)
            assert np.all((part // 2) % rounds == r)
        got.append(np.concatenate(sent))
    assert np.array_equal(np.sort(np.concatenate(got)), np.sort(one))
    assert len(one) == sum(len(n) * t for n, t in pieces)
    assert list(tmp_path.iterdir()) == []


def test_a_failure_while_the_template_rounds_are_written_leaves_no_file(tmp_path, monkeypatch):
    def made():
        yield np.arange(100, dtype=np.uint32), 1
        raise OSError(28, "No space left on device")

    shard = _template_shard(tmp_path, monkeypatch, made)
    with pytest.raises(OSError, match="No space"):
        shard.template_counts(0, 4)
    assert list(tmp_path.iterdir()) == []


def test_forward_rounds_cut_at_equal_bytes_of_texts_and_pairs():
    """A hub (a page with many near-copies, first in key order as a crawl's originals
    are) holds most of a shard's pairs: the forward rounds are cut at equal shares of
    pair bytes (no texts received here), so the hub's round holds the hub alone, where
    equal counts of first nodes would add hundreds of other first nodes and their pairs;
    every pair goes in exactly one round, and no round passes its share by more than one
    first node."""
    from dataforge.ops.base import OpContext
    from dataforge.ops.dedup import Dedup
    from dataforge.ops.dedup.index import PAIR_BYTES

    op = Dedup(Dedup.Config(method="minhash"), OpContext())
    shard = IndexShard(1, op.method)
    hub = [(0, v) for v in range(10001, 12001)]  # its partners last in key order
    rest = [(v, v + 1) for v in range(1, 2001, 2)]  # right after the hub
    pairs = np.array(hub + rest, np.int64)
    both = np.concatenate([pairs, pairs[:, ::-1]])
    shard.receive_candidates(both[:, 0] << 32 | both[:, 1])
    assert shard.forward_bytes() == PAIR_BYTES * len(pairs)
    rounds = 4
    got = [shard.pairs(r, rounds) for r in range(rounds)]
    joined = np.concatenate(got)
    assert np.array_equal(joined[np.lexsort((joined[:, 1], joined[:, 0]))], shard.pairs())
    assert len(joined) == len(pairs)
    assert np.unique(got[0][:, 0]).tolist() == [0] and len(got[0]) == len(hub)
    share, largest = PAIR_BYTES * len(pairs) / rounds, PAIR_BYTES * len(hub)
    for part in got:
        assert PAIR_BYTES * len(part) <= share + largest


def test_forward_rounds_weigh_each_documents_own_texts():
    """Long pages first in key order (a crawl's originals are not spread evenly): each
    first node weighs its own document's bytes, so the long pages' rounds hold few of
    them, where a mean size put all of them in the first round with five times the texts
    of the next."""
    from dataforge.ops.base import OpContext
    from dataforge.ops.dedup import Dedup
    from dataforge.ops.dedup.index import FORWARD_COPIES, PAIR_BYTES
    from dataforge.ops.dedup.shingles import ShingleSet
    from dataforge.ops.dedup.verify import Texts

    op = Dedup(Dedup.Config(method="minhash"), OpContext())
    shard = IndexShard(1, op.method)
    n, long_docs = 400, 40
    counts = np.where(np.arange(n) < long_docs, 2000, 10)  # shingles per document
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    chars = ShingleSet(np.arange(offsets[-1], dtype=np.uint64), offsets)
    texts = Texts(chars, chars)
    nodes = np.arange(n, dtype=np.int64)
    shard.add_payload(nodes, np.zeros((n, 4), np.uint32), texts)
    pairs = np.stack([nodes[:-1], nodes[1:]], axis=1)  # a chain: one pair per first node
    both = np.concatenate([pairs, pairs[:, ::-1]])
    shard.receive_candidates(both[:, 0] << 32 | both[:, 1])
    own = shard._pool.doc_bytes(nodes)
    assert own[0] > 100 * own[-1]
    weights = FORWARD_COPIES * own + PAIR_BYTES * (nodes < n - 1)  # the last: no pair ahead
    assert shard.forward_bytes() == weights.sum()
    rounds = 8
    got = [shard.pairs(r, rounds) for r in range(rounds)]
    joined = np.concatenate(got)
    assert np.array_equal(joined, shard.pairs())  # every pair once, in order
    share = weights.sum() / rounds
    for part in got:
        assert weights[part[:, 0]].sum() <= share + weights.max()
    assert len(got[0]) < long_docs // 4  # equal counts: all 40 long pages and more
