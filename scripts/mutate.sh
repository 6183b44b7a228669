#!/usr/bin/env bash
# mutate.sh: mutation testing. Plants each bug of the list below, one at a
# time, in a scratch copy of the tree (built there), runs the tests that
# should catch it, then the rest of the suite if none did, and prints a
# table (mutation, killed by, time) and the score. A mutation no test kills
# is a gap in the tests: strengthen them until every one is killed.
#
# A test named py:FILE is the Python package's python/tests/FILE, run by
# pytest ($FATUNE_PYTEST, else build/venv/bin/pytest of the tree, as
# scripts/install-deps.sh makes it) against the scratch copy's package,
# library and command.
#
# Each mutation replaces a piece of text, FROM, by TO (empty: deleted) on
# the one line of FILE that holds FROM. The rule is on a line's content,
# not its number, so it survives edits elsewhere; FROM must occur exactly
# once in the file, else the mutation is an ERROR (its anchor moved: update
# it here), never a kill or a survivor.
#
# usage: scripts/mutate.sh [--quick] [--check] [--keep] [-j N] [NAME...]
#   --quick  a sample of the list, one per layer, in a few minutes
#   --check  only check that every anchor applies exactly once (no build;
#            the ctest test mutate_anchors runs this)
#   --keep   leave the scratch copy (its path is printed)
#   -j N     build and test jobs (default: the number of cores)
#   NAME...  only these mutations
# A test that fails, crashes or runs past its time (900 s unless ctest has
# one for it) kills. On a shared machine run the whole script under nice,
# not its tests alone: a test niced twice can starve into a timeout.
# Exit status: 0 when every mutation run is killed, 1 otherwise, 2 on a
# usage or setup error. Not run by CI: the whole list takes about an hour
# on 2 cores.
set -u

root=$(cd "$(dirname "$0")/.." && pwd)

# ---- The mutations: name, file, FROM, TO, and the tests that should kill
# it: ctest names, |-separated, in stages separated by spaces, cheapest
# first; the next stage runs only when no test of this one failed. One
# place to update when code moves.
names=() files=() froms=() tos=() tests=()
mut() { names+=("$1") files+=("$2") froms+=("$3") tos+=("$4") tests+=("$5"); }

mut deferred-rescale templates/simt/simt.cu \
  'o[i][k] = fa_rescale_${T}(o[i][k], alpha);' 'o[i][k] = fa_rescale_${T}(o[i][k], (acc_t)1);' \
  'test_emu test_counters'
mut causal-off-by-one templates/simt/simt.cu \
  '" || gc > " .. q0' '" || gc >= " .. q0' \
  'test_emu test_counters|test_space'
mut stage-barrier-1 templates/tc/tc.cu \
  'fa_syncthreads(); /* every warp is done with the stage */' ';' \
  'test_emu test_space'
mut stage-barrier-n templates/tc/tc.cu \
  "fa_syncthreads();           /* for every thread; and the previous iteration's stage is free */" ';' \
  'test_emu test_space'
mut quad-xor2 templates/tc/tc.cu \
  'lanes = { 1, 2 }' 'lanes = { 1 }' \
  'test_emu test_counters'
mut tail-keys-visible templates/softmax.cu \
  'const int lim = p.seq_k;' 'const int lim = p.seq_k + 1;' \
  'test_space'
mut reference-scale runtime/reference.c \
  '  scale = fa_problem_scale(p);' '  scale = 1.0 / p->dim;' \
  'test_reference test_emu'
mut setmaxnreg-budget templates/prelude_emu_sm90.h \
  'if (asked > (long)per * c->threads)' 'if (asked > (long)per * c->threads + 4096)' \
  'test_emu_sm90'
mut mac-compiler-field db/db_mac.c \
  'k->target, k->compiler_version, k->options};' 'k->target, k->options};' \
  'test_trust'
mut oracle-tolerance tuner/trial/validate.c \
  'val_tolerance(p->dtype == FA_FP64 ? FA_FP64 : FA_FP32)))' 'val_tolerance(p->dtype)))' \
  'test_emu'
mut sass-local-loads tuner/analysis/sass.c \
  'else if (!strcmp(op, "LDL") || !strcmp(op, "STL")) c->loop_local' 'else if (!strcmp(op, "STL")) c->loop_local' \
  'test_sass'
mut reference-causal-diagonal runtime/reference.c \
  'n = (long long)r + p->seq_k - p->seq_q + 1;' 'n = (long long)r + p->seq_k - p->seq_q;' \
  'test_reference'
mut merge-zero-timing db/db_check.c \
  'return timing ? v > 0 && isfinite(v)' 'return timing ? v >= 0 && isfinite(v)' \
  'cli_hostile'
mut merge-negative-error db/db_check.c \
  ': v >= 0;' ': 1;' \
  'cli_hostile'
mut lib-lse-overlap lib/fatune.c \
  'for (int w = 3; w < (x->lse ? 5 : 4); w++)' 'for (int w = 3; w < 4; w++)' \
  'test_api'
mut npy-zero-dim runtime/npy.c \
  'if (shape[i] <= 0) {' 'if (shape[i] < 0) {' \
  'test_npy'
