-- A sliding window (Mistral, Gemma 2): a row sees the keys from `left`
-- before its diagonal to `right` after it, the diagonal bottom-right
-- aligned as FlashAttention-2's window_size=(left, right).
return {
  doc = "sliding window: keys from left before the diagonal to right after it",
  params = { { "left", 256 }, { "right", 0 } },
  mask = "kv_idx >= q_idx + (seq_k - seq_q - left) && kv_idx <= q_idx + (seq_k - seq_q + right)",
}
