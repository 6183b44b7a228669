/*
** merge_check.c
** The generator's verdict on a variant of a file being merged, for one
** target or, when none is named, for the first target of the space that
** it fits.
*/
#include <stdio.h>
#include <string.h>

#include "fa_escape.h"
#include "merge_check.h"

static int open_gen(merge_check *c, char *err, size_t errlen) {
  if (c->gen) return 0;
  if (gen_open(&c->gen, err, errlen) != 0) return -1;
  if (gen_list_archs(c->gen, &c->archs) == 0 && c->archs.n > 0) return 0;
  snprintf(err, errlen, "the generator's targets: %s", gen_errmsg(c->gen));
  merge_check_close(c);
  return -1;
}

/* The verdict for one arch; why holds the generator's reason, made fit
** for a terminal, when the config does not render for it. */
static int fits_arch(merge_check *c, const db_merge_row *row, const char *arch, char *why,
                     size_t n, char *err, size_t errlen) {
  gen_target t;
  gen_kernel k;
  memset(&k, 0, sizeof k);
  int rc = gen_target_for_arch(c->gen, arch, 0, 0, &t);
  if (rc == 0) rc = gen_render_config(c->gen, row->config_kv, NULL, &t, &k);
  if (rc == FA_ENOMEM) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  if (rc != 0) {
    char msg[120];
    fa_esc_term_buf(msg, sizeof msg, gen_errmsg(c->gen));
    snprintf(why, n, "its config is not in the space (%s)", msg);
    return DB_MERGE_REFUSE;
  }
  /* The generator's own name, hash and op of the config: a pure function of it. */
  const int ok = !strcmp(row->family, k.cfg.family) && !strcmp(row->name, k.name) &&
                 !strcmp(row->hash, k.hash) && row->op && !strcmp(row->op, fa_op_name(k.op));
  if (!ok)
    snprintf(why, n, "its family, name, hash or op is not its config's (%s, %s, %s)", k.name,
             k.hash, fa_op_name(k.op));
  gen_kernel_free(&k);
  return ok ? DB_MERGE_TAKE : DB_MERGE_MISMATCH;
}

static int accept_row(void *ud, const db_merge_row *row, char *why, size_t n, char *err,
                      size_t errlen) {
  merge_check *c = ud;
  if (open_gen(c, err, errlen) != 0) return -1;
  if (row->arch[0]) return fits_arch(c, row, row->arch, why, n, err, errlen);
  /* No target named: the first the config fits, else the first one's reason. */
  int verdict = DB_MERGE_REFUSE;
  for (int i = 0; i < c->archs.n && verdict == DB_MERGE_REFUSE; i++) {
    char reason[200] = "";
    verdict = fits_arch(c, row, c->archs.arch[i], reason, sizeof reason, err, errlen);
    if (verdict == DB_MERGE_MISMATCH || (verdict == DB_MERGE_REFUSE && i == 0))
      snprintf(why, n, "%s", reason);
  }
  return verdict;
}

db_merge_accept merge_check_accept(merge_check *c) {
  return (db_merge_accept){accept_row, c};
}

void merge_check_close(merge_check *c) {
  if (c->gen) gen_close(c->gen);
  c->gen = NULL;
}
