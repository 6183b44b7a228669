-- A learned relative-position bias (Shaw et al., 2018; T5's without its
-- buckets): a table of 2 span + 1 values per head, added to the score at
-- the distance from the diagonal (bottom-right aligned) clamped to
-- -span..span. bias holds heads * (2 span + 1) floats.
return {
  doc = "relative-position bias: score + bias[h][clamp(kv_idx - q_idx - (seq_k - seq_q), -span, span) + span]",
  params = { { "span", 128 } },
  tensors = { { "bias", "float" } },
  score = "score + bias[h * (2 * span + 1) + span + min(max(kv_idx - q_idx - (seq_k - seq_q), -span), span)]",
}
