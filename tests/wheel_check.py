"""The installed wheel on a machine without a C compiler (tests/no_toolkit.sh
runs it with gcc's folders hidden and PATH the virtual environment's
alone): fatune.attention runs on the emulator with the package's own
compiler, ziglang's, and matches float64 attention."""
import os
import shutil

import numpy as np

import fatune

cc = os.environ.get("FATUNE_CC", "")
assert shutil.which("cc") is None and "ziglang" in cc, "FATUNE_CC is %r" % cc
rng = np.random.default_rng(5)
q, k, v = (rng.standard_normal((1, 2, 70, 32)).astype(np.float32) for _ in range(3))
o = fatune.attention(q, k, v, causal=True)
s = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64)) / np.sqrt(32)
s[..., np.triu(np.ones((70, 70), bool), 1)] = -np.inf
p = np.exp(s - s.max(-1, keepdims=True))
ref = np.einsum("bhqk,bhkd->bhqd", p / p.sum(-1, keepdims=True), v.astype(np.float64))
err = float(np.linalg.norm(o - ref) / np.linalg.norm(ref))
assert np.isfinite(o).all() and err < 1e-5, err
print("ok    the wheel without a toolkit or a compiler: fatune.attention on the emulator, "
      "norm-relative error %.2e against float64, compiled by %s" % (err, cc))
