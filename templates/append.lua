-- append.lua
-- New keys and values into a KV cache before decoding attends over them,
-- as flash_attn_with_kvcache's k= and v= do: token j of sequence b's new
-- K and V goes to cache position cache_seqlens[b] + j, through the block
-- table, and the sequence's new length to seqlens_out[b], which the
-- decoding launches then read. A CTA per (new token, K/V head, sequence).
-- It checks what it follows as the decoding kernels do: a length leaving
-- no room for the new tokens writes nothing (error[1]), a page outside the
-- pool is never written (error[0]). With rotary embeddings (fa_params.h:
-- rotary_cos) it rotates the new keys on their way into the cache, in
-- float (double for fp64) as flash_attn does, and its K/V head's group of
-- query rows into q_rot, a position past the table never read (error[1]
-- = 2).

local append = { name = "append", version = 3 }

-- Per dtype: the element, its copy, and its value in the arithmetic type
-- (get) and back (put).
local copies = {
  fp32 = { elem = "float", ld = "fa_ldg_f32(%s)", st = "fa_st_f32(%s, %s)", acc = "float",
           get = "fa_ldg_f32(%s)", put = "fa_st_f32(%s, %s)" },
  fp64 = { elem = "double", ld = "fa_ldg_f64(%s)", st = "fa_st_f64(%s, %s)", acc = "double",
           get = "fa_ldg_f64(%s)", put = "fa_st_f64(%s, %s)" },
  fp16 = { elem = "unsigned short", ld = "fa_ldg_u16(%s)", st = "fa_st_u16(%s, %s)", acc = "float",
           get = "fa_f16_to_f32(fa_ldg_u16(%s))", put = "fa_st_u16(%s, fa_f32_to_f16(%s))" },
  bf16 = { elem = "unsigned short", ld = "fa_ldg_u16(%s)", st = "fa_st_u16(%s, %s)", acc = "float",
           get = "fa_bf16_to_f32(fa_ldg_u16(%s))", put = "fa_st_u16(%s, fa_f32_to_bf16(%s))" },
}

append.threads = 64

-- problem: { dtype, dim, dim_v (when V's head dim is not dim) }.
function append.render(problem)
  local c = copies[problem.dtype]
  if not c then error("no append kernel for dtype '" .. tostring(problem.dtype) .. "'", 0) end
  local dv = require("enum").dim_v(problem)
  local name = string.format("append-%s-d%d%s", problem.dtype, problem.dim, dv ~= 0 and "v" .. dv or "")
  local args = { entry = name:gsub("-", "_"), D = problem.dim, DV = dv ~= 0 and dv or problem.dim,
                 NT = append.threads, elem = c.elem, acc = c.acc,
                 copy = function(dst, src) return string.format(c.st, dst, string.format(c.ld, src)) end,
                 get = function(src) return string.format(c.get, src) end,
                 put = function(dst, v) return string.format(c.put, dst, v) end }
  return {
    source = render("append.cu", args), op = "decode",
    preludes = require("enum").preludes,
    launches = {
      { entry = args.entry, threads = append.threads, smem_bytes = 0,
        grid = { { "seq_q", 1 }, "kv_heads", "batch" }, workspaces = {} },
    },
    registers_estimate = 0,
    io_align = ({ fp64 = 8, fp32 = 4, fp16 = 2, bf16 = 2 })[problem.dtype],
    name = name, hash = name, family = "append", template_version = append.version,
    config = "family=append,dtype=" .. problem.dtype .. ",dim=" .. problem.dim ..
             (dv ~= 0 and ",dim_v=" .. dv or ""),
  }
end

return append
