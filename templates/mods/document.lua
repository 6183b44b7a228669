-- Document masking (packed sequences, as FlexAttention's document mask):
-- a row sees only the keys of its own document. doc holds a document id
-- for each key; row q_idx is the key at q_idx + seq_k - seq_q (bottom-right
-- aligned, as the causal mask), so one tensor serves a prefill and a decode;
-- a row before the first key (more queries than keys) sees none.
return {
  doc = "document masking: a row sees the keys of its own document (doc: an id per key)",
  tensors = { { "doc", "int" } },
  mask = "q_idx + (seq_k - seq_q) >= 0 && doc[max(q_idx + (seq_k - seq_q), 0)] == doc[kv_idx]",
}