mut sass-inner-trips tuner/analysis/sass.c \
  'long trips = (left + inner_mma - 1) / inner_mma;' 'long trips = left / inner_mma;' \
  'test_sass'
mut mbar-load-in-flight templates/prelude_emu_sm90.h \
  'if (t->cta->loads[i].bar == bar)' 'if (0 && t->cta->loads[i].bar == bar)' \
  'test_emu_sm90'
mut fake-leak-report tests/fakecuda/fc_api.c \
  'if (n) fc_violation("context %d destroyed with %zu allocation(s)' 'if (0 && n) fc_violation("context %d destroyed with %zu allocation(s)' \
  'test_cuda_contract_violations'
mut wg-persistent-q-early templates/wg/wg.cu \
  'if (n_blocks > 0 && kv > 0) fa_mbar_wait(&empty_k' 'if (0 && n_blocks > 0 && kv > 0) fa_mbar_wait(&empty_k' \
  'test_explore_wg'
mut reference-bwd-scale runtime/reference.c \
  'const double scale = fa_problem_scale(p);' 'const double scale = 1.0 / p->dim;' \
  'test_reference_bwd'
mut reference-bwd-dsum runtime/reference.c \
  'pr[c] * (ds[c] - sum) * f : 0.0;' 'pr[c] * ds[c] * f : 0.0;' \
  'test_reference_bwd'
mut reference-bwd-dmod runtime/reference.c \
  'pr[c] * (ds[c] - sum) * f : 0.0;' 'pr[c] * (ds[c] - sum) : 0.0;' \
  'test_reference_bwd'
mut mod-derivative-tanh templates/mod.lua \
  'return mul(sub(const(1), mul(n, n)), da)' 'return mul(add(const(1), mul(n, n)), da)' \
  'test_reference_bwd'
mut bwd-causal-first templates/simtbwd/simtbwd.cu \
  'const int first = k0 - off > 0 ? (k0 - off) / ${BM} : 0;' 'const int first = k0 - off > 0 ? (k0 - off) / ${BM} + 1 : 0;' \
  'test_bwd'
mut bwd-delta templates/simtbwd/simtbwd.cu \
  'ds = pv * (dp - fa_lds_${T}(d_s + r));' 'ds = pv * dp;' \
  'test_bwd'
mut bwd-dq-barrier templates/simtbwd/simtbwd.cu \
  'fa_syncthreads(); /* dS and K are read: the next K/V block may load */' ';' \
  'test_bwd'
mut bwd-atomic-zero templates/simtbwd/simtbwd.cu \
  'fa_st_${T}(qacc + (long long)q0 * ${D} + e, (acc_t)0);' ';' \
  'test_bwd'
mut tcbwd-mask templates/tcbwd/tcbwd.cu \
  'if (!(gr < p.seq_q && gn < p.seq_k && gn <= gr + off)) pv[j] = 0.f;' 'if (!(gr < p.seq_q && gn < p.seq_k)) pv[j] = 0.f;' \
  'test_bwd'
mut tcbwd-dscore templates/tcbwd/tcbwd.cu \
  ' * fa_mod_dscore(mod_u, nat, ${at});' ';' \
  'test_bwd'
mut tc-mod-warp-rows templates/tc/tc.cu \
  'q0 + warp * %d, q0 + warp * %d + %d, key0' 'q0 + warp * %d, q0 + warp * %d + 0 * %d, key0' \
  'cli_mod'
mut mod-granule-edge core/fa_mod.c \
  'mn = min2(mn, v[j]), mx = max2(mx, v[j]);' 'mn = min2(mn, v[lo]), mx = max2(mx, v[lo]);' \
  'test_mod'
mut mod-block-mask-partial templates/mod.lua \
  'seen |= e == 0 ? 1 : e == 2 ? 4 : 2;' 'seen |= e == 0 ? 1 : 4;' \
  'cli_mod'
mut validate-mod-data tuner/trial/validate.c \
  'fa_problem fwd = c->p;' 'fa_problem fwd = *p;' \
  'cli_mod'
mut judge-grad-nan tuner/trial/validate.c \
  'if (same && !poisoned(got, p->dtype, i)) continue;' 'if (0 && same) continue;' \
  'test_judge'
mut reference-bwd-nan-row runtime/reference.c \
  'seen++;   /* a NaN logit too' 'seen += pr[c] > m;   /* a NaN logit too' \
  'test_reference_bwd'
mut decode-mod-range templates/decode.cu \
  'if (last >= 0) vis_lo = first * ${BN}, vis_hi' 'if (last >= 0) vis_lo = 0 * first * ${BN}, vis_hi' \
  'test_decode'
mut tcbwd-trans templates/tcbwd/tcbwd.cu \
  'fa_ldmatrix_x4_trans(pa[kt], ' 'fa_ldmatrix_x4(pa[kt], ' \
  'test_bwd'
mut tcbwd-ds-barrier templates/tcbwd/tcbwd.cu \
  'fa_syncthreads(); /* P and dS are in shared memory, whole */' ';' \
  'test_bwd'
