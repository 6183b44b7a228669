-- simtbwd_explore.lua
-- What `fatune explore --op bwd` sweeps in this family: the backward
-- pass's FlashAttention-1 against FlashAttention-2 choices, one axis at a
-- time around the defaults (space.lua documents the `explore` field).

return {
  model = "simtbwd_model.lua",
  kernel = "simtbwd.cu",
  counters = {
    "gmem_read", "gmem_written", "atomics", "smem_read", "smem_written", "exp2", "shuffles",
    "barriers",
  },
  axes = {
    { name = "order",
      title = "loop order: parallel over Q blocks (FlashAttention-1) against over K/V blocks "
           .. "(FlashAttention-2)",
      points = { { "q", "order=q,dq=separate" }, { "kv", "order=kv,dq=separate" } },
      why = "FA1's CTA owns a Q block and adds every K/V block's shares of dK and dV to float "
         .. "accumulators with atomics (zeroed, then scaled, by two launches more); FA2's owns a "
         .. "K/V block, keeps dK and dV in registers and writes them once, and gives dQ a pass "
         .. "of its own",
      key = { "atomics" }, key_label = "global atomic adds" },
    { name = "dq",
      title = "dQ: a pass of its own, deterministic, against atomic adds (FlashAttention-2)",
      points = { { "separate", "dq=separate" }, { "atomic", "dq=atomic" } },
      why = "the separate pass recomputes P and dS once more, a CTA per Q block, and writes dQ "
         .. "once; atomic adds each K/V block's dS K to a float accumulator as dkdv goes, in an "
         .. "order that changes from run to run",
      key = { "exp2" }, key_label = "exponentials (P recomputed)" },
    { name = "tiles",
      title = "tile: block_m x block_n",
      points = {
        { "16x32", "block_m=16,block_n=32" }, { "32x32", "block_m=32,block_n=32" },
        { "64x32", "block_m=64,block_n=32" }, { "64x64", "block_m=64,block_n=64" },
      },
      why = "each K/V block's CTA reads Q, dO, the logsumexp and D once per Q block, and each Q "
         .. "block's reads K and V once per K/V block: larger tiles read them fewer times, for "
         .. "more shared memory per CTA" },
  },
}
