-- The causal mask as a modification, in either alignment: align 0 puts the
-- diagonal at the bottom-right corner when seq_q != seq_k (row r sees keys
-- up to r + seq_k - seq_q, as flash_attn 2.1 and fatune's --causal), align
-- 1 at the top-left (row r sees keys up to r, as PyTorch's is_causal).
return {
  doc = "causal: keys up to the diagonal (align 0 bottom-right, 1 top-left)",
  params = { { "align", 0 } },
  mask = "kv_idx <= q_idx + (1 - align) * (seq_k - seq_q)",
}