mut tcbwd-causal-first templates/tcbwd/tcbwd.cu \
  'const int first = k0 - off > 0 ? (k0 - off) / ${BM} : 0;' 'const int first = k0 - off > 0 ? (k0 - off) / ${BM} + 1 : 0;' \
  'test_bwd'
mut tcbwd-split-d templates/tcbwd/tcbwd.cu \
  '(dw * ${DTW} + 2 * d2 + a_chunk)' '(2 * d2 + a_chunk)' \
  'test_bwd'
mut bwd-gqa-group templates/simtbwd/simtbwd.cu \
  'for (int hq = h; hq < h + group; ++hq) {' 'for (int hq = h; hq < h + 1; ++hq) {' \
  'test_api'
mut tcbwd-gqa-head templates/tcbwd/tcbwd.cu \
  'dkg = (unsigned short *)p.dk + b * p.dk_sb + hk * p.dk_sh${' \
  'dkg = (unsigned short *)p.dk + b * p.dk_sb + h * p.dk_sh${' \
  'test_api'
mut val-bwd-sampled-rows tuner/trial/validate.c \
  'const size_t row = g_ref.rows ? g_ref.rows[i] : i;' 'const size_t row = i;' \
  'test_bwd'
mut bwd-fa1-dv-atomic templates/simtbwd/simtbwd.cu \
  'fa_atomic_add_${T}(kvacc + (long long)(k0 + n) * ${2 * D} + ${D} + d, av);' ';' \
  'test_bwd'
mut bwd-causal-skip templates/simtbwd/simtbwd.cu \
  'const int first = k0 - off > 0 ? (k0 - off) / ${BM} : 0;' 'const int first = 0;' \
  'test_explore'
mut bwd-model-causal templates/simtbwd/simtbwd_model.lua \
  'if causal and k0 - off > 0 then first = (k0 - off) // BM end' 'first = 0' \
  'test_explore'
mut py-bnhd-strides python/fatune/_numpy.py \
  'x, y, sx, sy = y, x, sy, sx' 'x, y = y, x' \
  'py:test_numpy.py'
mut py-negative-strides python/fatune/_numpy.py \
  'and s[2] % es == 0 and min(s) >= 0' 'and s[2] % es == 0' \
  'py:test_numpy.py'
mut py-torch-bnhd-strides python/fatune/_torch.py \
  'x, y, sx, sy = y, x, sy, sx' 'x, y = y, x' \
  'py:test_torch.py'
mut sweep-causal-both tuner/sweep.c \
  'if (o->causal_both) p.causal = c;' 'if (o->causal_both) p.causal = 1;' \
  'cli_sweep'
mut sweep-shard-base tuner/sweep.c \
  'shard(k, n, o->shard_i - 1, o->shard_n)' 'shard(k, n, o->shard_i, o->shard_n)' \
  'cli_sweep'
mut tc-fadd-rescale templates/tc/tc.cu \
  'float rs = l_i[mt][hh] * alpha;' 'float rs = l_i[mt][hh];' \
  'test_space'
mut tc-step-sum templates/tc/tc.cu \
  'l_i[mt][hh] += (x[0] + x[1]) + (x[2] + x[3]);' 'l_i[mt][hh] += (x[0] + x[1]) + x[2];' \
  'test_space'
mut tc-padded-span templates/tc/tc.cu \
  '< ${limit} && copy_chunk + sp * ${span} < ${dim // 8} ? 16 : 0;' \
  '< ${limit} && copy_chunk < ${dim // 8} ? 16 : 0;' \
  'test_fuzz_kernels_many|test_fuzz_layouts_many'
mut tc-carry-v-stride templates/tc/tc.cu \
  'vcp -= (long long)${block_n} * p.v_sn;' 'vcp -= (long long)${block_n} * p.k_sn;' \
  'test_fuzz_layouts_many'
mut wg-smem-slack templates/wg/wg.lua \
  'P.smem_bytes = 1024 + P.bar_offset' 'P.smem_bytes = P.bar_offset' \
  'test_fuzz_kernels_many|test_space'
mut ws-key-rows generator/gen.c \
  'const int rows = k->ws[i].key_rows ? p->seq_k : p->seq_q' 'const int rows = p->seq_q' \
  'test_bwd'
mut lib-bwd-overlap lib/fatune.c \
  'if (i != w && lo[w] < hi[i] && lo[i] < hi[w])' 'if (0)' \
  'test_api'
mut grad-nan-check tuner/trial/validate.c \
  'if (isfinite(x) && isfinite(ref)) continue;' 'continue;' \
  'test_judge'
mut sacc16-unpack templates/tc/tc.cu \
  '(fa_f16)(i & 1 ? sh[mt][n][i >> 1] >> 16' '(fa_f16)(i & 1 ? sh[mt][n][i >> 1] & 0xFFFFu' \
  'cli_targets'
mut model-hmma-f16-rate tuner/analysis/model_sass.c \
  '(sass_hmma_f16acc(t) ? e->mma16_flop_clk' '(0 ? e->mma16_flop_clk' \
  'cli_model'
mut sass-hmma-f16 tuner/analysis/sass.c \
  'if (sass_hmma_f16acc(in->text)) c->loop_hmma_f16acc += times;' ';' \
  'test_sass'
