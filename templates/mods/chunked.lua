-- Chunked local attention (Llama 4): causal within chunks of `size` keys,
-- nothing across them (bottom-right aligned).
return {
  doc = "chunked: causal within chunks of size keys",
  params = { { "size", 1024 } },
  mask = "(q_idx + (seq_k - seq_q)) / size == kv_idx / size && kv_idx <= q_idx + (seq_k - seq_q)",
}
