-- engine.lua
-- The template engine and its sandbox.
--
-- A template is CUDA text with Lua escapes:
--   * a line whose first non-blank character is `$` is a Lua statement;
--   * `${expr}` anywhere in a text line is replaced by tostring(expr).
-- Each template line becomes exactly one line of generated Lua, so a Lua
-- error in a template reports the template's own file name and line.
--
-- What is inserted takes the indentation of the line it replaces, so that
-- steps can be written once and emitted at any depth: the text a complete
-- Lua statement line emits (`$ gemm_qk()`, a Lua function that emits text
-- lines) is dedented and indented by the `$` line's own indentation; so is
-- a multi-line value of a line that is nothing but `${expr}` (an included
-- fragment, `${render("part.cu", args)}`). Control lines (`$ if ... then`,
-- `$ for ... do`, `$ end`, `$ local function f()`) are no statements of
-- their own: the lines between them keep their written indentation.
--
-- Templates and the Lua modules beside them (the search space, the families)
-- run in a sandbox: the C host never opens the io, os, package or debug
-- libraries, and the sandbox environment offers only pure functions plus
-- `require`, which loads nothing but files of the templates folder, and
-- `file`, which reads one of them as text. The files are handed over by the
-- host as a table name -> text, a file of a subfolder named by its path
-- ("simt/simt.lua"). A name in `require` or `render` is looked up in the
-- asking file's own folder first, then at the top of the templates folder;
-- `template_names()` lists every file.

local engine = {}

local files = ...          -- name -> text, given by the host
local host_load = load     -- kept here; the sandbox never sees it
local modules = {}

local safe_globals = {
  "assert", "error", "ipairs", "next", "pairs", "pcall", "rawequal", "rawget",
  "rawlen", "rawset", "select", "setmetatable", "tonumber", "tostring", "type",
  "xpcall",
}
-- Libraries are copied into each environment, so that no template can change
-- what another one sees (rendering stays a pure function of the config).
local safe_libs = { math = true, string = true, table = true, utf8 = true }

local function forbidden(_, name)
  error("template sandbox: '" .. tostring(name) .. "' is not available", 2)
end

-- The folder of a file name ("simt" for "simt/simt.lua"), "" at the top.
local function folder_of(name)
  return name:match("^(.*)/[^/]*$") or ""
end

-- The file `name` stands for when asked from folder `dir`: the folder's own
-- first, then the top one; nil when neither exists.
local function resolve(name, dir)
  if dir ~= "" and files[dir .. "/" .. name] then return dir .. "/" .. name end
  if files[name] then return name end
  return nil
end

-- A fresh environment for one module or template of folder `dir`.
local function sandbox_env(dir)
  local env = {}
  for _, name in ipairs(safe_globals) do env[name] = _G[name] end
  for lib in pairs(safe_libs) do
    local copy = {}
    for k, v in pairs(_G[lib]) do copy[k] = v end
    env[lib] = copy
  end
  env.string.dump = nil
  -- Not tail calls: an error's level counts this frame.
  env.require = function(name)
    local m = engine.require(name, dir, 3)
    return m
  end
  env.render = function(name, args)
    local text = engine.render(name, args, dir, 3)
    return text
  end
  env.file = engine.file
  env.template_names = engine.names
  env._G = env
  return setmetatable(env, { __index = forbidden })
end

function engine.file(name, dir, level)
  local path = resolve(tostring(name), dir or "")
  if not path then error("no template file '" .. tostring(name) .. "'", level or 2) end
  return files[path], path
end