mut sass-bra-operand-predicate tuner/analysis/sass.c \
  'if (!strcmp(in.op, "BRA")) branch_operand_predicate(&in, p, e);' ';' \
  'test_sass'
mut fp8-vt-perm templates/wg/wg.cu \
  '(i < 2 ? 2 * t + i : 6 + 2 * t + i)' '(4 * t + i)' \
  'cli_fp8'
mut fp8-v-descale templates/wg/wg.cu \
  'inv_row[hh] = inv${bs and " * fa_exp2_f32(lvcur)" or f8 and " * v_descale" or ""};' \
  'inv_row[hh] = inv${bs and " * fa_exp2_f32(lvcur)" or ""};' \
  'cli_fp8'
mut fp8-block-chunk templates/wg/wg.cu \
  'kb = (32 * x) >> shift;' 'kb = (16 * x) >> shift;' \
  'cli_fp8'
mut fp8-block-v-exponent templates/wg/wg.cu \
  'const float nb = vl - mu[hh];' 'const float nb = -mu[hh];' \
  'cli_fp8'
mut fp8-block-o-units templates/wg/wg.cu \
  'oscale[hh] *= vratio;' 'oscale[hh] *= 1.f;' \
  'test_lib_fp8|cli_fp8'
mut wgbwd-causal templates/wgbwd/wgbwd.cu \
  'if (!(key < p.seq_k && key <= q + off)) sv[0] = 0.f;' 'if (!(key < p.seq_k)) sv[0] = 0.f;' \
  'test_bwd'
mut wgbwd-mask-loop templates/wgbwd/wgbwd.cu \
  '.. q0 .. " + off" end' '.. q0 .. " + off + " .. BM end' \
  'test_bwd'
mut wgbwd-dq-turn templates/wgbwd/wgbwd.cu \
  'local handoff = own and C > 1' 'local handoff = false' \
  'test_bwd'
mut wgbwd-dout-map runtime/attn_run.c \
  'base = a->dout, sn = a->do_sn,' 'base = a->o, sn = a->do_sn,' \
  'test_bwd'
mut fp8-k-descale templates/wg/wg.cu \
  '(p.k_descale ? fa_ldg_f32(p.k_descale + ds) : 1.f);' '1.f;' \
  'cli_fp8'
mut fwd-kv-group runtime/attn_run.c \
  'a->kv_group = fa_problem_group(p);  /* as the launch grids' '(void)0;  /* as the launch grids' \
  'test_generator'
mut fp8-eager-fits templates/wg/wg.lua \
  'if c.norm == "eager" then' 'if false then' \
  'cli_fp8'
mut emu-fp8-gather templates/prelude_emu_sm90.h \
  'memcpy(&word, slots[w0 + 4 * (l / 4) + (k % 16) / 4]' 'memcpy(&word, slots[w0 + 4 * (l / 4) + (k % 8) / 2]' \
  'test_emu_sm90'
mut emu-e4m3-round templates/prelude_emu_sm90.h \
  '(unsigned)nearbyintf(a * fa_emu_bits_f32' '(unsigned)roundf(a * fa_emu_bits_f32' \
  'test_emu_sm90'
mut model-qgmma-rate tuner/analysis/model_sass.c \
  '(e->hgmma_flop_clk * (k / 16))' '(e->hgmma_flop_clk)' \
  'cli_fp8'
mut sass-qgmma tuner/analysis/sass.c \
  '{"HGMMA", "QGMMA", "HMMA", "DFMA", "FFMA"}' '{"HGMMA", "HMMA", "DFMA", "FFMA"}' \
  'cli_fp8'
mut fp8-hadamard core/fa_fp8.c \
  'v[j] = a + b, v[j + len] = a - b;' 'v[j] = a + b, v[j + len] = a;' \
  'test_fp8'
mut fp8-amax-scale core/fa_fp8.c \
  '(float)(amax / 448)' '(float)(amax / 240)' \
  'test_fp8'
mut lazy-threshold templates/softmax.cu \
  '<= ${sm.lit(F, "8")} ? mo' '<= ${sm.lit(F, "200")} ? mo' \
  'cli_targets'
mut sass-lazy-rescale tuner/analysis/sass.c \
  'if ((!ok || !sel) && !lazy_rescale(f, body, f->bb[b].last, from, to)) continue;' \
  'if (!ok || !sel) continue;' \
  'test_sass'
mut o-tol-logits tuner/trial/validate.c \
  'return fmax(tol, 2 * u * sqrt(s2 / ref_norm2));' 'return tol;' \
  'test_judge'
mut dv-tol-logits tuner/trial/validate.c \
  '(grad_ref){c->dv_ref, NULL, NULL, 0, c->dv_sens}' '(grad_ref){c->dv_ref, NULL, NULL, 0, NULL}' \
  'test_judge'
mut dv-sens-lse runtime/reference.c \
  'const double lse_size = amax + log((double)nvis);' 'const double lse_size = 0;' \
  'test_reference_bwd'
