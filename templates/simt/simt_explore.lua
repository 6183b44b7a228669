-- simt_explore.lua
-- What `fatune explore` sweeps in this family: FlashAttention-1 against
-- FlashAttention-2, one axis at a time around the defaults (space.lua
-- documents the `explore` field).

return {
  model = "simt_model.lua",
  kernel = "simt.cu",
  paper = true,   -- the FlashAttention paper's bounds and its peak memory follow
  counters = {
    "gmem_read", "gmem_written", "smem_read", "smem_written", "exp2", "log2", "rescale", "mma",
    "shuffles", "barriers", "warp_syncs",
  },
  axes = {
    { name = "norm",
      title = "normalization: eager (FlashAttention-1) against deferred (FlashAttention-2)",
      points = { { "eager", "norm=eager" }, { "deferred", "norm=deferred" } },
      why = "eager scales O and P by l_old*alpha/l_new and 1/l_new at every K/V tile; deferred scales "
         .. "only O, by alpha, and divides it by l once at the end",
      key = { "rescale" }, key_label = "rescale multiplies" },
    { name = "parallel",
      title = "loop order: kv_outer (FlashAttention-1) against q_outer (FlashAttention-2)",
      points = { { "kv_outer", "par=kv_outer" }, { "q_outer", "par=q_outer" } },
      why = "kv_outer reads Q and reads and writes O, m and l once per (K/V tile, Q tile) pair; q_outer "
         .. "reads K and V once per Q tile and writes O once",
      key = { "gmem_read", "gmem_written" }, key_label = "global-memory bytes" },
    { name = "warp_split",
      title = "work split among warps: split_k (FlashAttention-1) against split_q "
           .. "(FlashAttention-2)",
      points = { { "split_k", "split=split_k" }, { "split_q", "split=split_q" } },
      why = "split_k's warps exchange row maxima, row sums and partial O through shared memory at every "
         .. "K/V tile, behind three more barriers; split_q's warps own whole rows",
      key = { "smem_read", "smem_written" }, key_label = "shared-memory bytes" },
    { name = "layout",
      title = "shared-memory layout: row-major, padded rows, K transposed",
      points = { { "row", "layout=row" }, { "pad", "layout=pad" }, { "kt", "layout=kt" } },
      why = "the layouts move the same bytes: they differ in bank conflicts, which the emulator does not "
         .. "model (a GPU times them), and in shared memory per CTA" },
    { name = "tiles",
      title = "tile: block_m x block_n",
      points = {
        { "32x32", "block_m=32,block_n=32" }, { "64x32", "block_m=64,block_n=32" },
        { "64x64", "block_m=64,block_n=64" }, { "128x64", "block_m=128,block_n=64" },
      },
      why = "K and V are read once per Q tile: taller tiles read them fewer times, for more shared "
         .. "memory per CTA" },
  },
}
