"""Training with fatune's kernels: a few steps of a tiny causal language
model whose attention is fatune's, forward and backward, next to the same
model on PyTorch's scaled_dot_product_attention from the same weights. The
two losses and the weights after the last step agree to float64 rounding.

float64 CPU tensors on fatune's emulator: runs anywhere with PyTorch, in
about half a minute on 2 cores (fatune's kernels are compiled on first use).

usage: python3 examples/torch_training.py [--steps N]
"""
import argparse
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import fatune


class Block(nn.Module):
    """Causal self-attention with grouped K/V heads, then an MLP."""

    def __init__(self, width: int, heads: int, kv_heads: int, use_fatune: bool):
        super().__init__()
        self.heads, self.kv_heads, self.dim = heads, kv_heads, width // heads
        self.q = nn.Linear(width, width, bias=False)
        self.kv = nn.Linear(width, 2 * kv_heads * self.dim, bias=False)
        self.o = nn.Linear(width, width, bias=False)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
        self.use_fatune = use_fatune

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q(x).view(b, n, self.heads, self.dim)
        k, v = self.kv(x).view(b, n, 2, self.kv_heads, self.dim).unbind(2)
        if self.use_fatune:
            a = fatune.attention(q, k, v, causal=True, layout="bnhd")
        else:
            g = self.heads // self.kv_heads
            a = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(g, 1),
                v.transpose(1, 2).repeat_interleave(g, 1), is_causal=True).transpose(1, 2)
        x = x + self.o(a.reshape(b, n, -1))
        return x + self.mlp(x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    vocab, width, seq = 64, 32, 48
    emb = nn.Embedding(vocab, width, dtype=torch.float64)
    fat = nn.Sequential(emb, Block(width, 4, 2, True), nn.Linear(width, vocab)).double()
    ref = copy.deepcopy(fat)
    ref[1].use_fatune = False
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (fat, ref)]
    tokens = torch.randint(0, vocab, (2, seq + 1))
    for step in range(args.steps):
        losses = []
        for model, opt in zip((fat, ref), opts):
            opt.zero_grad()
            logits = model(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, vocab), tokens[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        print("step %d: loss %.12f with fatune, %.12f with SDPA" % (step, *losses))
    worst = max(((a - b).norm() / b.norm()).item()
                for a, b in zip(fat.parameters(), ref.parameters()))
    print("weights after %d steps: largest relative difference %.2e" % (args.steps, worst))
    if worst > 1e-10:
        raise SystemExit("fatune's training diverged from SDPA's")


if __name__ == "__main__":
    main()
