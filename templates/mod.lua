-- mod.lua
-- Score and mask modifications, defined once and used three ways.
--
-- A modification is a file of constants and expression strings, read by a
-- parser here and never run as code (a file from a user is data):
--
--   return {
--     doc    = "what it is, one line",
--     params = { { "cap", 30.0 } },     -- `--mod softcap=50` sets cap
--     score  = "cap * tanh(score / cap)",
--     mask   = "kv_idx <= q_idx + seq_k - seq_q",
--   }
--
-- `score` rewrites a score (the scaled q.k, in natural units) and `mask`
-- says which keys a row sees; either may be absent. Their language is C's
-- expressions over ints, floats and truth values: + - * / % (integer / and %
-- by a positive constant), comparisons, && || !, c ? a : b, and abs, min,
-- max, exp, exp2, log, log2, tanh, sqrt, float(). Names: score (float, in
-- score only), b, h, q_idx, kv_idx, seq_q, seq_k, heads (ints), the params,
-- and the captured tensors, read as name[index]:
--
--     tensors = { { "doc", "int" }, { "bias", "float" } },
--     mask    = "doc[q_idx] == doc[kv_idx]",
--
-- A captured tensor is a run-time argument (1-D, int32 or float32, of any
-- length): changing its contents never recompiles. An index outside it
-- reads 0, and the kernel raises a flag that fails the call. A block pair
-- whose class depends on a tensor's values is classified at run time, from
-- a block mask built from the tensors (fa_params.block_mask; partial
-- without one). Each expression is typed here, then emitted
--   * as C for the kernels (mod.c_functions: fa_mod_score, fa_mod_mask and
--     fa_mod_block, which classifies a (Q block, K/V block) pair as empty,
--     partial or full by interval arithmetic, so that kernels skip what a
--     mask hides);
--   * as a postfix program that the float64 reference interprets
--     (core/fa_mod.c), so that kernel and reference read one definition.

local mod = {}

