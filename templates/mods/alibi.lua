-- ALiBi (Press et al., 2022): a penalty linear in the distance from the
-- diagonal (bottom-right aligned), with the paper's slopes 2^(-8 (h + 1) / H)
-- (its geometric sequence for a power-of-two number of heads H).
return {
  doc = "ALiBi: score - 2^(-8 (h + 1) / heads) * |q_idx + seq_k - seq_q - kv_idx|",
  score = "score - exp2(-8.0 * (h + 1) / heads) * float(abs(q_idx + (seq_k - seq_q) - kv_idx))",
}