mut wgmma-chunk-fallback templates/prelude_emu_sm90.h \
  'fa_emu_desc_read_each(t, d, 0, mn, type, k0, per, out, line);' \
  'fa_emu_failf(t, line, "wgmma: operand element at shared offset %u, outside the CTA'"'"'s shared memory", off);' \
  'test_emu_sm90'
mut nan-check tuner/trial/validate.c \
  'if (!isfinite(x) || !isfinite(ref)) {' 'if (0) {' \
  'test_judge'
mut nan-poison tuner/trial/validate.c \
  'if (same && !poisoned(o, t, i)) continue;' 'if (same) continue;' \
  'test_judge'
mut tolerance tuner/trial/validate.c \
  'if (r->rel_err > tol_o) {' 'if (r->max_abs_err > 10 * tol_o) {' \
  'test_judge'
mut mma-b-swapped templates/prelude_emu_tc.h \
  'a[3], b[0], b[1]};' 'a[3], b[1], b[0]};' \
  'test_emu_tc'
mut resume-off-by-one tuner/trial/trial.c \
  'db_trial_get(e->db, t->variant_id, e->device_id,' 'db_trial_get(e->db, t->variant_id - 1, e->device_id,' \
  'cli_db'
mut nearest-seq db/db_query.c \
  '"abs(b.req_seq_q - ?5), abs(b.req_seq_k - ?6),' '"abs(b.req_seq_q - ?5) DESC, abs(b.req_seq_k - ?6) DESC,' \
  'test_db test_lib'
mut nearest-batch db/db_query.c \
  'min(b.req_batch, ?13), 1), b.req_batch, ' 'min(b.req_batch, ?13), 1) DESC, b.req_batch, ' \
  'test_db'
mut npy-fortran runtime/npy.c \
  'if (h.fortran)' 'if (0 && h.fortran)' \
  'test_npy'
mut lse-log2 templates/softmax.lua \
  'lit(F, "0.69314718055994530942")' 'lit(F, "1")' \
  'test_emu test_counters'
mut kv-outer-ml templates/simt/simt.cu \
  'fa_st_${T}(wg + gr * 2, m_i[i]);' '' \
  'test_emu test_counters'
mut wg-ring-wrap templates/wg/wg.cu \
  'if (f >= ${S}) fa_mbar_wait(&empty_${which}[i], ((f / ${S}) & 1) ^ 1);' \
  'if (f > ${S}) fa_mbar_wait(&empty_${which}[i], ((f / ${S}) & 1) ^ 1);' \
  'test_fuzz_kernels_many'
mut wg-diag-round templates/wg/wg.cu \
  '(q0 + off + 1) / ${BN};' '(q0 + off + ${BN}) / ${BN};' \
  'test_fuzz_kernels_many'
mut py-byte-strides python/fatune/_numpy.py \
  's[1] % es == 0 and s[2] % es == 0 and min(s) >= 0' 's[1] % es == 0 and min(s) >= 0' \
  'py:test_numpy.py'
mut bwd-kv-grid templates/tcbwd/tcbwd.lua \
  'local kv_grid = { { "seq_k", c.block_n }, "kv_heads", "batch" }' \
  'local kv_grid = { { "seq_k", c.block_n }, "heads", "batch" }' \
  'test_generator'
mut tcbwd-qhead-grid templates/tcbwd/tcbwd.lua \
  'grid = c.qhead == 1 and { { "seq_k", c.block_n }, "heads", "batch" } or kv_grid' \
  'grid = kv_grid' \
  'test_generator test_bwd'
mut tcbwd-qhead-sum-order templates/tcbwd/tcbwd.cu \
  'for (int j = 0; j < group; ++j) sum += fa_ld_f32(at + j * room);' \
  'for (int j = 1; j < group; ++j) sum += fa_ld_f32(at + j * room);' \
  'test_bwd'
mut tcbwd-qhead-part-head templates/tcbwd/tcbwd.cu \
  '(float *)${args.kv_part} + ((long long)b * p.heads + h) * ${vl.key_rows(c)} * ${D + DV};' \
  '(float *)${args.kv_part} + ((long long)b * p.heads + hk) * ${vl.key_rows(c)} * ${D + DV};' \
  'test_bwd'
mut sass-mask-reload tuner/analysis/sass.c \
  '"PLOP3", "P2R", "R2P", "BRA", "NOP", "LDL", NULL};' '"PLOP3", "P2R", "R2P", "BRA", "NOP", NULL};' \
  'test_sass'
mut ref-bwd-gqa-head runtime/reference.c \
  'const int hk = h / group;' 'const int hk = h;' \
  'test_bwd'
mut ws-grouped-bytes generator/gen.c \
  'if (k->ws[i].grouped && fa_problem_kv_heads(p) == p->heads) return 0;' \
  'if (k->ws[i].grouped) return 0;' \
  'test_bwd'
mut bwd-kv-first-head templates/simtbwd/simtbwd.cu \
  'const int hk = fa_bid_y(), b = fa_bid_z(), h = hk * group;' \
  'const int hk = fa_bid_y(), b = fa_bid_z(), h = hk;' \
  'test_api test_fuzz_layouts_many'
mut trial-compiler tuner/trial/trial.c \
  '.compiler = compiler[0] ? compiler : NULL,' '.compiler = NULL,' \
  'cli_db'
