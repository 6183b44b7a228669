-- Prefix-LM (T5, UniLM): the first `prefix` keys are seen by every row, the
-- rest causally (bottom-right aligned).
return {
  doc = "prefix-LM: keys before prefix seen by all, the rest causal",
  params = { { "prefix", 128 } },
  mask = "kv_idx < prefix || kv_idx <= q_idx + (seq_k - seq_q)",
}
