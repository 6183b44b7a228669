-- tc_explore.lua
-- What `fatune explore` sweeps in this family: its precision axes against
-- FlashAttention-2's choices around the default, each with the error it
-- costs (validation against float64 on the emulator, the adversarial
-- suite included) and the speed it buys (the timing model's TFLOP/s on
-- the target's GPU or --gpu's). tc has no cost model of the emulator's
-- counters: they are shown measured.

return {
  kernel = "tc.cu",
  counters = {
    "gmem_read", "gmem_written", "smem_read", "smem_written", "exp2", "rescale", "mma", "ldmatrix",
    "shuffles", "barriers",
  },
  axes = {
    { name = "precision",
      title = "FlashAttention-2's (Q K^T accumulated in fp32, O rescaled at every new row max) "
           .. "against Q K^T accumulated in fp16 and lazy rescaling (FlashAttention-4's)",
      points = {
        { "fa2", "s_acc=f32,rescale=always" }, { "s_f16", "s_acc=f16,rescale=always" },
        { "lazy", "s_acc=f32,rescale=lazy" }, { "f16_lazy", "s_acc=f16,rescale=lazy" },
      },
      why = "fp16 accumulation rounds each logit to 11 bits and runs at twice the fp32 rate on "
         .. "GeForce Ampere and Ada (the same rate on A100 and H100; fp16 inputs only); lazy "
         .. "rescaling moves a row's max only when it grows by more than 8 in log2 units and skips "
         .. "O's rescale while no row of the warp moved it, P's terms then up to 256",
      key = { "rescale" }, key_label = "rescale multiplies" },
  },
}