mut merge-compiler-blob db/db_merge.c \
  'if (ct != SQLITE_NULL && ct != SQLITE_TEXT) {' 'if (0) {' \
  'test_merge'
mut suite-not-run tuner/trial/trial.c \
  'if (!e->gpu && oc->r.status == VAL_OK) run_suite(e, t, oc);' 'if (0) run_suite(e, t, oc);' \
  'cli_db'
mut budget-suite-failed db/db_query.c \
  "AND t.suite_cases > 0 AND t.suite_failed = '' \"" "AND t.suite_cases > 0 \"" \
  'cli_db'
mut lib-gqa-spread lib/fatune.c \
  'if (rc == 0) spread_query_heads(c, fp, k);' '' \
  'test_gpu_fake'
mut lib-gqa-spread-full lib/fatune.c \
  'l.grid[2] >= d->sm_count) return;' 'l.grid[2] >= 0) {}' \
  'test_gpu_fake'
mut page-divisor core/fa_problem.c \
  '/ (unsigned long long)d + 1);' '/ (unsigned long long)d);' \
  'test_decode'
mut tc-paged-span-xor templates/tc/tc.cu \
  'const int to = (copy_offset ^ sp * ${16 * span}) + i * ${pass_rows * row_bytes};' \
  'const int to = copy_offset + sp * ${16 * span} + i * ${pass_rows * row_bytes};' \
  'test_decode'
mut wg-paged-tail-rows templates/wg/wg.cu \
  'tok + r, hk, pos0 + r < p.seq_k ? page : p.num_pages, &full_${which}[i]);' \
  'tok + r, hk, page, &full_${which}[i]);' \
  'test_decode'
mut wg-paged-box-page templates/wg/wg.cu \
  'pg[k] = fa_shfl_idx_i32(${pages}, k), tok[k]' 'pg[k] = fa_shfl_idx_i32(${pages}, 0), tok[k]' \
  'test_decode'
mut wg-paged-box-row templates/wg/wg.cu \
  'tok[k] = fa_shfl_idx_i32(row, k);' 'tok[k] = fa_shfl_idx_i32(row, 0);' \
  'test_decode'
mut wg-paged-box-warp templates/wg/wg.cu \
  'const int g = pw + ${PW} * k;' 'const int g = ${PW} * k;' \
  'test_decode'
mut wg-paged-batch-idx templates/wg/wg.cu \
  ': pv.cache_batch_idx ? pv.cache_batch_idx + b : 0;' ': 0;' \
  'test_decode'
mut lib-prefill-share lib/fatune.c \
  '(wg ? 6 : 4) * rows >= share)' '(wg ? 6 * rows >= share : 2 * ctas >= sms))' \
  'test_gpu_fake'
mut lib-prefill-share-wg lib/fatune.c \
  '(wg ? 6 : 4) * rows >= share)' '4 * rows >= share)' \
  'test_gpu_fake'
mut lib-page-boxes lib/fatune.c \
  'for (int r = 32; r <= box; r *= 2)' 'for (int r = 32; r <= 128; r *= 2)' \
  'test_decode'
mut lib-decode-wide lib/fatune.c \
  'if (rc == 0) widen_decode_rows(c, fp, k);' '' \
  'test_decode'
mut lib-decode-wide-all lib/fatune.c \
  '(long long)fa_problem_group(fp) * fp->seq_q <= 16)' '0)' \
  'test_decode'
mut tcdec-rows-merge templates/tcdec/tcdec.cu \
  'const int w0 = i / 16 * ${WK}, li = i % 16;' 'const int w0 = 0, li = i % 16;' \
  'test_decode'
mut model-fa2-decode-splits tuner/analysis/model_launch.c \
  'l->splits = model_fa2_splits(p, g);' 'l->splits = 1;' \
  'cli_decode'
mut model-fa2-decode-per-head tuner/analysis/model_launch.c \
  'l->decode_per_head = p->seq_q > 1 && p->kv_group > 1;' 'l->decode_per_head = 0;' \
  'cli_decode'
mut lib-budget-default lib/fatune.c \
  'return fail(FATUNE_ENOTUNED, "nothing recorded' '(void)fail(FATUNE_ENOTUNED, "nothing recorded' \
  'test_lib'
mut simt-v-stride templates/simt/simt.cu \
  'if (n < ${BN} && gn < p.seq_k) vx = ${ldg("vg + gn * p.v_sn + d")};' \
  'if (n < ${BN} && gn < p.seq_k) vx = ${ldg("vg + gn * p.k_sn + d")};' \
  'test_dim_v'
mut ref-bwd-dv-cols runtime/reference.c \
  'for (d = 0; d < dv; d++) dvc[d] += pr[c] * dor[d];' \
  'for (d = 0; d < dv && d < p->dim; d++) dvc[d] += pr[c] * dor[d];' \
  'test_reference_bwd'
mut db-best-dim-v db/db_query.c \
  '"AND b.dim_v = ?11 AND b.mod = ?12 "' '"AND ?11 = ?11 AND b.mod = ?12 "' \
  'cli_dim_v'
