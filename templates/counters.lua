-- counters.lua
-- The CPU emulator's counters, from their one list: FA_COUNTERS in
-- fa_counters.h, embedded with the templates. In that list's order, each as
-- { name = field, json = JSON key, label = table label }; counters[name]
-- is the entry of a name. The cost models report by these names.

local counters = {}

local text = file("fa_counters.h")
local list = text:match("#define FA_COUNTERS%(X%)(.-)\n\n")
assert(list, "fa_counters.h: no FA_COUNTERS list")
for name, json, label in list:gmatch('X%(([%w_]+), "([^"]*)", "([^"]*)"%)') do
  local entry = { name = name, json = json, label = label }
  counters[#counters + 1] = entry
  counters[name] = entry
end
assert(#counters > 0, "fa_counters.h: FA_COUNTERS lists no counter")

-- A tally for a cost model: every counter of `names` (a set) at 0, and
-- add(name, n); report(scale) lists the set's counts in the list's order,
-- each times scale(name), as { name, count } pairs.
function counters.tally(names)
  local n = {}
  for name in pairs(names) do
    if not counters[name] then error("no counter '" .. name .. "' in fa_counters.h", 2) end
    n[name] = 0
  end
  local t = { n = n }
  function t.add(name, v)
    if not n[name] then error("counter '" .. tostring(name) .. "' is not tallied", 2) end
    n[name] = n[name] + v
  end
  function t.report(scale)
    local out = {}
    for _, c in ipairs(counters) do
      if n[c.name] then out[#out + 1] = { c.name, n[c.name] * scale(c.name) } end
    end
    return out
  end
  return t
end

return counters