-- Every file name, sorted.
function engine.names()
  local out = {}
  for name in pairs(files) do out[#out + 1] = name end
  table.sort(out)
  return out
end

-- The module `name` (a file name.lua, or folder/name.lua) as seen from
-- folder `dir` (the top when nil); level is error's, for the caller's line.
function engine.require(name, dir, level)
  level = level or 2
  if type(name) ~= "string" or not (name:match("^[%w_]+$") or name:match("^[%w_]+/[%w_]+$")) then
    error("template sandbox: require of '" .. tostring(name) .. "' refused", level)
  end
  local path = resolve(name .. ".lua", dir or "")
  if not path then error("template sandbox: no module '" .. name .. "' in templates/", level) end
  if modules[path] == nil then
    local chunk, err = host_load(files[path], "@" .. path, "t", sandbox_env(folder_of(path)))
    if not chunk then error(err, 0) end
    modules[path] = chunk() or true
  end
  return modules[path]
end

-- A Lua string literal for s, on one line (%q would break lines at "\n").
local function literal(s)
  return (string.format("%q", s):gsub("\\\n", "\\n"))
end

-- `text` dedented (the least indentation of its non-blank lines removed)
-- and each non-blank line indented by `indent`; blank lines become empty.
local function reindent(text, indent)
  local least
  for line in text:gmatch("([^\n]*)\n?") do
    if line:find("%S") then
      local n = #line:match("^[ \t]*")
      if not least or n < least then least = n end
    end
  end
  if not least then return (text:gsub("[ \t]+\n", "\n")) end
  return (text:gsub("([^\n]*)(\n?)", function(line, nl)
    if not line:find("%S") then return nl end
    return indent .. line:sub(least + 1) .. nl
  end))
end

-- Lua source for one text line: emit its pieces, interpolations included.
-- A line that is nothing but one `${expr}` is a block: reindented.
local function text_line(line)
  local parts, pos = {}, 1
  while true do
    local s, e = line:find("${", pos, true)
    if not s then break end
    local depth, i = 1, e + 1
    while i <= #line and depth > 0 do
      local c = line:sub(i, i)
      if c == "{" then depth = depth + 1 elseif c == "}" then depth = depth - 1 end
      i = i + 1
    end
    if depth > 0 then error("unclosed ${ in template line", 0) end
    local expr = line:sub(e + 1, i - 2)
    if pos == 1 and line:sub(1, s - 1):match("^[ \t]*$") and line:sub(i):match("^%s*$") then
      return "_out(_block(" .. literal(line:sub(1, s - 1)) .. ", " .. expr .. "))"
    end
    if s > pos then parts[#parts + 1] = literal(line:sub(pos, s - 1)) end
    parts[#parts + 1] = "_str(" .. expr .. ")"
    pos = i
  end
  parts[#parts + 1] = literal(line:sub(pos) .. "\n")
  return "_out(" .. table.concat(parts, ",") .. ")"
end

-- Whether a `$` line is a whole statement (or several): it compiles alone.
-- Control lines (if/for/function headers, else, end) do not; return and
-- break end their block, so nothing may follow them there; blank and
-- comment lines emit nothing.
local function whole_statement(stmt)
  if stmt:match("^%s*return%f[%W]") or stmt:match("^%s*break%f[%W]") then return false end
  if not stmt:find("%S") or stmt:match("^%s*%-%-") then return false end
  return host_load("return function() " .. stmt .. "\nend", "=statement", "t", {}) ~= nil
end

-- Compile template text into a function of its arguments table. A whole
-- statement line runs between _enter(indent) and _leave(), the latter at
-- the start of the next generated line (a trailing comment would swallow
-- it on the same line), so that each template line stays one Lua line.
function engine.compile(text, chunkname)
  local dir = folder_of(chunkname)
  local lines, n, pending = {}, 0, false
  for line in (text .. (text:sub(-1) == "\n" and "" or "\n")):gmatch("(.-)\n") do
    n = n + 1
    local indent, stmt = line:match("^([ \t]*)%$(.*)$")
    local code
    if stmt and stmt:sub(1, 1) ~= "{" then
      if whole_statement(stmt) then
        code = "_enter(" .. literal(indent) .. ") " .. stmt
      else
        code = stmt
      end
    else
      local ok, out = pcall(text_line, line)
      if not ok then error(chunkname .. ":" .. n .. ": " .. out, 0) end
      code = out
    end
    lines[n] = (pending and "_leave() " or "") .. code
    pending = code:sub(1, 7) == "_enter("
  end
  if pending then lines[n + 1] = "_leave()" end
  local src = "local _out, _str, args, _enter, _leave, _block = ... " .. table.concat(lines, "\n")
  local chunk, err = host_load(src, "@" .. chunkname, "t", sandbox_env(dir))
  if not chunk then error(err, 0) end
  return chunk
end

local function to_text(v)
  if math.type(v) == "float" then
    if v == math.floor(v) and math.abs(v) < 2^53 then return string.format("%.1f", v) end
    return string.format("%.17g", v)
  end
  return tostring(v)
end

-- Run compiled template `chunk` with table `args`; returns the text.
function engine.run(chunk, args)
  local buf, marks = {}, {}
  local function out(...)
    local n = #buf
    for i = 1, select("#", ...) do buf[n + i] = select(i, ...) end
  end
  local function enter(indent) marks[#marks + 1] = { #buf, indent } end
  local function leave()
    local m = table.remove(marks)
    if #buf == m[1] then return end
    local text = table.concat(buf, "", m[1] + 1)
    for i = #buf, m[1] + 1, -1 do buf[i] = nil end
    buf[m[1] + 1] = reindent(text, m[2])
  end
  local function block(indent, v) return reindent(to_text(v) .. "\n", indent) end
  chunk(out, to_text, args, enter, leave, block)
  return table.concat(buf)
end

local compiled = {}

-- Render template file `name` with `args` (templates may call this too,
-- from their folder `dir`).
function engine.render(name, args, dir, level)
  local text, path = engine.file(name, dir, (level or 2) + 1)
  if not compiled[path] then compiled[path] = engine.compile(text, path) end
  return engine.run(compiled[path], args or {})
end

-- Render template text given directly (tests, tools).
function engine.render_text(text, chunkname, args)
  return engine.run(engine.compile(text, chunkname), args or {})
end

return engine
