-- enum.lua
-- What the families' enumerations share.

local enum = {}

-- token (optional): how a value reads in variant names (space.name_of):
-- token[value] where given, else (token.prefix or "") .. value; "" leaves
-- the value out of the name.
function enum.int_axis(key, min, max, token)
  return { key = key, kind = "int", min = min, max = max, token = token }
end
function enum.enum_axis(key, values, token)
  return { key = key, kind = "enum", values = values, token = token }
end

-- V's and O's head dim when it is not Q's and K's (192/128 reads
-- "d192v128"); 0, V's head dim being Q's, is left out of names and of
-- canonical text (absent), so configs from before the axis keep their hash.
function enum.dim_v_axis(max)
  local a = enum.int_axis("dim_v", 0, max, { prefix = "v", [0] = "" })
  a.absent = 0
  return a
end

-- K and V read from a KV cache (paged.lua): pages through a block table,
-- each sequence's own length; the problem's addressing, as varlen.
function enum.paged_axis()
  local a = enum.int_axis("paged", 0, 1, enum.flag("paged"))
  a.absent = 0
  return a
end

-- A problem's dim_v as a config holds it: 0 when V's head dim is Q's.
function enum.dim_v(problem)
  local dv = problem.dim_v
  if not dv or dv == problem.dim then return 0 end
  return dv
end

-- The V head dim config c computes: its dim_v, or its dim.
function enum.vdim(c)
  return (c.dim_v or 0) ~= 0 and c.dim_v or c.dim
end

-- The token of a 0/1 axis named only when set ("-causal").
function enum.flag(word) return { [0] = "", [1] = word } end

-- A variable-length batch (varlen.lua): the problem's addressing, set from
-- the problem like causal, not a tuned choice; 0 is left out of names and
-- canonical text, so the dense configs keep their hash.
function enum.varlen_axis()
  local a = enum.int_axis("varlen", 0, 1, enum.flag("varlen"))
  a.absent = 0
  return a
end

-- The preludes every family's source takes today, per backend, in order
-- (the backend puts fa_params.h, and fa_counters.h and emu_abi.h on the
-- emulator, before).
enum.preludes = {
  cuda = { "prelude_cuda.cuh", "prelude_cuda_tc.cuh", "prelude_tile.h", "prelude_cuda_sm90.cuh" },
  emu = { "prelude_emu.h", "prelude_emu_tc.h", "prelude_emu_sm90.h", "prelude_tile.h" },
}

-- key -> axis, for a family's axis list.
function enum.index(axes)
  local t = {}
  for _, a in ipairs(axes) do t[a.key] = a end
  return t
end

-- Every combination of the values in `axes` (key -> list) over `base`,
-- appended to `out`, walking the keys in the order of `order` (a family's
-- axis list), so that listings read tile by tile.
function enum.cross(order, base, axes, out)
  local keys = {}
  for _, a in ipairs(order) do if axes[a.key] then keys[#keys + 1] = a.key end end
  local function rec(i, cfg)
    if i > #keys then
      local copy = {}
      for k, v in pairs(cfg) do copy[k] = v end
      out[#out + 1] = copy
      return
    end
    for _, v in ipairs(axes[keys[i]]) do cfg[keys[i]] = v; rec(i + 1, cfg) end
  end
  rec(1, base)
end

-- A copy of config base with the keys of changes set: one point of a
-- family's default space, varied from its base.
function enum.with(base, changes)
  local c = {}
  for k, v in pairs(base) do c[k] = v end
  for k, v in pairs(changes) do c[k] = v end
  return c
end

return enum
