-- enum.lua
-- What the families' enumerations share.

local enum = {}

function enum.int_axis(key, min, max) return { key = key, kind = "int", min = min, max = max } end
function enum.enum_axis(key, values) return { key = key, kind = "enum", values = values } end

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
