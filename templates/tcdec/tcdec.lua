-- tcdec.lua
-- The tensor-core decoding family (op decode): simtdec's split-KV scheme
-- (its grid, page gathers, splits and combine) with the products on
-- tensor cores, for fp16 and bf16. A CTA holds 16 query rows of one K/V
-- head's group, one m16 tile (GQA packing: up to 16 query heads read the
-- K/V head's keys once), or with rows = 32 two m16 tiles (a group of 32
-- rows, as 8 query heads with 4 new tokens each: one CTA, not two, copies
-- the K/V head's keys), each tile its own warps; each block of keys is
-- split among a tile's warps, each warp keeping its own online softmax and
-- O over its keys (FlashAttention-1's split of the keys, which decoding's
-- single m-tile needs to give the warps work), merged through shared
-- memory once the split's keys are done. Per block: S = Q K^T by mma.sync m16n8k16 (Q's A fragments held
-- in registers for the whole split, K's B fragments by ldmatrix), the
-- scores scaled and masked in registers, P packed from S's accumulators
-- into A fragments (FlashAttention-2's reuse), O += P V with V's B
-- fragments by ldmatrix .trans. K and V come by cp.async, 16 bytes at a
-- time, into two stages: the next block's while this one is computed.

local tcdec = { name = "tcdec", version = 2 }
local enum = require("enum")

local int_axis, enum_axis = enum.int_axis, enum.enum_axis

tcdec.title = "tensor cores, split-KV decoding"
tcdec.targets = "any"
tcdec.rank = 1
tcdec.preludes = enum.preludes
tcdec.op = "decode"

local function arch_of(target) return tonumber(target.arch:match("^sm_(%d+)")) end

function tcdec.default_dtype(target)
  if arch_of(target) >= 80 then return "bf16", target.arch .. " has bf16 tensor cores" end
  return nil, target.arch .. " has no bf16 tensor cores (sm_80 and newer do)"
end

-- Names: tcdec-bf16-d128-[m32]n64w4-s16[-causal]; rows = 16 is left out
-- of names and canonical text, so configs from before the axis keep their
-- hash.
local rows_axis = int_axis("rows", 16, 32, { prefix = "m", [16] = "" })
rows_axis.absent = 16
tcdec.axes = {
  enum_axis("dtype", { "fp16", "bf16" }, { fp16 = "f16" }),
  int_axis("dim", 16, 256, { prefix = "d" }),
  enum.dim_v_axis(256),
  int_axis("causal", 0, 1, enum.flag("causal")),
  rows_axis,
  int_axis("block_n", 16, 512, { prefix = "n" }),
  int_axis("warps", 1, 16, { prefix = "w" }),
  int_axis("splits", 1, 256, { prefix = "s" }),
}
tcdec.axis = enum.index(tcdec.axes)
tcdec.naming = { { "dtype" }, { "dim", "dim_v" }, { "rows", "block_n", "warps" }, { "splits" },
                 { "causal" } }

-- The rows of a problem's group: kv_group * seq_q.
local function group_rows(problem)
  return math.max(problem.kv_group or 1, 1) * math.max(problem.seq_q or 1, 1)
end

-- rows keeps its absent value: a config's text without it means 16.
function tcdec.defaults(problem)
  return { dtype = problem.dtype or "bf16", dim = problem.dim or 128, dim_v = enum.dim_v(problem),
           causal = problem.causal or 0, rows = 16, block_n = 64, warps = 4, splits = 1 }
end

tcdec.fallbacks = { block_n = { 64, 32, 16 }, warps = { 4, 2, 1 } }

tcdec.mods = true    -- applies score and mask modifications (mod.lua)

function tcdec.supports(problem)
  return problem.dtype == "fp16" or problem.dtype == "bf16"
end

local function cdiv(a, b) return (a + b - 1) // b end

-- A row of 16-bit values padded so that the eight rows of an ldmatrix, or
-- of a phase of 16-byte copies, meet eight different groups of banks: an
-- odd number of 16-byte pieces.
local function padded(bytes)
  return (bytes // 16) % 2 == 1 and bytes or bytes + 16
end

-- Shared memory: the keys' offsets (two stages), the rows' last keys, Q
-- (R rows), then two stages of K and V rows, which the warps' partial
-- softmax states (m, l and O, fp32) take over at the end. MT m16 tiles,
-- WK warps each, NW keys of a block a warp.
function tcdec.plan(c)
  local D, DV, BN, W, R = c.dim, enum.vdim(c), c.block_n, c.warps, c.rows
  local MT = R // 16
  local P = { D = D, DV = DV, BN = BN, W = W, R = R, MT = MT, WK = W // MT, NT = 32 * W }
  P.NW = BN // P.WK
  P.QRS, P.KRS, P.VRS = padded(D * 2), padded(D * 2), padded(DV * 2)
  P.head_bytes = 32 * BN + 4 * math.max(R, 16)
  P.off_q = P.head_bytes
  P.off_stage = P.off_q + R * P.QRS
  P.stage_bytes = BN * (P.KRS + P.VRS)
  P.merge_bytes = W * (16 * DV + 32) * 4
  P.smem = P.off_stage + math.max(2 * P.stage_bytes, P.merge_bytes)
  -- Q's A fragments, S's and O's accumulators
  P.reg_words = 4 * (D // 16) + 4 * (P.NW // 8) + 4 * (DV // 8) + 40
  return P
end

function tcdec.fits(c, _, target)
  if c.dtype == "bf16" and arch_of(target) < 80 then
    return false, target.arch .. " has no bf16 tensor cores"
  end
  if c.dim % 16 ~= 0 or enum.vdim(c) % 16 ~= 0 then
    return false, "head dims not multiples of 16 (the products' k16 and n8 steps)"
  end
  local rows = c.rows
  if rows ~= 16 and rows ~= 32 then return false, "rows 16 or 32 (one or two m16 tiles)" end
  if c.warps % (rows // 16) ~= 0 then
    return false, "warps not a multiple of the m16 tiles (rows / 16): each tile its own warps"
  end
  if c.block_n % (16 * (c.warps // (rows // 16))) ~= 0 then
    return false, "block_n not a multiple of 16 keys per warp of a tile"
  end
  local P = tcdec.plan(c)
  if P.NT > target.max_threads then return false, "too many threads" end
  if P.smem > target.smem then return false, "shared memory over the limit" end
  if P.reg_words > 255 then return false, "registers over 255 per thread" end
  return true
end

local function cross(base, axes, out) enum.cross(tcdec.axes, base, axes, out) end

function tcdec.enumerate(problem, which)
  local base = { dtype = problem.dtype, dim = problem.dim, dim_v = enum.dim_v(problem),
                 causal = problem.causal or 0 }
  local out = {}
  if which == "full" then
    cross(base, { rows = { 16, 32 }, block_n = { 32, 64, 128, 256 }, warps = { 1, 2, 4, 8 },
                  splits = { 1, 2, 4, 8, 16, 32, 64, 128 } }, out)
  elseif which == "small" then
    cross(base, { rows = { 16 }, block_n = { 16, 32 }, warps = { 1 }, splits = { 1, 4 } }, out)
  else
    cross(base, { rows = { 16 }, block_n = { 64, 128 }, warps = { 4 }, splits = { 1, 2, 4, 8, 16, 32 } }, out)
    -- a group of more than 16 rows: also in one CTA of two tiles' warps
    if group_rows(problem) > 16 then
      cross(base, { rows = { 32 }, block_n = { 64, 128 }, warps = { 4, 8 },
                    splits = { 1, 2, 4, 8, 16, 32 } }, out)
    end
  end
  return out
end

function tcdec.render(c)
  local P = tcdec.plan(c)
  local entry = tcdec.name_of(c):gsub("-", "_")
  local args = { cfg = c, P = P, entry = entry }
  local split = { entry = entry .. "_split", threads = P.NT, smem_bytes = P.smem, main = true,
                  grid = { c.splits, { "kv_rows", P.R }, "batch" }, workspaces = {} }
  local out = { source = render("tcdec.cu", args), launches = { split },
                registers_estimate = P.reg_words, io_align = 16 }
  if c.splits > 1 then
    local ws = { { name = "partial", bytes_per_row = c.splits * (P.DV + 1) * 4 } }
    split.workspaces = ws
    out.launches[2] = { entry = entry .. "_combine", threads = P.NT, smem_bytes = 0,
                        grid = { { "seq_q", 1 }, "heads", "batch" }, workspaces = ws }
  end
  return out
end

return tcdec
