"""Modifications written as Python functions (fatune.mods.from_functions,
fatune.attention's score_mod= and mask_mod=), traced into fatune's
modification language: each against attention written here in float64
from the same formula (Python's floored // and %, negative operands
included), equal to the built-in it spells where there is one, through
autograd and torch.compile on tensors; the built-ins' constructors; and
what cannot be traced refused in words."""
import math

import numpy as np
import pytest

import fatune
from fatune import mods
from conftest import TOLERANCE, rel_err

B, H, NQ, NK, D = 1, 2, 40, 56, 16
OFF = NK - NQ


def qkv(dt=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal((B, H, n, D)).astype(dt) for n in (NQ, NK, NK))


def reference(q, k, v, sees, score):
    """O with key c of row r of head h seen when sees(h, r, c), its score
    rewritten by score(h, r, c, s); rows that see nothing give 0."""
    q, k, v = (x.astype(np.float64) for x in (q, k, v))
    s = np.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(D)
    h, r, c = np.meshgrid(np.arange(H), np.arange(NQ), np.arange(NK), indexing="ij")
    s = np.where(sees(h, r, c) & np.ones(s.shape, bool), score(h, r, c, s), -np.inf)
    m = s.max(-1, keepdims=True)
    p = np.exp(s - np.where(np.isfinite(m), m, 0))
    l = p.sum(-1, keepdims=True)
    return np.einsum("bhqk,bhkd->bhqd", p / np.where(l > 0, l, 1), v)


def check_grads(torch, inputs, want, step):
    """The gradients of step (a loss through fatune) eagerly and under
    torch.compile against those of want (the same loss in float64)."""
    ref_in = [t.double().requires_grad_() for t in inputs]
    refs = torch.autograd.grad(want(*ref_in), ref_in)
    torch.compiler.reset()
    for fn in (step, torch.compile(step, backend="aot_eager", fullgraph=True)):
        ins = [t.clone().requires_grad_() for t in inputs]
        got = torch.autograd.grad(fn(*ins), ins)
        for g, r in zip(got, refs):
            assert rel_err(g.numpy(), r.numpy()) < TOLERANCE["float32"]


