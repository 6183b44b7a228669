/*
** record.h
** A variant recorded in a database as a tuning run on the emulator leaves
** it, for the tests that then call the library over that database
** (test_varlen, test_api): the config rendered for problem p on target t,
** one valid trial whose error, on its case and on a one-case adversarial
** suite, is err.
*/
#ifndef RECORD_H
#define RECORD_H

#include <math.h>
#include <stdio.h>

#include "db.h"
#include "gen.h"

/* The variant of config recorded as the best for the key of p, its name
** into name (det: whether it gives the same bits every run); -1 on a
** failure, said on stderr. */
static int record(gen_state *g, const gen_target *t, const char *config, const fa_problem *p,
                  const char *path, double err, char *name, size_t nn, int *det) {
  const char *op = fa_op_name(p->op);
  gen_kernel k;
  char json[1024], why[512];
  const int bad = gen_set_mod(g, p->mod) != 0 || gen_render_config(g, config, p, t, &k) != 0;
  gen_set_mod(g, NULL);
  if (bad) {
    fprintf(stderr, "%s: %s\n", config, gen_errmsg(g));
    return -1;
  }
  snprintf(name, nn, "%s", k.name);
  *det = k.deterministic;
  db *d = NULL;
  long long dev, var;
  int rc = gen_config_json(&k.cfg, json, sizeof json) != 0 || db_open(path, DB_CREATE, &d, why, sizeof why);
  db_device dd = {.name = "CPU emulator", .uuid = "emu", .backend = "emu"};
  db_variant dv = {k.cfg.family, k.template_version, k.name, k.hash, json, k.source_hash, op,
                   p->mod ? p->mod->hash : NULL, p->mod ? p->mod->label : NULL};
  db_trial tr = {.status = "ok", .median_us = NAN, .min_us = NAN, .p20_us = NAN, .p80_us = NAN,
                 .tflops = NAN, .gbps = NAN, .rel_err = err, .suite_cases = 1,
                 .suite_err = err, .suite_failed = "",
                 .counters = "{\"global_bytes_read\": 1, \"global_bytes_written\": 1}",
                 .problem = {.dtype = fa_dtype_name(p->dtype), .dim = p->dim, .seq_q = p->seq_q,
                             .seq_k = p->seq_k, .batch = p->batch, .heads = p->heads,
                             .causal = p->causal, .op = op, .dim_v = p->dim_v},
                 .deterministic = k.deterministic ? DB_DET_YES : DB_DET_NO};
  if (!rc) rc = db_device_id(d, &dd, &dev, why, sizeof why) || db_variant_id(d, &dv, &var, why, sizeof why);
  tr.variant_id = var, tr.device_id = dev;
  if (!rc) rc = db_trial_put(d, &tr, why, sizeof why);
  if (rc) fprintf(stderr, "recording %s: %s\n", k.name, why);
  if (d) db_close(d);
  gen_kernel_free(&k);
  return rc ? -1 : 0;
}

#endif
