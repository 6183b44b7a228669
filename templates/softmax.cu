$ -- softmax.cu: the parts softmax.lua renders (its header says what each is).
$ local F, sm = args.F, require("softmax")
$ local lit = sm.lit
$ local function S(e) return F.score(e) end
$ local function lanes(var, op)
$   if type(F.lanes) == "number" then
$     if F.lanes > 1 then
FA_UNROLL
for (int x = ${F.lanes // 2}; x > 0; x >>= 1) {
  const ${F.acc} y = fa_shfl_xor_${F.fn}(${var}, x);
$       if op == "max" then
  ${var} = ${var} > y ? ${var} : y;
$       else
  ${var} += y;
$       end
}
$     end
$   else
$     for _, w in ipairs(F.lanes) do
$       if op == "max" then
${var} = fmaxf(${var}, fa_shfl_xor_${F.fn}(${var}, ${w}));
$       else
${var} += fa_shfl_xor_${F.fn}(${var}, ${w});
$       end
$     end
$   end
$ end
$ -- The loops over a thread's rows, M.rows ({var, from, to}, outermost
$ -- first) from the k-th, around leaf(), which emits one row's code.
$ local function each_row(M, k, leaf)
$   local r = M.rows[k]
$   if not r then
$     leaf()
$   else
FA_UNROLL
for (int ${r[1]} = ${r[2]}; ${r[1]} < ${r[3]}; ++${r[1]}) {
  $ each_row(M, k + 1, leaf)
}
$   end
$ end
$
$ if args.part == "lane_reduce" then
$   lanes(args.var, args.op)
$ elseif args.part == "row_max" then
${F.acc} mx = NEG_INF;
FA_UNROLL
for (int ${F.col} = 0; ${F.col} < ${F.cols}; ++${F.col}) mx = fmaxf(mx, fmaxf(${S("0")}, ${S("1")}));
$   lanes("mx", "max")
const ${F.acc} mo = ${F.m};
$   if args.lazy then
/* lazy rescaling (FlashAttention-4's): the running max moves only when the
** block's is more than 2^8 above it in P's terms, so P stays at most 256
** and O is rescaled rarely once the max has settled */
const ${F.acc} mn = mo != NEG_INF && (mx - mo)${F.scaled and "" or " * sl2"} <= ${sm.lit(F, "8")} ? mo : fmaxf(mo, mx);
$   else
const ${F.acc} mn = fmaxf(mo, mx);
$   end
const ${F.acc} mu = ${sm.mu(F, "mn")}; /* a row with no key yet */
const ${F.acc} alpha = fa_exp2_${F.fn}(mo${F.scaled and "" or " * sl2"} - mu);
$ elseif args.part == "eager_factors" then
const ${F.acc} ln = ${F.l} * alpha + rs;
const ${F.acc} inv = ${sm.inverse(F, "ln")};
const ${F.acc} fo = ${F.l} * alpha * inv;
$ elseif args.part == "mask" then
$   local M = args.M
$   local function row()
$     if M.causal then
const int vis = ${M.vis};
const int lim = vis < p.seq_k ? vis : p.seq_k;
$     else
const int lim = p.seq_k;
$     end
const int col0 = ${M.col0};
/* the columns left visible from this thread's first one: compares with constants below */
const int room = lim - col0;
FA_UNROLL
for (int ${F.col} = 0; ${F.col} < ${F.cols}; ++${F.col}) {
  FA_UNROLL
  for (int e = 0; e < 2; ++e)
$     if M.mod then
    if (${F.col} * 8 + e >= room || !fa_mod_mask(mod_u, b, h, ${M.row}, col0 + ${F.col} * 8 + e, p.seq_q, p.seq_k, p.heads))
      ${S("e")} = NEG_INF;
$     else
    if (${F.col} * 8 + e >= room) ${S("e")} = NEG_INF;
$     end
}
$   end
$   local cond = M.key0 .. " + " .. M.keys .. " > p.seq_k"
$   if M.causal then cond = cond .. " || " .. M.key0 .. " + " .. (M.keys - 1) .. " > " .. M.last_row .. " + off" end
$   if M.mod then cond = cond .. " || " .. M.mod_class .. " != 2" end
$   if M.causal then
/* Mask the keys past seq_k and, on the diagonal, the keys a row must not see. */
$   else
/* Mask the keys past seq_k. */
$   end
$   if M.mod then
/* And those the modification's mask hides, in the blocks it does not leave whole. */
$   end
if (${cond}) {
  $ each_row(M, 1, row)
}
$ elseif args.part == "modify" then
$   local M = args.M
$   local function row()
const int col0 = ${M.col0};
FA_UNROLL
for (int ${F.col} = 0; ${F.col} < ${F.cols}; ++${F.col}) {
  FA_UNROLL
  for (int e = 0; e < 2; ++e)
    ${S("e")} = fa_mod_score(mod_u, ${S("e")} * to_nat, b, h, ${M.row}, col0 + ${F.col} * 8 + e, p.seq_q, p.seq_k, p.heads) * from_nat;
}
$   end
/* The score modification, in natural units (to_nat: the scores' units to them). */
{
$   if F.scaled then
  const ${F.acc} to_nat = ${lit(F, "0.69314718055994531")}, from_nat = ${lit(F, "1.4426950408889634")};
$   else
  const ${F.acc} to_nat = sl2 * ${lit(F, "0.69314718055994531")}, from_nat = ${lit(F, "1")} / to_nat;
$   end
  $ each_row(M, 1, row)
}
$ elseif args.part == "kv_end" then
$   if args.causal then
/* The keys a CTA of rows [q0, q0 + ${args.bm}) sees: to its last row's diagonal. */
const int last_row = (q0 + ${args.bm} < p.seq_q ? q0 + ${args.bm} : p.seq_q) - 1;
int kv_end = last_row + off + 1;
kv_end = kv_end < 0 ? 0 : (kv_end > p.seq_k ? p.seq_k : kv_end);
$   else
const int kv_end = p.seq_k;
$   end
$ elseif args.part == "mod_skip" then
/* a ${args.skipped} block the modification's mask hides from the ${args.skipped == "Q" and "K/V" or "Q"} block adds nothing */
if (fa_mod_block(b, mh, q0, (q0 + ${args.bm} < p.seq_q ? q0 + ${args.bm} : p.seq_q) - 1, k0,
                 (k0 + ${args.bn} < p.seq_k ? k0 + ${args.bn} : p.seq_k) - 1, p.seq_q, p.seq_k, p.heads) == 0)
  continue;
$ elseif args.part == "mod_range" then
/* The K/V blocks the modification's mask leaves visible to rows [q0, q0 + ${args.bm}):
** mod_first to mod_last, -1 when none (those between are masked key by key). */
int mod_first = -1, mod_last = -1;
{
  const int q_hi = (q0 + ${args.bm} < p.seq_q ? q0 + ${args.bm} : p.seq_q) - 1;
  for (int blk = 0; blk * ${args.bn} < kv_end; ++blk) {
    const int k_lo = blk * ${args.bn}, k_hi = (k_lo + ${args.bn} < p.seq_k ? k_lo + ${args.bn} : p.seq_k) - 1;
    if (fa_mod_block(b, h, q0, q_hi, k_lo, k_hi, p.seq_q, p.seq_k, p.heads) != 0) {
      if (mod_first < 0) mod_first = blk;
      mod_last = blk;
    }
  }
}
$ elseif args.part == "row_sum" then
$   if args.eager then
const ${F.acc} ${F.sum} = ${F.l};
$   else
${F.acc} ${F.sum} = ${F.l};  /* this thread's columns; then the quad's */
$     lanes(F.sum, "sum")
const ${F.acc} inv = ${sm.inverse(F, F.sum)};
$   end
$ end