mut lib-o-dim-v lib/fatune.c \
  'if (x->o.shape[3] != x->v.shape[3])' 'if (0)' \
  'test_lib'
mut turing-k8-split templates/prelude_tile.h \
  'const unsigned lo[2] = {a[0], a[1]}, hi[2] = {a[2], a[3]};' \
  'const unsigned lo[2] = {a[0], a[2]}, hi[2] = {a[1], a[3]};' \
  'test_emu_tc'
mut tc-bf16-turing templates/tc/tc.lua \
  'return tonumber(target.arch:match("^sm_(%d+)")) >= 80' 'return true' \
  'cli_targets'
mut model-ldsm-conflicts tuner/analysis/model_sass.c \
  'if (!strcmp(op, "LDSM") && ldsm_ways > 1)' 'if (0)' \
  'cli_model'
mut model-wgmma-sustained tuner/analysis/model_sass.c \
  '#define HOPPER_TENSOR (788.0 / 989.0)' '#define HOPPER_TENSOR 1.0' \
  'cli_model'
mut tcbwd-dq-order templates/tcbwd/tcbwd.cu \
  '+ 4 * j + 2 * hi + lo) * 32' '+ 4 * j + hi + 2 * lo) * 32' \
  'test_bwd'
mut model-red-free tuner/analysis/model_sass.c \
  'm->bytes = red_lines(t, l->red_lines) * RED_LINE_BYTES;' 'm->bytes = 0;' \
  'test_model|cli_model'
mut model-red-unqueued tuner/analysis/model.c \
  'case MK_RED: return s->red_free <= s->now + RED_QUEUE * s->sm->l2_latency;' 'case MK_RED: return 1;' \
  'test_model|cli_model'

# One of each layer, the quickest to build and test.
quick_names="nan-check npy-fortran mma-b-swapped stage-barrier-1 nearest-seq"

# ---- Options

quick=0 check=0 keep=0 jobs=$(nproc 2>/dev/null || echo 2) only=()
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --check) check=1 ;;
    --keep) keep=1 ;;
    -j) [ $# -ge 2 ] || { echo "mutate.sh: -j needs a number" >&2; exit 2; }
        jobs=$2; shift ;;
    -h|--help) sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "mutate.sh: unknown option '$1'" >&2; exit 2 ;;
    *) only+=("$1") ;;
  esac
  shift
done
case $jobs in ''|*[!0-9]*|0) echo "mutate.sh: -j needs a positive number, not '$jobs'" >&2; exit 2 ;; esac

