"""fatune in a PyTorch model: tune the problem the layer will run, then run
a small grouped-query attention layer with fatune's kernel, and check it
against PyTorch's own scaled_dot_product_attention.

On a GPU: bf16, dim 64, seq 1024, tuned on the GPU (a few minutes).
Without one: float32 CPU tensors on fatune's emulator, a tiny problem
tuned on the emulator (about a minute), for trying the flow anywhere.

usage: python3 examples/torch_attention.py [--db PATH] [--no-tune]
"""
import argparse
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import fatune


class Attention(nn.Module):
    """Causal self-attention with grouped K/V heads, its core fatune's."""

    def __init__(self, width: int, heads: int, kv_heads: int, use_fatune: bool = True):
        super().__init__()
        self.heads, self.kv_heads, self.dim = heads, kv_heads, width // heads
        self.q = nn.Linear(width, heads * self.dim, bias=False)
        self.kv = nn.Linear(width, 2 * kv_heads * self.dim, bias=False)
        self.out = nn.Linear(heads * self.dim, width, bias=False)
        self.use_fatune = use_fatune

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        # (batch, seq, heads, dim) as the projections give it: fatune takes
        # this layout as it is (layout="bnhd"), no transpose, no copy.
        q = self.q(x).view(b, n, self.heads, self.dim)
        k, v = self.kv(x).view(b, n, 2, self.kv_heads, self.dim).unbind(2)
        if self.use_fatune:
            o = fatune.attention(q, k, v, causal=True, layout="bnhd")
        else:
            g = self.heads // self.kv_heads
            o = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(g, 1),
                v.transpose(1, 2).repeat_interleave(g, 1), is_causal=True).transpose(1, 2)
        return self.out(o.reshape(b, n, -1))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="results database (default: fatune's)")
    ap.add_argument("--no-tune", action="store_true", help="run what the database holds")
    a = ap.parse_args()
    if a.db:  # for the command (tune, best) and the library (attention) alike
        os.environ["FATUNE_DB"] = a.db
    gpu = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if gpu else ("cpu", torch.float32)
    batch, seq, heads, kv_heads, dim = (4, 1024, 16, 4, 64) if gpu else (1, 64, 4, 2, 16)
    name = {torch.bfloat16: "bf16", torch.float32: "fp32"}[dtype]
    if not a.no_tune:
        print("tuning dim %d seq %d %s causal on %s ..." % (dim, seq, name,
                                                            "the GPU" if gpu else "the emulator"))
        rows = fatune.tune(dim=dim, seq=seq, dtype=name, causal=True, batch=batch,
                           heads=heads, backend="cuda" if gpu else "emu")
        print("  %d variants measured, %d ok" % (len(rows),
                                                 sum(r["status"] == "ok" for r in rows)))
    best = fatune.best(dim=dim, seq=seq, dtype=name, causal=True)
    print("best recorded:", best["variant"] if best else "none (the default runs)")

    torch.manual_seed(0)
    layer = Attention(heads * dim, heads, kv_heads).to(device, dtype)
    x = torch.randn(batch, seq, heads * dim, device=device, dtype=dtype)
    with torch.no_grad():
        y = layer(x)
        layer.use_fatune = False
        ref = layer(x)
    err = ((y.float() - ref.float()).norm() / ref.float().norm()).item()
    print("attention layer %s: output %s, relative error against sdpa %.2e"
          % (tuple(x.shape), tuple(y.shape), err))
    return 0 if err < (2e-2 if dtype == torch.bfloat16 else 1e-4) else 1


if __name__ == "__main__":
    sys.exit(main())
