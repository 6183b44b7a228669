-- decode.lua
-- What the decoding families (simtdec, tcdec) share: the copy of a block
-- of a paged KV cache, from the block table's pages to each key's rows'
-- offsets, and the cp.async of those rows into a stage of shared memory,
-- emitted from decode.cu; and the constant-trip loops they unroll.

local decode = {}

-- A loop of var over start, start + step, ... below n, with start below
-- step: a constant trip count, which the compiler unrolls, the tail
-- guarded where step does not divide n.
function decode.each(var, start, n, step)
  local trips = (n + step - 1) // step
  return string.format("for (int %s = %s, %s_it = 0; %s_it < %d; %s_it++, %s += %d)%s", var, start,
                       var, var, trips, var, var, step,
                       n % step == 0 and "" or " if (" .. var .. " < " .. n .. ")")
end

local function part(name, A)
  A.part = name
  return (render("decode.cu", A):gsub("\n$", ""))
end

-- The pages of keys k0.. (a C expression) from the block table, each key's
-- K and V rows' offsets into stage st's (read back by the mask); a page
-- outside the pool sets the kernel's `bad`. A: {BN, NT}.
function decode.offsets(A, k0, st)
  return part("offsets", { BN = A.BN, NT = A.NT, k0 = k0, st = st })
end

-- Stage st's K and V rows by cp.async, 16 bytes each, zeros for a key not
-- read; one group. A: {BN, NT, D, DV, IB (bytes an element), KRS, VRS
-- (bytes a row in shared memory), stage_bytes}.
function decode.issue(A, st)
  local B = { st = st }
  for k, v in pairs(A) do B[k] = v end
  return part("issue", B)
end

-- Under modification m's mask, the keys of the sequence (len) that the
-- CTA's query rows (group rows row0 .. row0 + R - 1, below grows) may see:
-- whole blocks of BN keys, from the first to the last that fa_mod_block
-- does not prove empty for them, as [vis_lo, vis_hi) (empty: none). The
-- threads take the blocks in turn and meet by shuffles, then through the
-- first 8 W bytes of shared memory, which must be free. A: {BN, NT, R, m}.
function decode.mod_range(A)
  local B = { BN = A.BN, NT = A.NT, R = A.R, W = A.NT // 32 }
  -- a mask of the head, each head of the CTA's rows apart; else all at once
  B.per_head = require("mod").uses(A.m.mask, "h")
  return part("mod_range", B)
end

return decode
