-- softmax.lua
-- The online softmax, its causal mask and its epilogue, once for every
-- kernel (as FlashAttention-3 keeps one softmax.h and one mask.h): the
-- families describe how their score fragment is laid out, and these
-- functions emit the code for it. Block parts (lane_reduce, row_max,
-- eager_factors, mask, row_sum) return text without a final newline, for a
-- template line that is nothing but `${...}` or a `$` statement that emits
-- it; expression parts (mu, inverse, lse) return one C expression.
--
-- A layout F is a table:
--   acc     C type of scores and statistics: "float" (the mma fragments,
--           whose literals are 0.f, 1.f) or a typedef such as "acc_t"
--           (literals cast to it);
--   fn      suffix of the preludes' fa_exp2_, fa_log2_, fa_shfl_xor_,
--           fa_rescale_ ("f32", "f64");
--   lanes   how a row reduces across the threads that share it: a list of
--           shuffle XOR widths, unrolled ({1, 2}: a quad), or a count of
--           lanes G, a loop over the widths G/2 .. 1;
--   scaled  true when the scores are in log2 units already (scale applied
--           as they are computed); else they are raw and the scale sl2
--           (the softmax scale times log2 e, a C variable of the kernel)
--           applies inside each exponential, and the running max m stays
--           raw too;
-- and, for the mma fragments (row_max, eager_factors, mask, row_sum):
--   col, cols  the loop variable and count of a row's column pairs;
--   score(e)   the C lvalue of element e (a C expression, "0" or "1" or a
--              loop variable) of pair `col` of the current row;
--   m, l       the current row's running max and sum of exponentials;
--   sum        the name row_sum gives the row's final sum.
-- The kernel declares NEG_INF and sl2 (when not scaled).

local softmax = {}

local function part(name, F, extra)
  local args = { part = name, F = F }
  for k, v in pairs(extra or {}) do args[k] = v end
  return (render("softmax.cu", args):gsub("\n$", ""))
end

-- A literal of the layout's type.
local function lit(F, x)
  if F.acc == "float" then return x .. (x:find("%.") and "f" or ".f") end
  return "(" .. F.acc .. ")" .. x
end
softmax.lit = lit

-- `var` reduced over the lanes of its row in place: op "max" or "sum".
function softmax.lane_reduce(F, var, op)
  return part("lane_reduce", F, { var = var, op = op })
end

-- The row's max over its fragment and lanes (mx), the running max before
-- (mo) and after (mn), mu (mn in log2 units, 0 for a row with no key yet)
-- and alpha, the factor of what was summed before. lazy: the max moves
-- only when the block's exceeds it by more than 8 in log2 units (P up to
-- 256), else alpha is 1 (deferred normalization's lazy rescaling).
function softmax.row_max(F, lazy) return part("row_max", F, { lazy = lazy }) end

-- Eager normalization (FlashAttention-1), once this thread's sum of the
-- row's exponentials is in rs: rs summed over the lanes, the new sum ln,
-- inv = 1 / ln (0 for an empty row) for P, and fo for O.
function softmax.eager_factors(F) return part("eager_factors", F) end

-- mn in log2 units, 0 for a row with no key yet (mn is -inf).
function softmax.mu(F, mn)
  return mn .. " == NEG_INF ? " .. lit(F, "0") .. " : " .. mn .. (F.scaled and "" or " * sl2")
end

-- 1 / l, 0 for a row with no key (l exactly 0; a NaN l, from NaN or Inf
-- in the inputs, stays NaN, as the float64 reference's).
function softmax.inverse(F, l)
  local zero = F.acc == "float" and "0.f" or "0"
  return l .. " == " .. zero .. " ? " .. lit(F, "0") .. " : " .. lit(F, "1") .. " / " .. l
end

-- The natural logsumexp of a row of running max m and sum l; -inf for a
-- row that saw no key (l exactly 0; a NaN l stays NaN, as in inverse).
function softmax.lse(F, m, l)
  local zero = F.acc == "float" and "0.f" or "0"
  local m2 = F.scaled and m or m .. " * sl2"
  return l .. " == " .. zero .. " ? NEG_INF : (" .. m2 .. " + fa_log2_" .. F.fn .. "(" .. l ..
         ")) * " .. lit(F, "0.69314718055994530942")
end

-- The mask of the mma fragments: -inf for the keys past seq_k and, causal,
-- those a row must not see, only in blocks that reach past either. M:
--   causal    whether the causal mask applies;
--   key0      the block's first key, keys its count;
--   last_row  the last row of the fragment's rows (the diagonal test);
--   rows      the loops over the thread's rows: { {var, from, to}, ... };
--   vis       the first key the current row must not see (causal);
--   col0      the thread's first column in a pair, relative to key0;
-- and with a modification's mask (mod.lua), also applied:
--   mod       true;
--   mod_class the block pair's class, fa_mod_block's (2: the mask hides
--             no key there, and the part is skipped when nothing else cuts);
--   row       the current row's index in the sequence.
function softmax.mask(F, M) return part("mask", F, { M = M }) end

-- A modification's score part applied to every score of the fragment
-- (before the mask): M as for mask, its rows, row and col0.
function softmax.modify(F, M) return part("modify", F, { M = M }) end

-- The end of the keys a CTA of rows [q0, q0 + bm) visits: kv_end, and,
-- causal, last_row (its last row, the mask's diagonal test); q0 and off
-- (seq_k - seq_q) are the kernel's.
function softmax.kv_end(causal, bm)
  return part("kv_end", {}, { causal = causal, bm = bm })
end

-- Under a modification's mask, the K/V blocks (of bn keys, before kv_end)
-- that rows [q0, q0 + bm) visit: mod_first to mod_last, the first and last
-- that fa_mod_block does not prove empty (-1 when none).
function softmax.mod_range(bm, bn)
  return part("mod_range", {}, { bm = bm, bn = bn })
end

-- Under a modification's mask, `continue` past a block pair that
-- fa_mod_block proves empty: rows q0.. (bm) and keys k0.. (bn), each cut
-- at its length, of the kernel's head mh. The backward pass's loops over
-- the Q blocks of a K/V block (skipped "Q") and the other way ("K/V").
function softmax.mod_skip(bm, bn, skipped)
  return part("mod_skip", {}, { bm = bm, bn = bn, skipped = skipped })
end

-- The epilogue's sum of a row (F.sum, lane-summed) and inv, O's factor:
-- 1 / sum when deferred, and when eager O is normalized already.
function softmax.row_sum(F, eager) return part("row_sum", F, { eager = eager }) end

return softmax
