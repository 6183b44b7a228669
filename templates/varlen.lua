-- varlen.lua
-- A variable-length batch in the forward families (simt, tc): Q, K, V and
-- O packed as flash_attn_varlen_func has them, (total, heads, dim), each
-- sequence's tokens from cu_seqlens (fa_params.h). The kernel takes the
-- argument block as pv and makes its own p, the problem of the sequence of
-- its fa_bid_z(): lengths, and pointers moved to the sequence's first
-- token, so that the body addresses one sequence as it addresses one
-- batch of a dense problem. Only what differs is emitted here; a dense
-- config (varlen 0) renders as before.

local varlen = {}

-- The kernel's head for config c: macro (FA_KERNEL or FA_TC_KERNEL) naming
-- entry with nt threads, and for a varlen config the sequence's problem:
-- its lengths, and vq_lo and vk_lo, its first query and key, which the
-- addresses add (row). The pointers stay the argument block's, so that
-- no 64-bit base of the sequence is live through the main loop.
function varlen.kernel(c, macro, entry, nt)
  if c.varlen ~= 1 then return string.format("%s(%s, %d)\n{", macro, entry, nt) end
  return string.format([[
%s_OF(%s, %d, pv)
{
  /* A variable-length batch: sequence fa_bid_z() as a problem of its own.
  ** Offsets outside the packed tensors, or a length past the longest the
  ** grid covers, are never followed: the CTA sets error[1] and stops. */
  fa_params p = pv;
  %s
  if (%s) {
    if (fa_tid() == 0) fa_st_i32(pv.error + 1, 1);
    return;
  }
  p.seq_q = vq_hi - vq_lo, p.seq_k = vk_hi - vk_lo;
  p.q_sb = p.k_sb = p.v_sb = p.o_sb = 0;]], macro, entry, nt, varlen.offsets("fa_bid_z()"),
                       varlen.bad_offsets())
end

-- Sequence seq's offsets (a C expression), read from the argument block pv
-- into vq_lo, vq_hi, vk_lo and vk_hi.
function varlen.offsets(seq)
  return string.format([[const int vq_lo = fa_ldg_i32(pv.cu_seqlens_q + %s), vq_hi = fa_ldg_i32(pv.cu_seqlens_q + %s + 1);
  const int vk_lo = fa_ldg_i32(pv.cu_seqlens_k + %s), vk_hi = fa_ldg_i32(pv.cu_seqlens_k + %s + 1);]],
                       seq, seq, seq, seq)
end

-- The condition under which those offsets are not followed: outside the
-- packed tensors, decreasing, or longer than the longest the grid covers.
function varlen.bad_offsets()
  return [[vq_lo < 0 || vq_hi < vq_lo || vq_hi > pv.total_q || vq_hi - vq_lo > pv.seq_q ||
      vk_lo < 0 || vk_hi < vk_lo || vk_hi > pv.total_k || vk_hi - vk_lo > pv.seq_k]]
end

-- What the address of tensor t's rows ("q", "k", "v" or "o") adds under
-- varlen: the sequence's first token's offset; kv_lo, the expression of
-- the first key where it is not vk_lo.
function varlen.row(c, t, kv_lo)
  if c.varlen ~= 1 then return "" end
  local lo = t == "q" and "vq_lo" or t == "o" and "vq_lo_again" or kv_lo or "vk_lo"
  return string.format(" + (long long)%s * p.%s_sn", lo, t)
end

-- Under varlen, the first key kept in shared memory at byte offset off, a
-- slot per thread (store: the prologue's; else the main loop's read, at an
-- address the compiler cannot hoist).
function varlen.kept_key(off, store)
  if store then
    return string.format("fa_sts_i32((int *)((unsigned char *)fa_smem_base() + %d) + fa_tid(), vk_lo);", off)
  end
  return string.format("fa_lds_i32((const int *)((unsigned char *)fa_smem_base() + %d) + fa_tid_again())", off)
end

-- Under varlen, the sequence's first query read again after the main loop,
-- where O and the logsumexp need it: from an index the compiler cannot see
-- through, so that it neither merges the two reads nor keeps the first live.
function varlen.again()
  return "const int vq_lo_again = fa_ldg_i32(pv.cu_seqlens_q + fa_again_i32(fa_bid_z()));"
end

-- The logsumexp of head h (C expressions b, h): dense [batch][heads][seq_q],
-- varlen [heads][total_q] from the sequence's first token.
function varlen.lse(c, acc, b, h)
  if c.varlen ~= 1 then
    return string.format("(%s *)p.lse + ((long long)%s * p.heads + %s) * p.seq_q", acc, b, h)
  end
  return string.format("(%s *)p.lse + (long long)%s * pv.total_q + vq_lo_again", acc, h)
end

-- The query rows a workspace holds per (batch, head): the longest
-- sequence's under varlen, so that sequences of their own lengths never
-- share a row.
function varlen.rows(c) return c.varlen == 1 and "pv.seq_q" or "p.seq_q" end

-- Under varlen, a CTA whose query block q0 lies past its sequence's rows
-- (with len "p.seq_k": whose K/V block, keys) stops (the grid covers the
-- longest).
function varlen.past(q0, len)
  return string.format("if ((unsigned)%s >= (unsigned)%s) return; /* past this sequence */", q0,
                       len or "p.seq_q")
end

-- The backward families (simtbwd, tcbwd) address every tensor of a
-- sequence from its first token, as the forward families do, and index
-- their workspaces by the longest sequence's rows (rows, key_rows).

-- A backward launch's head: kernel's, with the gradients' batch strides
-- dropped as the inputs' are.
function varlen.bwd_kernel(c, macro, entry, nt)
  local head = varlen.kernel(c, macro, entry, nt)
  if c.varlen ~= 1 then return head end
  return head .. "\n  p.do_sb = p.dq_sb = p.dk_sb = p.dv_sb = 0;"
end

-- What the address of tensor t's rows adds under varlen in the backward
-- pass: t is a stride's prefix (q, o, do, dq from the sequence's first
-- query; k, v, dk, dv from its first key).
function varlen.bwd_row(c, t)
  if c.varlen ~= 1 then return "" end
  local key = t == "k" or t == "v" or t == "dk" or t == "dv"
  return string.format(" + (long long)%s * p.%s_sn", key and "vk_lo" or "vq_lo", t)
end

-- The first element of head h's logsumexp (and its gradient) in batch b
-- (C expressions): dense [batch][heads][seq_q], varlen [heads][total_q]
-- from the sequence's first query.
function varlen.lse_row(c, b, h)
  if c.varlen ~= 1 then return string.format("((long long)%s * p.heads + %s) * p.seq_q", b, h) end
  return string.format("((long long)%s * pv.total_q + vq_lo)", h)
end

-- The key rows a workspace holds per (batch, K/V head), as rows.
function varlen.key_rows(c) return c.varlen == 1 and "pv.seq_k" or "p.seq_k" end

return varlen
