-- Soft-capping (Gemma 2, Grok): scores squashed into (-cap, cap) by tanh,
-- as FlashAttention-2's softcap.
return {
  doc = "soft-capping: cap * tanh(score / cap)",
  params = { { "cap", 30.0 } },
  score = "cap * tanh(score / cap)",
}