selected() {  # selected NAME: 0 when NAME is to run
  local n
  if [ ${#only[@]} -gt 0 ]; then
    for n in "${only[@]}"; do [ "$n" = "$1" ] && return 0; done
    return 1
  fi
  [ $quick = 0 ] && return 0
  for n in $quick_names; do [ "$n" = "$1" ] && return 0; done
  return 1
}

for n in "${only[@]}"; do
  found=0
  for m in "${names[@]}"; do [ "$m" = "$n" ] && found=1; done
  [ $found = 1 ] || { echo "mutate.sh: no mutation '$n'; known: ${names[*]}" >&2; exit 2; }
done

# mutant FILE FROM TO: FILE with FROM replaced by TO, on stdout; status 1
# when FROM is not exactly once in FILE.
mutant() {
  FROM=$2 TO=$3 awk '
    BEGIN { from = ENVIRON["FROM"]; to = ENVIRON["TO"] }
    {
      line = $0; out = ""
      while ((i = index(line, from)) > 0) {
        n++
        out = out substr(line, 1, i - 1) to
        line = substr(line, i + length(from))
      }
      print out line
    }
    END { exit n == 1 ? 0 : 1 }' "$1"
}

# apply FILE FROM TO: the mutation in the scratch copy, the original kept
# outside the tree (templates/* is globbed into the build).
apply() {
  mutant "$src/$1" "$2" "$3" >"$scratch/mutant" &&
    cp "$src/$1" "$scratch/original" && cp "$scratch/mutant" "$src/$1"
}

if [ $check = 1 ]; then
  bad=0
  for i in "${!names[@]}"; do
    selected "${names[$i]}" || continue
    if mutant "$root/${files[$i]}" "${froms[$i]}" "${tos[$i]}" >/dev/null; then
      echo "ok    ${names[$i]}: ${files[$i]}"
    else
      echo "ERROR ${names[$i]}: '${froms[$i]}' is not exactly once in ${files[$i]}"; bad=1
    fi
  done
  exit $bad
fi

# ---- The scratch copy: the working tree as it is (tracked and untracked
# files git does not ignore), built once; each mutant rebuilds what it touches.

scratch=$(mktemp -d "${TMPDIR:-/tmp}/fatune-mutate.XXXXXX") || exit 2
cleanup() { [ $keep = 1 ] && echo "scratch copy kept: $scratch" || rm -rf "$scratch"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
src=$scratch/src build=$scratch/build
mkdir -p "$src" "$scratch/cache" || exit 2
(cd "$root" && git ls-files -z --cached --others --exclude-standard | xargs -0 tar -cf -) |
  tar -xf - -C "$src" || { echo "mutate.sh: cannot copy the tree" >&2; exit 2; }
# The per-user cache and database away from the user's.
export XDG_CACHE_HOME=$scratch/cache
unset FATUNE_DB

now() { date +%s; }
t0=$(now)
echo "building the scratch copy in $build ..."
if ! cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$scratch/cmake.log" 2>&1 ||
   ! cmake --build "$build" -j "$jobs" >"$scratch/build.log" 2>&1; then
  echo "mutate.sh: the unmutated tree does not build; see $scratch/build.log" >&2
  keep=1
  exit 2
fi
echo "built in $(( $(now) - t0 )) s"
# The suite's test names, one a line.
(cd "$build" && ctest -N) | sed -n 's/^ *Test *#[0-9]*: //p' >"$scratch/tests"

restore() { cp "$scratch/original" "$src/$1"; }

pytest=${FATUNE_PYTEST:-$root/build/venv/bin/pytest}
# run_stage STAGE LOG: its ctest tests (or py:FILE, pytest), output to LOG.
run_stage() {
  if [ "${1#py:}" != "$1" ]; then
    (cd "$src" && FATUNE_EXECUTABLE="$build/fatune" FATUNE_LIBRARY="$build/libfatune.so" \
       PYTHONPATH="$src/python" FATUNE_KEY="$build/tests/test.key" \
       timeout 900 "$pytest" -q -x "python/tests/${1#py:}" >"$2" 2>&1) ||
      printf 'The following tests FAILED:\n\t  0 - %s (Failed)\n' "$1" >>"$2"
  else
    (cd "$build" && ctest -j "$jobs" --timeout 900 -R "^($1)\$" >"$2" 2>&1)
  fi
}

# failed_tests LOG: the names ctest lists as failed, comma-separated.
failed_tests() {
  awk '/The following tests FAILED:/ { on = 1; next }
       on && /^[ \t]+[0-9]+ - / { sub(/^[ \t]+[0-9]+ - /, ""); sub(/ \(.*$/, ""); print }
       on && !/^[ \t]+[0-9]+ - / { on = 0 }' "$1" | paste -sd, -
}

rows=() killed=0 survived=0 errors=0 ran=0
for i in "${!names[@]}"; do
  name=${names[$i]}
  selected "$name" || continue
  ran=$((ran + 1))
  start=$(now)
  printf '%-20s ' "$name"
  if ! apply "${files[$i]}" "${froms[$i]}" "${tos[$i]}"; then
    verdict=ERROR by="anchor not found exactly once in ${files[$i]}"
    errors=$((errors + 1))
  elif ! cmake --build "$build" -j "$jobs" >"$scratch/$name.build.log" 2>&1; then
    verdict=ERROR by="the mutant does not build (see $name.build.log)"
    errors=$((errors + 1)) keep=1
    restore "${files[$i]}"
  else
    by= all= missing=
    for t in ${tests[$i]//|/ }; do
      if [ "${t#py:}" != "$t" ]; then
        [ -f "$src/python/tests/${t#py:}" ] && [ -x "$pytest" ] || missing=$t
      else
        grep -qx "$t" "$scratch/tests" || missing=$t
      fi
    done
    for stage in ${tests[$i]}; do
      [ -n "$missing" ] && break
      log=$scratch/$name.${stage//[:\/]/_}.log
      run_stage "$stage" "$log"
      by=$(failed_tests "$log")
      [ "${stage#py:}" = "$stage" ] && all=${all:+$all|}$stage
      [ -n "$by" ] && break
    done
    if [ -n "$missing" ]; then
      verdict=ERROR by="no test '$missing' (a ctest name, or py:FILE with pytest at $pytest)"
      errors=$((errors + 1))
    elif [ -z "$by" ]; then
      # None of its tests caught it: the rest of the suite (but the anchor
      # check, which fails on any mutated tree).
      log=$scratch/$name.suite.log
      (cd "$build" && ctest -j "$jobs" --timeout 900 -E "^(${all:+$all|}mutate_anchors)\$" >"$log" 2>&1)
      by=$(failed_tests "$log")
      [ -n "$by" ] && by="$by (not its own tests)"
    fi
    if [ -n "$missing" ]; then :
    elif [ -n "$by" ]; then verdict=killed killed=$((killed + 1))
    else verdict=SURVIVED by="-" survived=$((survived + 1)); fi
    restore "${files[$i]}"
  fi
  secs=$(( $(now) - start ))
  printf '%-8s %5d s  %s\n' "$verdict" "$secs" "$by"
  rows+=("$(printf '%-20s %-8s %5d s  %s' "$name" "$verdict" "$secs" "$by")")
done

echo
printf '%-20s %-8s %7s  %s\n' mutation verdict time "killed by"
for r in "${rows[@]}"; do echo "$r"; done
scored=$((killed + survived))
if [ $scored -gt 0 ]; then
  echo "score: $killed/$scored killed ($((100 * killed / scored))%), $errors error(s); $ran run in $(( $(now) - t0 )) s"
else
  echo "score: nothing scored, $errors error(s)"
fi
[ $survived = 0 ] && [ $errors = 0 ]
