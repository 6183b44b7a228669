-- oracle.lua
-- Naive attention as a kernel: the validation oracle for problems too big
-- for the CPU reference. One CTA per query row materializes the row's
-- scores (in shared memory, in the accumulation type: fp64 for fp64, else
-- fp32), takes the softmax with its maximum subtracted, then multiplies
-- with V; O and the logsumexp are written in that accumulation type, never
-- rounded to 16 bits. No tiling, no online softmax: nothing in common with
-- the kernels it judges but the primitives.

local oracle = { name = "oracle", version = 1 }

local loaders = {
  fp32 = { T = "f32", acc = "float", ld = "fa_ldg_f32(%s)" },
  fp64 = { T = "f64", acc = "double", ld = "fa_ldg_f64(%s)" },
  fp16 = { T = "f32", acc = "float", ld = "fa_f16_to_f32(fa_ldg_u16(%s))", elem = "unsigned short" },
  bf16 = { T = "f32", acc = "float", ld = "fa_bf16_to_f32(fa_ldg_u16(%s))", elem = "unsigned short" },
  e4m3 = { T = "f32", acc = "float", ld = "fa_e4m3_to_f32(fa_ldg_u8(%s))", elem = "unsigned char" },
}

oracle.threads = 128

-- problem: { dtype, dim, causal, dim_v (when V's head dim is not dim) }. Shared memory depends on seq_k: the host
-- gives (seq_k + threads) accumulators' worth at launch.
function oracle.render(problem)
  local l = loaders[problem.dtype]
  if not l then error("no oracle for dtype '" .. tostring(problem.dtype) .. "'", 0) end
  local causal = problem.causal == 1 and 1 or 0
  local dv = require("enum").dim_v(problem)
  local name = string.format("oracle-%s-d%d%s%s", problem.dtype, problem.dim,
                             dv ~= 0 and "v" .. dv or "", causal == 1 and "-causal" or "")
  local args = { entry = name:gsub("-", "_"), D = problem.dim, DV = dv ~= 0 and dv or problem.dim,
                 causal = causal, NT = oracle.threads,
                 T = l.T, acc = l.acc, elem = l.elem or l.acc,
                 ld = function(p) return string.format(l.ld, p) end }
  return {
    source = render("oracle.cu", args), op = "fwd",
    preludes = require("enum").preludes,
    -- One CTA per query row; its shared memory is the caller's to set.
    launches = {
      { entry = args.entry, threads = oracle.threads, smem_bytes = 0,
        grid = { { "seq_q", 1 }, "heads", "batch" }, workspaces = {} },
    },
    registers_estimate = 0,
    io_align = ({ fp64 = 8, fp32 = 4, fp16 = 2, bf16 = 2, e4m3 = 1 })[problem.dtype],
    name = name, hash = name, config = "family=oracle,dtype=" .. problem.dtype .. ",dim=" ..
    problem.dim .. (dv ~= 0 and ",dim_v=" .. dv or "") .. ",causal=" .. causal, family = "oracle", template_version = oracle.version,
  }
end

return oracle