def test_score_and_mask_functions():
    """A softcap, a bias by head and distance, and floored // and % on
    negative values (Python's semantics, not C's truncation)."""
    q, k, v = qkv(seed=1)

    def score_mod(score, b, h, q_idx, kv_idx):
        return 3.0 * mods.tanh(score / 3.0) - 0.05 * (h + 1) * abs(q_idx + OFF - kv_idx)

    def mask_mod(b, h, q_idx, kv_idx):
        return ((q_idx - 20) // 7 == (kv_idx - 20 - OFF) // 7) | ((kv_idx - 30) % 9 == 2)

    o = fatune.attention(q, k, v, score_mod=score_mod, mask_mod=mask_mod)
    ref = reference(q, k, v,
                    lambda h, r, c: ((r - 20) // 7 == (c - 20 - OFF) // 7) | ((c - 30) % 9 == 2),
                    lambda h, r, c, s: 3 * np.tanh(s / 3) - 0.05 * (h + 1) * np.abs(r + OFF - c))
    assert rel_err(o, ref) < TOLERANCE["float32"]


def test_a_function_equals_its_builtin():
    """mask_mod spelling window=6:1 and score_mod spelling softcap=2 give
    the built-ins' outputs; the constructors give the built-ins' specs."""
    q, k, v = qkv(seed=2)
    win = fatune.attention(q, k, v, mod=mods.sliding_window(6, 1))
    assert np.array_equal(win, fatune.attention(q, k, v, mod="window=6:1"))
    fn = fatune.attention(q, k, v, mask_mod=lambda b, h, qi, kv: (kv >= qi + (mods.SEQ_K - mods.SEQ_Q) - 6)
                          & (kv <= qi + (mods.SEQ_K - mods.SEQ_Q) + 1))
    assert rel_err(fn, win) < TOLERANCE["float32"]
    cap = fatune.attention(q, k, v, score_mod=lambda s, b, h, qi, kv: 2.0 * mods.tanh(s / 2.0))
    assert rel_err(cap, fatune.attention(q, k, v, mod=mods.softcap(2.0))) < TOLERANCE["float32"]
    for top_left in (False, True):   # the causal built-in is the causal mask, either way
        assert rel_err(fatune.attention(q, k, v, mod=mods.causal(top_left)),
                       fatune.attention(q, k, v, causal="top_left" if top_left else True)) < \
            TOLERANCE["float32"]
    assert [m.spec for m in (mods.alibi(), mods.prefix_lm(5), mods.chunked(8), mods.softcap(30))] \
        == ["alibi", "prefixlm=5", "chunked=8", "softcap=30.0"]


def test_torch_functions_autograd_and_compile():
    """FlexAttention's style, torch.where and torch.tanh on the arguments:
    forward and gradients eagerly and under torch.compile, against the
    same attention written in torch float64 and differentiated by autograd."""
    torch = pytest.importorskip("torch")

    def score_mod(score, b, h, q_idx, kv_idx):
        return torch.where(q_idx + OFF >= kv_idx, torch.tanh(score) * 2.0, score - 1.0)

    q, k, v = (torch.from_numpy(x) for x in qkv(seed=3))
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(4))

    def want(q, k, v):
        s = q @ k.transpose(-1, -2) / math.sqrt(D)
        r = torch.arange(NQ)[:, None]
        c = torch.arange(NK)[None, :]
        s = torch.where(r + OFF >= c, torch.tanh(s) * 2.0, s - 1.0)
        return (torch.softmax(s, -1) @ v * do.double()).sum()

    check_grads(torch, (q, k, v), want,
                lambda q, k, v: (fatune.attention(q, k, v, score_mod=score_mod) * do).sum())


def test_what_cannot_be_traced():
    q, k, v = qkv()
    with pytest.raises(TypeError, match="^mask_mod: a traced value has no truth value"):
        fatune.attention(q, k, v, mask_mod=lambda b, h, qi, kv: qi > kv and kv > 2)
    with pytest.raises(TypeError, match="^mask_mod: a traced value has no truth value"):
        fatune.attention(q, k, v, mask_mod=lambda b, h, qi, kv: kv if qi > 3 else qi)
    with pytest.raises(TypeError, match="^score_mod: returns a number"):
        fatune.attention(q, k, v, score_mod=lambda s, b, h, qi, kv: s > 0)
    with pytest.raises(TypeError, match="^mask_mod: returns a truth value"):
        fatune.attention(q, k, v, mask_mod=lambda b, h, qi, kv: qi - kv)
    with pytest.raises(TypeError, match="//: an int by a positive int constant"):
        fatune.attention(q, k, v, mask_mod=lambda b, h, qi, kv: qi // kv == 0)
    with pytest.raises(TypeError, match="//: on ints"):
        fatune.attention(q, k, v, score_mod=lambda s, b, h, qi, kv: s // 2)
    with pytest.raises(ValueError, match="not with mod="):
        fatune.attention(q, k, v, mod="alibi", score_mod=lambda s, b, h, qi, kv: s)
    with pytest.raises(ValueError, match="not finite"):
        fatune.attention(q, k, v, score_mod=lambda s, b, h, qi, kv: s + float("inf"))
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="^score_mod: torch.sigmoid is not traceable"):
        fatune.attention(torch.from_numpy(q), torch.from_numpy(k), torch.from_numpy(v),
                         score_mod=lambda s, b, h, qi, kv: torch.sigmoid(s))


def _ids(runs):
    """Document ids of NK keys in runs of the given lengths (the last one
    taking the rest)."""
    ids = np.zeros(NK, np.int32)
    at = 0
    for i, n in enumerate(runs):
        ids[at:at + n] = i
        at += n
    ids[at:] = len(runs)
    return ids


def test_captured_tensors():
    """Tensors read at run time: the document built-in over NumPy ids and a
    traced function over a torch tensor give the same masked attention;
    new ids (a new tensor, or the same one changed in place) change the
    result and compile nothing; a relative-position bias table by head and
    distance; all against attention written here from the same ids."""
    q, k, v = qkv(seed=5)
    ids = _ids([9, 20, 4, 11])

    def doc_ref(ids):
        return reference(q, k, v, lambda h, r, c: ids[r + OFF] == ids[c], lambda h, r, c, s: s)

    got = fatune.attention(q, k, v, mod=mods.document(ids))
    assert rel_err(got, doc_ref(ids)) < TOLERANCE["float32"]
    wrapped = fatune.attention(q, k, v, mask_mod=lambda b, h, qi, kv:
                               mods.captured(ids)[qi + OFF] == mods.captured(ids)[kv])
    assert rel_err(wrapped, got) < TOLERANCE["float32"]
    ctx = fatune._lib.context("emu", 0, None)
    before = fatune._lib.programs(ctx)
    ids2 = _ids([3, 3, 30])
    assert rel_err(fatune.attention(q, k, v, mod=mods.document(ids2)), doc_ref(ids2)) < \
        TOLERANCE["float32"]
    assert fatune._lib.programs(ctx) == before, "new ids made a kernel"
    torch = pytest.importorskip("torch")
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    doc = torch.from_numpy(ids.astype(np.int64))
    m = mods.from_functions(mask_mod=lambda b, h, qi, kv: doc[qi + OFF] == doc[kv])
    assert "tensors = { { \"t0\", \"int\" } }" in m.text and m.tensors[0][1] is doc
    assert rel_err(fatune.attention(tq, tk, tv, mod=m).numpy(), doc_ref(ids)) < \
        TOLERANCE["float32"]
    doc.copy_(torch.from_numpy(ids2))
    assert rel_err(fatune.attention(tq, tk, tv, mod=m).numpy(), doc_ref(ids2)) < \
        TOLERANCE["float32"]
    assert fatune._lib.programs(ctx) == before, "ids changed in place made a kernel"
    table = np.random.default_rng(6).standard_normal((H, 11)).astype(np.float32)

    def rel_ref(h, r, c, s):
        return s + table[h, np.clip(c - r - OFF, -5, 5) + 5]

    want = reference(q, k, v, lambda h, r, c: True, rel_ref)
    assert rel_err(fatune.attention(q, k, v, mod=mods.relative_bias(table)), want) < \
        TOLERANCE["float32"]
    bias = torch.from_numpy(table)
    traced = fatune.attention(tq, tk, tv, score_mod=lambda s, b, h, qi, kv:
                              s + bias[h, torch.clamp(kv - qi - OFF, -5, 5) + 5])
    assert rel_err(traced.numpy(), want) < TOLERANCE["float32"]


def test_captured_tensor_gradients():
    """Autograd through a mask over captured ids, eagerly and under
    torch.compile (the ids an input of the graph), against the same masked
    attention in torch float64."""
    torch = pytest.importorskip("torch")
    ids = torch.from_numpy(_ids([12, 7, 25]).astype(np.int64))
    q, k, v = (torch.from_numpy(x) for x in qkv(seed=7))
    do = torch.randn(q.shape, generator=torch.Generator().manual_seed(8))
    seen = ids[torch.arange(NQ)[:, None] + OFF] == ids[None, :]

    def want(q, k, v):
        s = (q @ k.transpose(-1, -2) / math.sqrt(D)).masked_fill(~seen, -math.inf)
        return (torch.softmax(s, -1) @ v * do.double()).sum()

    check_grads(torch, (q, k, v), want, lambda q, k, v: (fatune.attention(
        q, k, v, mask_mod=lambda b, h, qi, kv: ids[qi + OFF] == ids[kv]) * do).sum())


def test_captured_tensors_refused():
    """What a captured tensor may not be, in words."""
    q, k, v = qkv()
    with pytest.raises(ValueError, match="captures tensor 'doc' and it was not given"):
        fatune.attention(q, k, v, mod=mods.Modification("document"))
    with pytest.raises(TypeError, match="captured tensor doc: integers"):
        fatune.attention(q, k, v, mod=mods.document(np.zeros(NK, np.float32)))
    with pytest.raises(fatune.Error, match="outside"):
        fatune.attention(q, k, v, mod=mods.document(np.zeros(5, np.int32)))
    with pytest.raises(ValueError, match="table: \\(heads, 2 span \\+ 1\\)"):
        mods.relative_bias(np.zeros((H, 4), np.float32))
    ids = mods.captured(np.arange(NK))
    with pytest.raises(TypeError, match="read one element at a time"):
        fatune.attention(q, k, v, mask_mod=lambda b, h, qi, kv: ids[0:2] == kv)
    with pytest.raises(TypeError, match="index is an int, not a float"):
        fatune.attention(q, k, v, score_mod=lambda s, b, h, qi, kv: s + ids[s])
    many = [mods.captured(np.arange(NK)) for _ in range(5)]
    with pytest.raises(TypeError, match="more than 4 captured tensors"):
        fatune.attention(q, k, v, mask_mod=lambda b, h, qi, kv:
                         (many[0][kv] + many[1][kv] + many[2][kv] + many[3][kv] + many[4][kv]) > 0)


def test_flex_attention_block_mask():
    """A FlexAttention BlockMask in place of mask_mod: one made by
    create_block_mask (its mask_mod, which captures document ids, traced)
    and one made from its blocks alone (from_kv_blocks: the blocks it lists
    are the mask), each against attention written from the same mask."""
    torch = pytest.importorskip("torch")
    flex = pytest.importorskip("torch.nn.attention.flex_attention")
    q, k, v = (torch.from_numpy(x) for x in qkv(seed=9))
    doc = torch.from_numpy(_ids([13, 30]).astype(np.int64))

    def doc_causal(b, h, q_idx, kv_idx):
        return (doc[q_idx + OFF] == doc[kv_idx]) & (q_idx + OFF >= kv_idx)

    bm = flex.create_block_mask(doc_causal, 1, 1, NQ, NK, device="cpu", BLOCK_SIZE=16)
    ids = doc.numpy()
    want = reference(q.numpy(), k.numpy(), v.numpy(),
                     lambda h, r, c: (ids[r + OFF] == ids[c]) & (r + OFF >= c), lambda h, r, c, s: s)
    assert rel_err(fatune.attention(q, k, v, block_mask=bm).numpy(), want) < TOLERANCE["float32"]
    blocks = flex.BlockMask.from_kv_blocks(bm.kv_num_blocks, bm.kv_indices, BLOCK_SIZE=16,
                                           seq_lengths=(NQ, NK))
    dense = blocks.to_dense()[0, 0].numpy()
    want = reference(q.numpy(), k.numpy(), v.numpy(), lambda h, r, c: dense[r // 16, c // 16] != 0,
                     lambda h, r, c, s: s)
    assert rel_err(fatune.attention(q, k, v, block_mask=blocks).numpy(), want) < \
        TOLERANCE["float32"]
    with pytest.raises(ValueError, match="made for seq_q, seq_k = \\(40, 56\\), the call's are"):
        fatune.attention(q[:, :, :20], k, v, block_mask=bm)
    with pytest.raises(ValueError, match="block_mask: not with mod= or mask_mod="):
        fatune.attention(q, k, v, block_mask=bm, mask_mod=doc_causal)
