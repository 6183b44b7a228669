-- wg_explore.lua
-- What `fatune explore` sweeps in this family: FlashAttention-3's choices,
-- one axis at a time around the defaults (space.lua documents the
-- `explore` field).

return {
  -- The 16-bit types: fp8's kernels (a transpose launch, k32 wgmma) are
  -- not in the cost model; `explore --axis quant` is fp8's.
  dtypes = { "fp16", "bf16" },
  model = "wg_model.lua",
  kernel = "wg.cu",
  counters = {
    "gmem_read", "gmem_written", "tma_bytes", "smem_read", "smem_written", "exp2", "log2",
    "rescale", "wgmma", "wgmma_flops", "mbar_waits", "named_waits", "shuffles", "barriers",
  },
  axes = {
    { name = "norm",
      title = "normalization: eager (FlashAttention-1) against deferred (FlashAttention-2, -3)",
      points = { { "eager", "norm=eager" }, { "deferred", "norm=deferred" } },
      why = "eager scales O by l_old*alpha/l_new and P by 1/l_new at every K/V block; deferred scales "
         .. "only O, by alpha, and divides it by l once at the end",
      key = { "rescale" }, key_label = "rescale multiplies" },
    { name = "pingpong",
      title = "ping-pong: two consumer warpgroups take turns, one's softmax under the other's "
           .. "GEMMs (FlashAttention-3), against none",
      points = {
        { "none", "consumers=2,block_m=128,pingpong=0" }, { "pp", "consumers=2,block_m=128,pingpong=1" },
      },
      why = "ping-pong orders the consumers' GEMMs with named barriers: each thread waits for its turn "
         .. "before it issues S = Q K^T, once per K/V block, and hands the turn over once its GEMMs are "
         .. "issued; the work itself is the same",
      key = { "named_waits" }, key_label = "named-barrier waits" },
    { name = "overlap",
      title = "intra-warpgroup overlap: S of the next K/V block issued before this block's "
           .. "softmax (FlashAttention-3), against none",
      points = { { "none", "overlap=0" }, { "ov", "overlap=1" } },
      why = "overlap reorders the same wgmma and exponentials: a GPU times the difference, the counts "
         .. "stay",
      key = { "wgmma" }, key_label = "wgmma" },
    { name = "consumers",
      title = "consumer warpgroups: one against two (each owns 64 rows of the Q block)",
      points = {
        { "1", "consumers=1,pingpong=0,block_m=64" }, { "2", "consumers=2,pingpong=0,block_m=128" },
      },
      why = "two consumers share each K/V block the producer loads: half the TMA bytes of K and V per "
         .. "query row",
      key = { "tma_bytes" }, key_label = "TMA box bytes" },
    { name = "stages",
      title = "K/V pipeline stages: 2 against 3",
      points = { { "2", "stages=2" }, { "3", "stages=3" } },
      why = "stages hold more K/V blocks in flight, for more shared memory per CTA; the same bytes move",
      key = { "mbar_waits" }, key_label = "mbarrier waits" },
  },
}