local MAX_TEXT = 16384      -- bytes of a mod file
local MAX_NODES = 200       -- nodes of one expression (the C program's room)
local MAX_PROGRAM = 256     -- ops of a program (core/fa_mod.h's FA_MOD_MAX_OPS)
local MAX_TENSORS = 4       -- captured tensors (FA_MOD_MAX_TENSORS)
local MAX_NAME = 31         -- bytes of a tensor's name (FA_MOD_MAX_NAME - 1)

-- Lexer ----------------------------------------------------------------------

local symbols = { "&&", "||", "==", "!=", "<=", ">=", "<", ">", "+", "-", "*", "/", "%", "!",
                  "?", ":", "(", ")", "{", "}", "[", "]", "=", ",", ";" }

-- The tokens of text: {kind, value, line}, kind "name", "number", "string",
-- "sym" or "eof"; fail(msg, line) raises.
local function lex(text, line0, fail)
  local toks, i, line = {}, 1, line0
  local function push(kind, v) toks[#toks + 1] = { kind = kind, v = v, line = line } end
  while i <= #text do
    local c = text:sub(i, i)
    if c == "\n" then line, i = line + 1, i + 1
    elseif c:match("%s") then i = i + 1
    elseif text:sub(i, i + 1) == "--" then
      local long = text:match("^%-%-%[(=*)%[", i)
      local stop = long and text:find("]" .. long .. "]", i, true) or text:find("\n", i, true)
      if long and not stop then fail("unfinished long comment", line) end
      stop = stop or #text + 1
      local _, n = text:sub(i, stop):gsub("\n", "")
      if not long then n = 0 end
      line, i = line + n, (long and stop + #long + 2 or stop)
    elseif c:match("[%a_]") then
      local w = text:match("^[%w_]+", i)
      push("name", w)
      i = i + #w
    elseif c:match("%d") or (c == "." and text:sub(i + 1, i + 1):match("%d")) then
      local w = text:match("^%d*%.?%d*[eE][%+%-]?%d+", i) or text:match("^%d*%.?%d*", i)
      local v = tonumber(w)
      if not v or w:match("^0%d") then fail("malformed number '" .. w .. "'", line) end
      if math.type(v) == "float" and (v ~= v or v == math.huge) then fail("number out of range", line) end
      push("number", v)
      i = i + #w
    elseif c == '"' or c == "'" then
      local j, buf = i + 1, {}
      while true do
        local d = text:sub(j, j)
        if d == "" or d == "\n" then fail("unfinished string", line) end
        if d == c then break end
        if d == "\\" then
          local e = text:sub(j + 1, j + 1)
          local map = { n = "\n", t = "\t", ["\\"] = "\\", ['"'] = '"', ["'"] = "'" }
          if not map[e] then fail("unknown escape '\\" .. e .. "' in a string", line) end
          buf[#buf + 1], j = map[e], j + 2
        else
          buf[#buf + 1], j = d, j + 1
        end
      end
      push("string", table.concat(buf))
      i = j + 1
    elseif text:match("^%[=*%[", i) then
      local eq = text:match("^%[(=*)%[", i)
      local stop = text:find("]" .. eq .. "]", i, true)
      if not stop then fail("unfinished long string", line) end
      local s = text:sub(i + #eq + 2, stop - 1):gsub("^\n", "")
      push("string", s)
      local _, n = text:sub(i, stop):gsub("\n", "")
      line, i = line + n, stop + #eq + 2
    else
      local sym
      for _, s in ipairs(symbols) do
        if text:sub(i, i + #s - 1) == s then sym = s; break end
      end
      if not sym then fail("unexpected character '" .. c .. "'", line) end
      push("sym", sym)
      i = i + #sym
    end
  end
  push("eof", "end of text")
  return toks
end

-- The file reader: `return`, then one table constructor of constants -----------

local function read_table(text, fail)
  local toks, pos = lex(text, 1, fail), 1
  local function peek() return toks[pos] end
  local function take() pos = pos + 1; return toks[pos - 1] end
  local function expect(v)
    local t = take()
    if t.v ~= v or (t.kind ~= "sym" and t.kind ~= "name") then
      fail("expected '" .. v .. "', found '" .. tostring(t.v) .. "'", t.line)
    end
  end
  local value
  local function constructor()
    expect("{")
    local out, n = {}, 0
    while not (peek().kind == "sym" and peek().v == "}") do
      local t, key = peek(), nil
      if t.kind == "name" and toks[pos + 1].v == "=" and toks[pos + 1].kind == "sym" then
        key = take().v
        take()
      end
      local v, line = value()
      if key then
        if out[key] ~= nil then fail("key '" .. key .. "' given twice", t.line) end
        out[key], out[key .. "@line"] = v, line
      else
        n = n + 1
        out[n] = v
      end
      if peek().kind == "sym" and (peek().v == "," or peek().v == ";") then take()
      elseif not (peek().kind == "sym" and peek().v == "}") then
        fail("expected ',' or '}', found '" .. tostring(peek().v) .. "'", peek().line)
      end
    end
    take()
    return out
  end
  value = function()
    local t = peek()
    if t.kind == "sym" and t.v == "{" then return constructor(), t.line end
    if t.kind == "sym" and t.v == "-" and toks[pos + 1].kind == "number" then
      take()
      return -take().v, t.line
    end
    if t.kind == "number" or t.kind == "string" then take(); return t.v, t.line end
    if t.kind == "name" and (t.v == "true" or t.v == "false") then take(); return t.v == "true", t.line end
    fail("expected a number, a string, true, false or a table, found '" .. tostring(t.v) .. "'", t.line)
  end
  if peek().kind == "name" and peek().v == "return" then take() end
  local out = constructor()
  if peek().kind ~= "eof" then fail("text after the table", peek().line) end
  return out
end

-- Expressions ----------------------------------------------------------------

local int_names = { b = true, h = true, q_idx = true, kv_idx = true, seq_q = true, seq_k = true,
                    heads = true }
-- The variables' order in the reference's program (core/fa_mod.h).
mod.vars = { "score", "b", "h", "q_idx", "kv_idx", "seq_q", "seq_k", "heads" }

local float_fns = { exp = true, exp2 = true, log = true, log2 = true, tanh = true, sqrt = true }
local binary_prec = {
  ["||"] = 1, ["&&"] = 2, ["=="] = 3, ["!="] = 3, ["<"] = 4, ["<="] = 4, [">"] = 4, [">="] = 4,
  ["+"] = 5, ["-"] = 5, ["*"] = 6, ["/"] = 6, ["%"] = 6,
}
local op_name = { ["||"] = "or", ["&&"] = "and", ["=="] = "eq", ["!="] = "ne", ["<"] = "lt",
                  ["<="] = "le", [">"] = "gt", [">="] = "ge", ["+"] = "add", ["-"] = "sub",
                  ["*"] = "mul", ["/"] = "div", ["%"] = "mod" }

local function numeric(t) return t == "int" or t == "float" end

-- The typed tree of expression text; `which` is "score" or "mask", params a
-- name -> value map, tensors a name -> { slot (from 0), type } map, line the
-- file line the text starts on.
local function parse_expr(text, which, params, tensors, line, fail)
  local toks, pos, count = lex(text, line, fail), 1, 0
  local function peek() return toks[pos] end
  local function take() pos = pos + 1; return toks[pos - 1] end
  local function is(v) return peek().kind == "sym" and peek().v == v end
  local function node(n, at)
    count = count + 1
    if count > MAX_NODES then fail(which .. ": more than " .. MAX_NODES .. " terms", at) end
    return n
  end
  local function need(t, types, what, at)
    if not types[t.type] then fail(which .. ": " .. what .. " of a " .. t.type, at) end
  end
  local expr
  local function call(name, at)
    take()  -- "("
    local args = {}
    if not is(")") then
      repeat
        args[#args + 1] = expr(0)
      until not (is(",") and take())
    end
    if not is(")") then fail(which .. ": expected ')' after the arguments of " .. name, peek().line) end
    take()
    local function arity(n)
      if #args ~= n then fail(string.format("%s: %s takes %d argument(s), not %d", which, name, n, #args), at) end
      for _, a in ipairs(args) do need(a, { int = true, float = true }, name, at) end
    end
    if float_fns[name] then
      arity(1)
      return node({ op = name, type = "float", args[1] }, at)
    elseif name == "float" then
      arity(1)
      return node({ op = "float", type = "float", args[1] }, at)
    elseif name == "abs" then
      arity(1)
      return node({ op = "abs", type = args[1].type, args[1] }, at)
    elseif name == "min" or name == "max" then
      arity(2)
      local t = (args[1].type == "int" and args[2].type == "int") and "int" or "float"
      return node({ op = name, type = t, args[1], args[2] }, at)
    end
    fail(which .. ": unknown function '" .. name .. "'", at)
  end
  local function primary()
    local t = take()
    if t.kind == "number" then
      if math.type(t.v) == "integer" and (t.v > 2147483647 or t.v < -2147483648) then
        fail(which .. ": integer " .. t.v .. " is past a 32-bit int (write " .. t.v .. ".0 for a float)", t.line)
      end
      return node({ op = "const", type = math.type(t.v) == "integer" and "int" or "float", value = t.v }, t.line)
    elseif t.kind == "name" then
      if is("(") then return call(t.v, t.line) end
      if t.v == "score" then
        if which ~= "score" then fail("mask: 'score' is not known to a mask", t.line) end
        return node({ op = "var", type = "float", name = "score" }, t.line)
      end
      if int_names[t.v] then return node({ op = "var", type = "int", name = t.v }, t.line) end
      local tv = tensors[t.v]
      if tv then
        if not is("[") then fail(which .. ": captured tensor '" .. t.v .. "' is read as " .. t.v .. "[index]", t.line) end
        take()
        local index = expr(0)
        if not is("]") then fail(which .. ": expected ']' after " .. t.v .. "'s index", peek().line) end
        take()
        if index.type ~= "int" then fail(which .. ": " .. t.v .. "'s index is a " .. index.type .. ", not an int", t.line) end
        return node({ op = "load", type = tv.type, name = t.v, slot = tv.slot, index }, t.line)
      end
      local v = params[t.v]
      if v ~= nil then
        if math.type(v) == "integer" and (v > 2147483647 or v < -2147483648) then
          fail(which .. ": parameter " .. t.v .. " = " .. v .. " is past a 32-bit int", t.line)
        end
        return node({ op = "const", type = math.type(v) == "integer" and "int" or "float", value = v }, t.line)
      end
      fail(which .. ": unknown name '" .. t.v .. "'", t.line)
    elseif t.kind == "sym" and t.v == "(" then
      local e = expr(0)
      if not is(")") then fail(which .. ": expected ')'", peek().line) end
      take()
      return e
    elseif t.kind == "sym" and (t.v == "-" or t.v == "!") then
      local e = expr(7)
      if t.v == "-" then
        need(e, { int = true, float = true }, "'-'", t.line)
        if e.op == "const" then e.value = -e.value; return e end
        return node({ op = "neg", type = e.type, e }, t.line)
      end
      need(e, { bool = true }, "'!'", t.line)
      return node({ op = "not", type = "bool", e }, t.line)
    end
    fail(which .. ": unexpected '" .. tostring(t.v) .. "'", t.line)
  end
  expr = function(min_prec)
    local left = primary()
    while true do
      local t = peek()
      local prec = t.kind == "sym" and binary_prec[t.v]
      if t.kind == "sym" and t.v == "?" and min_prec == 0 then
        take()
        need(left, { bool = true }, "'?' (a condition)", t.line)
        local a = expr(0)
        if not is(":") then fail(which .. ": expected ':' of '?'", peek().line) end
        take()
        local b = expr(0)
        if a.type == "bool" or b.type == "bool" then
          if a.type ~= b.type then fail(which .. ": '?' between a truth value and a number", t.line) end
        end
        local ty = a.type == b.type and a.type or "float"
        return node({ op = "select", type = ty, left, a, b }, t.line)
      end
      if not prec or prec <= min_prec then return left end
      take()
      local right = expr(prec)
      local op = op_name[t.v]
      local ty
      if op == "and" or op == "or" then
        need(left, { bool = true }, "'" .. t.v .. "'", t.line)
        need(right, { bool = true }, "'" .. t.v .. "'", t.line)
        ty = "bool"
      else
        need(left, { int = true, float = true }, "'" .. t.v .. "'", t.line)
        need(right, { int = true, float = true }, "'" .. t.v .. "'", t.line)
        local both_int = left.type == "int" and right.type == "int"
        if prec <= 4 then ty = "bool"
        elseif both_int then ty = "int"
        else ty = "float" end
        if op == "mod" and not both_int then fail(which .. ": '%' takes integers", t.line) end
        if both_int and (op == "div" or op == "mod") then
          if right.op ~= "const" or right.value <= 0 then
            fail(which .. ": integer '" .. t.v .. "' needs a positive constant divisor "
                 .. "(write float(a) / b for a float division)", t.line)
          end
          op = op == "div" and "idiv" or "imod"
        end
      end
      left = node({ op = op, type = ty, left, right }, t.line)
    end
  end
  local e = expr(0)
  if peek().kind ~= "eof" then fail(which .. ": unexpected '" .. tostring(peek().v) .. "'", peek().line) end
  if which == "mask" and e.type ~= "bool" then fail("mask: gives a " .. e.type .. ", not a truth value", line) end
  if which == "score" and not numeric(e.type) then fail("score: gives a truth value, not a number", line) end
  return e
end

-- The canonical text of a tree: what the key's hash is of.
local function canon(n)
  if n.op == "const" then
    return n.type == "int" and string.format("%d", n.value) or string.format("%.17g", n.value)
  end
  if n.op == "var" then return n.name end
  local parts = { n.op }
  if n.op == "load" then parts[2] = n.type .. ":" .. n.slot end
  for _, a in ipairs(n) do parts[#parts + 1] = canon(a) end
  return "(" .. table.concat(parts, " ") .. ")"
end

-- The derivative of a score tree with respect to score ---------------------

-- Float constants and nodes for the derivative, folded where a side is a
-- constant, so that a term that does not read the score leaves nothing.
local function const(x) return { op = "const", type = "float", value = x + 0.0 } end
local function is_const(n, x) return n.op == "const" and (x == nil or n.value == x) end
local function fop(op, ...) return { op = op, type = "float", ... } end
local function add(a, b)
  if is_const(a, 0) then return b end
  if is_const(b, 0) then return a end
  if is_const(a) and is_const(b) then return const(a.value + b.value) end
  return fop("add", a, b)
end
local function neg(a)
  if is_const(a) then return const(-a.value) end
  return fop("neg", a)
end
local function sub(a, b)
  if is_const(b, 0) then return a end
  if is_const(a, 0) then return neg(b) end
  if is_const(a) and is_const(b) then return const(a.value - b.value) end
  return fop("sub", a, b)
end
local function mul(a, b)
  if is_const(a, 0) or is_const(b, 0) then return const(0) end
  if is_const(a, 1) then return b end
  if is_const(b, 1) then return a end
  if is_const(a) and is_const(b) then return const(a.value * b.value) end
  return fop("mul", a, b)
end
local function div(a, b)
  if is_const(a, 0) then return const(0) end
  if is_const(b, 1) then return a end
  return fop("div", a, b)
end

-- d tree / d score as a tree of the same language (piecewise where the
-- tree selects: abs, min, max and ?: take the derivative of the branch
-- their value comes from). The backward pass multiplies dS by it.
function mod.derivative(n)
  if not mod.uses(n, "score") then return const(0) end
  if n.op == "var" then return const(1) end
  local op, a, b = n.op, n[1], n[2]
  if op == "select" then  -- the condition picks a branch; its own derivative is none
    return fop("select", a, mod.derivative(n[2]), mod.derivative(n[3]))
  end
  local da = mod.derivative(a)
  local db = b and mod.derivative(b) or const(0)
  if op == "add" then return add(da, db)
  elseif op == "sub" then return sub(da, db)
  elseif op == "neg" then return neg(da)
  elseif op == "mul" then return add(mul(da, b), mul(a, db))
  elseif op == "div" then
    if not mod.uses(b, "score") then return div(da, b) end
    return div(sub(mul(da, b), mul(a, db)), mul(b, b))
  elseif op == "abs" then
    return fop("select", { op = "ge", type = "bool", a, const(0) }, da, neg(da))
  elseif op == "min" or op == "max" then
    return fop("select", { op = op == "min" and "le" or "ge", type = "bool", a, b }, da, db)
  elseif op == "exp" then return mul(n, da)
  elseif op == "exp2" then return mul(mul(n, const(0.69314718055994531)), da)
  elseif op == "log" then return div(da, a)
  elseif op == "log2" then return div(da, mul(a, const(0.69314718055994531)))
  elseif op == "tanh" then return mul(sub(const(1), mul(n, n)), da)
  elseif op == "sqrt" then return div(da, mul(const(2), n))
  end
  error("mod: no derivative of op " .. op, 0)
end

-- Loading ------------------------------------------------------------------

-- A parameter's value from --mod's text: an integer or a finite float.
local function param_value(text, fail)
  local v = tonumber(text)
  if not v or v ~= v or v == math.huge or v == -math.huge or not text:match("^[%s%d%.eE%+%-]+$") then
    fail("parameter '" .. text .. "' is no number")
  end
  return v
end

local cache = {}

-- The modification of spec ("softcap=30", "window=256:0": a built-in of
-- templates/mods/ with its parameters in order) or of a file's text (text
-- given, spec its name). Raises with the file's name and line.
function mod.load(spec, text)
  local key = spec .. "\0" .. (text or "")
  if cache[key] then return cache[key] end
  local name, values = spec, {}
  local builtin = text == nil
  local where = spec
  if builtin then
    local base, rest = spec:match("^([%a_][%w_]*)=?(.*)$")
    if not base then error("unknown modification '" .. spec .. "'", 0) end
    local ok, t = pcall(file, "mods/" .. base .. ".lua")
    if not ok then
      error("unknown modification '" .. base .. "' (built in: " .. table.concat(mod.builtins(), ", ")
            .. "; or a file NAME.lua)", 0)
    end
    text, name, where = t, base, "mods/" .. base .. ".lua"
    if rest ~= "" then
      for v in (rest .. ":"):gmatch("([^:]*):") do values[#values + 1] = v end
    end
  end
  if #text > MAX_TEXT then error(where .. ": longer than " .. MAX_TEXT .. " bytes", 0) end
  local function fail(msg, line)
    error(where .. (line and (":" .. line) or "") .. ": " .. msg, 0)
  end
  local t = read_table(text, fail)
  local params, order = {}, {}
  for i, p in ipairs(t.params or {}) do
    if type(p) ~= "table" or type(p[1]) ~= "string" or not p[1]:match("^[%a_][%w_]*$")
       or type(p[2]) ~= "number" then
      fail("params[" .. i .. "] is no { \"name\", number }", t["params@line"])
    end
    if int_names[p[1]] or p[1] == "score" then fail("param '" .. p[1] .. "' hides a variable", t["params@line"]) end
    params[p[1]], order[i] = p[2], p[1]
  end
  if #values > #order then
    error(string.format("modification %s takes %d parameter(s) (%s), not %d", name, #order,
                        table.concat(order, ":"), #values), 0)
  end
  for i, v in ipairs(values) do
    local x = param_value(v, function(m) error("modification " .. name .. ": " .. m, 0) end)
    if math.type(params[order[i]]) == "integer" then
      if math.type(x) ~= "integer" then
        if x ~= math.floor(x) then error("modification " .. name .. ": " .. order[i] .. " takes an integer, not " .. v, 0) end
        x = math.tointeger(x)
      end
    else
      x = x + 0.0
    end
    params[order[i]] = x
  end
  for k in pairs(t) do
    if not (k == "doc" or k == "params" or k == "tensors" or k == "score" or k == "mask"
            or k:match("@line$")) then
      fail("unknown key '" .. tostring(k) .. "' (doc, params, tensors, score, mask)")
    end
  end
  if t.score == nil and t.mask == nil then fail("neither score nor mask is given") end
  local m = { name = name, doc = type(t.doc) == "string" and t.doc or "", tensors = {} }
  local tensors = {}
  if t.tensors ~= nil and type(t.tensors) ~= "table" then fail("tensors is no list", t["tensors@line"]) end
  for i, d in ipairs(t.tensors or {}) do
    local at = t["tensors@line"]
    if type(d) ~= "table" or type(d[1]) ~= "string" or not d[1]:match("^[%a_][%w_]*$")
       or (d[2] ~= "int" and d[2] ~= "float") then
      fail("tensors[" .. i .. "] is no { \"name\", \"int\" or \"float\" }", at)
    end
    if i > MAX_TENSORS then fail("more than " .. MAX_TENSORS .. " captured tensors", at) end
    if #d[1] > MAX_NAME then fail("tensor name '" .. d[1] .. "' is longer than " .. MAX_NAME .. " bytes", at) end
    if int_names[d[1]] or d[1] == "score" or params[d[1]] ~= nil or float_fns[d[1]] or tensors[d[1]]
       or d[1] == "float" or d[1] == "abs" or d[1] == "min" or d[1] == "max" then
      fail("tensor '" .. d[1] .. "' hides a name already taken", at)
    end
    tensors[d[1]] = { slot = i - 1, type = d[2] }
    m.tensors[i] = { name = d[1], type = d[2] }
  end
  for _, which in ipairs({ "score", "mask" }) do
    if t[which] ~= nil then
      if type(t[which]) ~= "string" then fail(which .. " is no string", t[which .. "@line"]) end
      m[which] = parse_expr(t[which], which, params, tensors, t[which .. "@line"], fail)
    end
  end
  if m.score then
    m.dscore = mod.derivative(m.score)
    if #mod.program(m.dscore) > MAX_PROGRAM then
      fail("score: its derivative (for the backward pass) has more than " .. MAX_PROGRAM .. " terms")
    end
  end
  m.canonical = "score " .. (m.score and canon(m.score) or "-") .. "; mask " .. (m.mask and canon(m.mask) or "-")
  local fnv = require("space").fnv1a(m.canonical)
  m.hash = string.format("%016x", fnv)
  local shown = {}
  for i, k in ipairs(order) do shown[i] = tostring(params[k]) end
  m.label = builtin and (name .. (#order > 0 and "=" .. table.concat(shown, ":") or ""))
            or name:match("[^/]*$")
  cache[key] = m
  return m
end

-- Whether expression tree reads variable name.
function mod.uses(tree, name)
  if tree.op == "var" then return tree.name == name end
  for _, child in ipairs(tree) do
    if mod.uses(child, name) then return true end
  end
  return false
end

-- The built-ins' names, sorted.
function mod.builtins()
  local out = {}
  for _, f in ipairs(template_names()) do
    local b = f:match("^mods/([%w_]+)%.lua$")
    if b then out[#out + 1] = b end
  end
  return out
end

-- The reference's program: a postfix list of { op, value, type } (value: a
-- constant, or a variable's index in mod.vars, from 0; type "int", "float"
-- or "bool", the value's: the host's interval classifier reads it).
function mod.program(tree)
  local out, index = {}, {}
  for i, v in ipairs(mod.vars) do index[v] = i - 1 end
  local function walk(n)
    for _, a in ipairs(n) do walk(a) end
    if n.op == "const" then out[#out + 1] = { "const", n.value + 0.0, n.type }
    elseif n.op == "var" then out[#out + 1] = { "var", index[n.name] + 0.0, n.type }
    elseif n.op == "load" then out[#out + 1] = { "load", n.slot + 0.0, n.type }
    else
      out[#out + 1] = { n.op, 0.0, n.type }
    end
  end
  walk(tree)
  return out
end

-- C emission -----------------------------------------------------------------

-- The subtrees of trees that no row or key changes (b, h, the lengths, the
-- params: ALiBi's slope), each computed once per tile by fa_mod_setup
-- instead of per score: a map node -> "u.uN", and the list of them.
local function uniform_parts(trees)
  local map, list = {}, {}
  local function hoist(n)
    if n.op ~= "const" and n.op ~= "var" then
      list[#list + 1] = n
      map[n] = "u.u" .. #list
    end
  end
  local function walk(n)
    if n.op == "const" then return true end
    if n.op == "var" then return not (n.name == "score" or n.name == "q_idx" or n.name == "kv_idx") end
    local u, all = {}, true
    for i, a in ipairs(n) do u[i] = walk(a); all = all and u[i] end
    if not all then
      for i, a in ipairs(n) do if u[i] then hoist(a) end end
    end
    return all
  end
  for _, t in ipairs(trees) do
    if walk(t) then hoist(t) end
  end
  return map, list
end

-- Straight-line C for a tree: statements into `lines`, the value's name back;
-- the subtrees in `hoisted` are read from fa_mod_setup's struct.
local function emit_value(tree, T, names, lines, hoisted, prefix)
  local k = 0
  local function tmp(ty, expr)
    k = k + 1
    local v = (prefix or "m") .. k
    local cty = ty == "float" and T or "int"
    lines[#lines + 1] = string.format("  const %s %s = %s;", cty, v, expr)
    return v
  end
  local suffix = T == "float" and "f" or ""
  local function as_float(v, ty) return ty == "float" and v or "((" .. T .. ")" .. v .. ")" end
  local bin = { add = "+", sub = "-", mul = "*", div = "/", idiv = "/", imod = "%", lt = "<", le = "<=",
                gt = ">", ge = ">=", eq = "==", ne = "!=", ["and"] = "&&", ["or"] = "||" }
  local function walk(n)
    if hoisted and hoisted[n] then return hoisted[n] end
    if n.op == "const" then
      if n.type == "int" then return string.format("%d", n.value) end
      local s = string.format("%.17g", n.value)
      if not s:find("[%.eE]") then s = s .. ".0" end
      return "((" .. T .. ")" .. s .. ")"
    end
    if n.op == "var" then return names[n.name] end
    local a = {}
    for i, x in ipairs(n) do a[i] = walk(x) end
    local ty = n.type
    if n.op == "load" then
      local e = string.format("fa_mod_ld_%s(%s, %s, %s, %s)", ty == "int" and "i" or "f",
                              names["@t" .. n.slot], names["@n" .. n.slot], a[1], names["@err"])
      return tmp(ty, ty == "float" and "((" .. T .. ")" .. e .. ")" or e)
    end
    if n.op == "div" and n[2].op == "const" and n[2].value ~= 0 then
      -- by a constant: times its reciprocal (within an ulp of the quotient;
      -- a float division is a routine on the GPU, this one multiply)
      local inv = string.format("%.17g", 1.0 / n[2].value)
      if not inv:find("[%.eEn]") then inv = inv .. ".0" end
      return tmp("float", as_float(a[1], n[1].type) .. " * ((" .. T .. ")" .. inv .. ")")
    end
    if bin[n.op] then
      local l, r = a[1], a[2]
      if n[1].type ~= n[2].type then l, r = as_float(l, n[1].type), as_float(r, n[2].type) end
      return tmp(ty, l .. " " .. bin[n.op] .. " " .. r)
    elseif n.op == "neg" then return tmp(ty, "-" .. a[1])
    elseif n.op == "not" then return tmp(ty, "!" .. a[1])
    elseif n.op == "float" then return tmp("float", as_float(a[1], n[1].type))
    elseif n.op == "abs" then
      if ty == "int" then return tmp(ty, a[1] .. " < 0 ? -" .. a[1] .. " : " .. a[1]) end
      return tmp(ty, "fabs" .. suffix .. "(" .. a[1] .. ")")
    elseif n.op == "min" or n.op == "max" then
      local l, r = a[1], a[2]
      if ty == "int" then return tmp(ty, l .. (n.op == "min" and " < " or " > ") .. r .. " ? " .. l .. " : " .. r) end
      return tmp(ty, "f" .. n.op .. suffix .. "(" .. as_float(l, n[1].type) .. ", " .. as_float(r, n[2].type) .. ")")
    elseif n.op == "select" then
      local x, y = a[2], a[3]
      if n[2].type ~= n[3].type then x, y = as_float(x, n[2].type), as_float(y, n[3].type) end
      return tmp(ty, a[1] .. " ? " .. x .. " : " .. y)
    elseif n.op == "tanh" and T == "float" then   -- the preludes' MUFU form
      return tmp("float", "fa_tanh_f32(" .. as_float(a[1], n[1].type) .. ")")
    elseif float_fns[n.op] then
      return tmp("float", n.op .. suffix .. "(" .. as_float(a[1], n[1].type) .. ")")
    end
    error("mod: no C for op " .. n.op, 0)
  end
  return walk(tree)
end

-- Whether tree reads a captured tensor.
local function reads_tensor(tree)
  if tree.op == "load" then return true end
  for _, child in ipairs(tree) do
    if reads_tensor(child) then return true end
  end
  return false
end

-- Interval C for a mask tree: each int a [lo, hi] pair of names, each truth
-- value (may be true, may be false); floats are unknown (either).
local function emit_block(tree, lines, names)
  local k = 0
  local function tmp(expr)
    k = k + 1
    local v = "c" .. k
    lines[#lines + 1] = string.format("  const int %s = %s;", v, expr)
    return v
  end
  local function mn(a, b) return "(" .. a .. " < " .. b .. " ? " .. a .. " : " .. b .. ")" end
  local function mx(a, b) return "(" .. a .. " > " .. b .. " ? " .. a .. " : " .. b .. ")" end
  local walk
  local function truth(n)   -- {t, f}
    if n.type ~= "bool" then error("mod: truth of a " .. n.type, 0) end
    if n.op == "not" then local a = truth(n[1]); return { t = a.f, f = a.t } end
    if n.op == "and" or n.op == "or" then
      local a, b = truth(n[1]), truth(n[2])
      if n.op == "and" then return { t = tmp(a.t .. " && " .. b.t), f = tmp(a.f .. " || " .. b.f) } end
      return { t = tmp(a.t .. " || " .. b.t), f = tmp(a.f .. " && " .. b.f) }
    end
    if n.op == "select" then
      local c, a, b = truth(n[1]), truth(n[2]), truth(n[3])
      return { t = tmp("(" .. c.t .. " && " .. a.t .. ") || (" .. c.f .. " && " .. b.t .. ")"),
               f = tmp("(" .. c.t .. " && " .. a.f .. ") || (" .. c.f .. " && " .. b.f .. ")") }
    end
    -- a comparison: of ints known from the block's ranges, else unknown here
    if n[1].type ~= "int" or n[2].type ~= "int" or reads_tensor(n) then return { t = "1", f = "1" } end
    local a, b = walk(n[1]), walk(n[2])
    local op = n.op
    if op == "lt" then return { t = tmp(a.lo .. " < " .. b.hi), f = tmp(a.hi .. " >= " .. b.lo) }
    elseif op == "le" then return { t = tmp(a.lo .. " <= " .. b.hi), f = tmp(a.hi .. " > " .. b.lo) }
    elseif op == "gt" then return { t = tmp(a.hi .. " > " .. b.lo), f = tmp(a.lo .. " <= " .. b.hi) }
    elseif op == "ge" then return { t = tmp(a.hi .. " >= " .. b.lo), f = tmp(a.lo .. " < " .. b.hi) }
    end
    local overlap = tmp(a.lo .. " <= " .. b.hi .. " && " .. b.lo .. " <= " .. a.hi)
    local single = tmp(a.lo .. " == " .. a.hi .. " && " .. b.lo .. " == " .. b.hi .. " && " .. a.lo .. " == " .. b.lo)
    if op == "eq" then return { t = overlap, f = tmp("!" .. single) } end
    return { t = tmp("!" .. single), f = overlap }
  end
  walk = function(n)        -- an int node: {lo, hi}
    if n.op == "const" then local s = string.format("%d", n.value); return { lo = s, hi = s } end
    if n.op == "var" then return names[n.name] end
    if n.op == "select" then
      local c, a, b = truth(n[1]), walk(n[2]), walk(n[3])
      return { lo = tmp(c.t .. " && " .. c.f .. " ? " .. mn(a.lo, b.lo) .. " : (" .. c.t .. " ? " .. a.lo .. " : " .. b.lo .. ")"),
               hi = tmp(c.t .. " && " .. c.f .. " ? " .. mx(a.hi, b.hi) .. " : (" .. c.t .. " ? " .. a.hi .. " : " .. b.hi .. ")") }
    end
    local a, b = walk(n[1]), n[2] and walk(n[2])
    if n.op == "add" then return { lo = tmp(a.lo .. " + " .. b.lo), hi = tmp(a.hi .. " + " .. b.hi) }
    elseif n.op == "sub" then return { lo = tmp(a.lo .. " - " .. b.hi), hi = tmp(a.hi .. " - " .. b.lo) }
    elseif n.op == "neg" then return { lo = tmp("-" .. a.hi), hi = tmp("-" .. a.lo) }
    elseif n.op == "mul" then
      local p1, p2 = tmp(a.lo .. " * " .. b.lo), tmp(a.lo .. " * " .. b.hi)
      local p3, p4 = tmp(a.hi .. " * " .. b.lo), tmp(a.hi .. " * " .. b.hi)
      return { lo = tmp(mn(mn(p1, p2), mn(p3, p4))), hi = tmp(mx(mx(p1, p2), mx(p3, p4))) }
    elseif n.op == "idiv" then  -- by a positive constant: monotone
      return { lo = tmp(a.lo .. " / " .. b.lo), hi = tmp(a.hi .. " / " .. b.lo) }
    elseif n.op == "imod" then
      local c = b.lo
      local same = tmp(a.lo .. " >= 0 && " .. a.lo .. " / " .. c .. " == " .. a.hi .. " / " .. c)
      return { lo = tmp(same .. " ? " .. a.lo .. " % " .. c .. " : (" .. a.lo .. " >= 0 ? 0 : -(" .. c .. " - 1))"),
               hi = tmp(same .. " ? " .. a.hi .. " % " .. c .. " : (" .. a.hi .. " <= 0 ? 0 : " .. c .. " - 1)") }
    elseif n.op == "abs" then
      return { lo = tmp(a.lo .. " >= 0 ? " .. a.lo .. " : (" .. a.hi .. " <= 0 ? -" .. a.hi .. " : 0)"),
               hi = tmp(mx("-" .. a.lo, a.hi)) }
    elseif n.op == "min" then return { lo = tmp(mn(a.lo, b.lo)), hi = tmp(mn(a.hi, b.hi)) }
    elseif n.op == "max" then return { lo = tmp(mx(a.lo, b.lo)), hi = tmp(mx(a.hi, b.hi)) }
    end
    error("mod: no interval for op " .. n.op, 0)
  end
  local r = truth(tree)
  return r
end

-- The kernel's functions for modification m with scores and statistics of
-- C type T ("float" or "double"): fa_mod_score(score, b, h, q_idx, kv_idx,
-- seq_q, seq_k, heads) in natural units; fa_mod_mask(b, h, q_idx, kv_idx,
-- seq_q, seq_k, heads), 1 where the key is seen; fa_mod_block(b, h, q_lo,
-- q_hi, k_lo, k_hi, seq_q, seq_k, heads): 0 when no key of the block pair
-- is seen, 2 when all are (by the mask; 2 without one), 1 otherwise. With
-- grad (the backward pass), fa_mod_dscore(u, score, b, ...) too: the
-- score part's derivative with respect to the score.
--
-- With captured tensors, fa_mod_setup and fa_mod_block are macros over the
-- kernel's parameter block `p` (every kernel's, FA_KERNEL): fa_mod_setup
-- takes the tensors into fa_mod_u, and fa_mod_block reads the run-time
-- block mask where the mask's own ranges cannot tell.
function mod.c_functions(m, T, grad)
  local out = { "/* modification " .. m.label .. ": " .. m.doc .. " */" }
  local names = {}
  for _, v in ipairs(mod.vars) do names[v] = v end
  local nt = #m.tensors
  local trees = {}
  if m.score then trees[#trees + 1] = m.score end
  if m.mask then trees[#trees + 1] = m.mask end
  if grad and m.score then trees[#trees + 1] = m.dscore end
  local hoisted, parts = uniform_parts(trees)
  if nt > 0 then
    out[#out + 1] = "/* a captured tensor's element i: 0 outside it, and error[2] raised */"
    for _, f in ipairs({ { "i", "int", "i32" }, { "f", "float", "f32" } }) do
      out[#out + 1] = string.format("FA_INLINE %s fa_mod_ld_%s(const void *t, int n, int i, int *err) {", f[2], f[1])
      out[#out + 1] = string.format("  if (i >= 0 && i < n) return fa_ldg_%s((const %s *)t + i);", f[3], f[2])
      out[#out + 1] = "  if (err) fa_st_i32(err + 2, 1);"
      out[#out + 1] = "  return 0;"
      out[#out + 1] = "}"
    end
  end
  out[#out + 1] = "/* what no row or key changes, once per tile */"
  out[#out + 1] = "typedef struct fa_mod_u {"
  for i, n in ipairs(parts) do out[#out + 1] = "  " .. (n.type == "float" and T or "int") .. " u" .. i .. ";" end
  for i = 0, nt - 1 do out[#out + 1] = "  const void *t" .. i .. "; int n" .. i .. ";" end
  if nt > 0 then out[#out + 1] = "  int *err;" end
  if #parts == 0 and nt == 0 then out[#out + 1] = "  int none;" end
  out[#out + 1] = "} fa_mod_u;"
  local targs = ""
  for i = 0, nt - 1 do targs = targs .. ", const void *t" .. i .. ", int n" .. i end
  if nt > 0 then targs = targs .. ", int *err_in" end
  out[#out + 1] = "FA_INLINE fa_mod_u fa_mod_setup" .. (nt > 0 and "_t" or "")
                  .. "(int b, int h, int seq_q, int seq_k, int heads" .. targs .. ") {"
  out[#out + 1] = "  fa_mod_u u;"
  if #parts == 0 and nt == 0 then out[#out + 1] = "  u.none = 0;" end
  for i = 0, nt - 1 do
    out[#out + 1] = string.format("  u.t%d = t%d; u.n%d = n%d;", i, i, i, i)
    names["@t" .. i], names["@n" .. i] = "t" .. i, "n" .. i
  end
  if nt > 0 then
    -- a read for a head past the last (a decoding tile's padding rows) fails nothing
    out[#out + 1] = "  int *const err = h >= 0 && h < heads ? err_in : 0;"
    out[#out + 1] = "  u.err = err_in;"
    names["@err"] = "err"
  end
  for i, n in ipairs(parts) do
    local lines = {}
    local v = emit_value(n, T, names, lines, nil, "s" .. i .. "_")
    for _, l in ipairs(lines) do out[#out + 1] = l end
    out[#out + 1] = "  u.u" .. i .. " = " .. v .. ";"
  end
  out[#out + 1] = "  (void)b; (void)h; (void)seq_q; (void)seq_k; (void)heads;"
  out[#out + 1] = "  return u;"
  out[#out + 1] = "}"
  if nt > 0 then
    local pass = ""
    for i = 0, nt - 1 do pass = pass .. string.format(", p.mod_tensor[%d], p.mod_len[%d]", i, i) end
    out[#out + 1] = "#define fa_mod_setup(b, h, sq, sk, hd) fa_mod_setup_t(b, h, sq, sk, hd" .. pass .. ", p.error)"
    for i = 0, nt - 1 do names["@t" .. i], names["@n" .. i] = "u.t" .. i, "u.n" .. i end
  end
  -- A read outside a tensor fails the call only at a real (query, key)
  -- pair: kernels also evaluate the padding past seq_q and seq_k, and drop it.
  local function real_pair()
    if nt > 0 then
      out[#out + 1] = "  int *const err = q_idx >= 0 && q_idx < seq_q && kv_idx >= 0 && kv_idx < seq_k ? u.err : 0;"
    end
  end
  local args = "int b, int h, int q_idx, int kv_idx, int seq_q, int seq_k, int heads"
  -- A function of the score and the names: tree's value as T.
  local function score_function(name, tree)
    out[#out + 1] = "FA_INLINE " .. T .. " " .. name .. "(fa_mod_u u, " .. T .. " score, " .. args .. ") {"
    real_pair()
    local lines = {}
    local v = emit_value(tree, T, names, lines, hoisted)
    if tree.type == "int" then v = "((" .. T .. ")" .. v .. ")" end
    for _, l in ipairs(lines) do out[#out + 1] = l end
    out[#out + 1] = "  (void)u; (void)score; (void)b; (void)h; (void)q_idx; (void)kv_idx; (void)seq_q; (void)seq_k; (void)heads;"
    out[#out + 1] = "  return " .. v .. ";"
    out[#out + 1] = "}"
  end
  if m.score then score_function("fa_mod_score", m.score) end
  if grad and m.score then score_function("fa_mod_dscore", m.dscore) end
  local bargs = "int b, int h, int q_lo, int q_hi, int k_lo, int k_hi, int seq_q, int seq_k, int heads"
  local runtime = nt > 0 and m.mask and reads_tensor(m.mask)
  out[#out + 1] = "FA_INLINE int fa_mod_block" .. (runtime and "_s" or "") .. "(" .. bargs .. ") {"
  out[#out + 1] = "  (void)b; (void)h; (void)q_lo; (void)q_hi; (void)k_lo; (void)k_hi; (void)seq_q; (void)seq_k; (void)heads;"
  if m.mask then
    local lines = {}
    local iv = { b = { lo = "b", hi = "b" }, h = { lo = "h", hi = "h" }, q_idx = { lo = "q_lo", hi = "q_hi" },
                 kv_idx = { lo = "k_lo", hi = "k_hi" }, seq_q = { lo = "seq_q", hi = "seq_q" },
                 seq_k = { lo = "seq_k", hi = "seq_k" }, heads = { lo = "heads", hi = "heads" } }
    local r = emit_block(m.mask, lines, iv)
    for _, l in ipairs(lines) do out[#out + 1] = l end
    out[#out + 1] = "  return !(" .. r.t .. ") ? 0 : (!(" .. r.f .. ") ? 2 : 1);"
  else
    out[#out + 1] = "  return 2;"
  end
  out[#out + 1] = "}"
  if runtime then
    -- Where the ranges cannot tell, the run-time block mask's entries over
    -- the pair (FA_MOD_GRANULE = 64 rows and keys each): all empty 0, all
    -- full 2, else 1; 1 without a mask.
    out[#out + 1] = "FA_INLINE int fa_mod_block_t(" .. bargs .. ", const int *bm, long long sb, long long sh, int rows, int cols) {"
    out[#out + 1] = "  const int s = fa_mod_block_s(b, h, q_lo, q_hi, k_lo, k_hi, seq_q, seq_k, heads);"
    out[#out + 1] = "  if (s != 1 || !bm) return s;"
    out[#out + 1] = "  const int r0 = q_lo < 0 ? 0 : q_lo >> 6, r1 = q_hi >> 6 < rows - 1 ? q_hi >> 6 : rows - 1;"
    out[#out + 1] = "  const int c0 = k_lo < 0 ? 0 : k_lo >> 6, c1 = k_hi >> 6 < cols - 1 ? k_hi >> 6 : cols - 1;"
    out[#out + 1] = "  const int *at = bm + b * sb + h * sh;"
    out[#out + 1] = "  int seen = r0 > r1 || c0 > c1 ? 2 : 0;"
    out[#out + 1] = "  for (int r = r0; r <= r1; r++)"
    out[#out + 1] = "    for (int c = c0; c <= c1; c++) {"
    out[#out + 1] = "      const int e = fa_ldg_i32(at + (long long)r * cols + c);"
    out[#out + 1] = "      seen |= e == 0 ? 1 : e == 2 ? 4 : 2;"
    out[#out + 1] = "    }"
    out[#out + 1] = "  return seen == 1 ? 0 : seen == 4 ? 2 : 1;"
    out[#out + 1] = "}"
    out[#out + 1] = "#define fa_mod_block(b, h, ql, qh, kl, kh, sq, sk, hd) fa_mod_block_t(b, h, ql, qh, kl, kh, sq, sk, hd, p.block_mask, p.bm_sb, p.bm_sh, p.bm_rows, p.bm_cols)"
  end
  if m.mask then
    out[#out + 1] = "FA_INLINE int fa_mod_mask(fa_mod_u u, " .. args .. ") {"
    real_pair()
    local lines = {}
    local v = emit_value(m.mask, T, names, lines, hoisted)
    for _, l in ipairs(lines) do out[#out + 1] = l end
    out[#out + 1] = "  (void)u; (void)b; (void)h; (void)q_idx; (void)kv_idx; (void)seq_q; (void)seq_k; (void)heads;"
    out[#out + 1] = "  return " .. v .. ";"
    out[#out + 1] = "}"
  end
  return table.concat(out, "\n")
end

return mod
