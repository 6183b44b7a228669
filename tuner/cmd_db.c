/*
** cmd_db.c
** The database commands. best answers "which variant for this problem",
** naming the nearest tuned sequence length when the exact one was never
** tuned; show lists trials; export writes them all as CSV or JSON; merge
** brings in another fatune file. Readers never create a database: a
** missing file is an answer ("nothing has been tuned there yet").
*/
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cmd_db.h"
#include "db.h"
#include "fa_escape.h"
#include "json.h"
#include "merge_check.h"

static int bad_input(const char *msg) { return cli_say(EXIT_BAD_INPUT, msg); }

static int open_db(const cli_opts *o, int flags, db **d) {
  char err[512];
  if (db_open(o->db, flags, d, err, sizeof err) == 0) return 0;
  cli_say(1, err);
  return -1;
}

/* Closing after a read cannot lose anything; after merge the commit is done. */
static int close_db(db *d, int rc) {
  if (db_close(d) != 0 && rc == 0) return cli_say(1, "the database did not close cleanly");
  return rc;
}

/* best ------------------------------------------------------------------ */

static void print_value(const char *key, double v) {
  if (isnan(v)) printf("%-10s -\n", key);
  else printf("%-10s %.2f\n", key, v);
}

/* "key   text", the text from the file as a terminal may show it. */
static void text_line(const char *key, const char *text) {
  printf("%-10s ", key);
  fa_esc_term(stdout, text);
  putchar('\n');
}

static void best_text(const db_best_row *r) {
  text_line("variant", r->variant);
  text_line("hash", r->hash);
  text_line("config", r->config);
  printf("%-10s ", "device");
  fa_esc_term(stdout, r->device);
  printf(" (");
  fa_esc_term(stdout, r->backend);
  printf(")\n%-10s ", "problem");
  fa_esc_term(stdout, r->dtype);
  char dims[24];
  fa_dims_text(r->dim, r->dim_v, dims, sizeof dims);
  printf(" dim %s seq_q %d seq_k %d batch %d heads %d%s\n", dims, r->seq_q, r->seq_k, r->batch,
         r->heads, r->causal ? " causal" : "");
  if (r->req_seq_q != r->seq_q || r->req_seq_k != r->seq_k)
    printf("%-10s run at seq_q %d seq_k %d for the requested seq_q %d seq_k %d (the emulator's "
           "size)\n", "ran", r->seq_q, r->seq_k, r->req_seq_q, r->req_seq_k);
  if (r->req_batch > 0) {   /* a key of decoding's */
    char page[24] = "none (contiguous)";
    if (r->page > 0) snprintf(page, sizeof page, "%d", r->page);
    printf("%-10s batch %d gqa %d page %s\n", "key", r->req_batch, r->kv_group, page);
  } else if (r->kv_group > 1) {   /* the backward pass's */
    printf("%-10s gqa %d\n", "key", r->kv_group);
  }
  text_line("arch", r->arch[0] ? r->arch : "- (recorded before fatune kept the target)");
  print_value("median_us", r->median_us);
  print_value("tflops", r->tflops);
  if (r->global_bytes >= 0) printf("%-10s %lld (emulator count)\n", "gmem_bytes", r->global_bytes);
  printf("%-10s rel %.2e, max abs %.2e\n", "errors", r->rel_err, r->max_abs_err);
  text_line("recorded", r->created);
}

static void json_field(const char *key, double v) {
  printf(", \"%s\": ", key);
  json_number(stdout, v);
}

static void best_json(const db_best_row *r, const fa_problem *p, int exact) {
  printf("{\"variant\": ");
  json_string(stdout, r->variant);
  printf(", \"hash\": ");
  json_string(stdout, r->hash);
  /* SQLite's canonical JSON, or "" when the file holds no JSON there */
  printf(", \"config\": %s, \"device\": ", r->config[0] ? r->config : "null");
  json_string(stdout, r->device);
  printf(", \"backend\": ");
  json_string(stdout, r->backend);
  printf(", \"dtype\": ");
  json_string(stdout, r->dtype);
  printf(", \"arch\": ");
  if (r->arch[0]) json_string(stdout, r->arch);
  else printf("null");
  printf(", \"dim\": %d, \"dim_v\": %d, \"seq_q\": %d, \"seq_k\": %d, \"batch\": %d, "
         "\"heads\": %d, \"causal\": %s, \"exact\": %s, \"requested_seq_q\": %d, "
         "\"requested_seq_k\": %d, \"tuned_for_seq_q\": %d, \"tuned_for_seq_k\": %d",
         r->dim, r->dim_v ? r->dim_v : r->dim, r->seq_q, r->seq_k, r->batch, r->heads,
         r->causal ? "true" : "false", exact ? "true" : "false", p->seq_q, p->seq_k,
         r->req_seq_q, r->req_seq_k);
  printf(", \"requested_batch\": %d, \"kv_group\": %d, \"page\": %d", r->req_batch,
         r->kv_group, r->page);
  json_field("median_us", r->median_us);
  json_field("tflops", r->tflops);
  json_field("gbps", r->gbps);
  json_field("rel_err", r->rel_err);
  json_field("max_abs_err", r->max_abs_err);
  if (r->global_bytes >= 0) printf(", \"global_bytes\": %lld", r->global_bytes);
  else printf(", \"global_bytes\": null");
  printf(", \"created\": ");
  json_string(stdout, r->created);
  printf("}\n");
}

/* "seq 5000", or "seq_q 5000 seq_k 6000" when they differ. */
static void seq_text(char *buf, size_t n, int q, int k) {
  if (q == k) snprintf(buf, n, "seq %d", q);
  else snprintf(buf, n, "seq_q %d seq_k %d", q, k);
}

static int cmd_best(const cli_opts *o) {
  const fa_problem *fp = &o->problem;
  const int decode = fp->op == FA_OP_DECODE;
  /* Decoding's --seq has a default (one new token), its batch is part of
  ** the key, and --heads only has to take --gqa (which must divide it). */
  if (!cli_given(o, "--dim") || (!decode && !cli_given(o, "--seq")))
    return bad_input("fatune best needs --dim D and --seq N");
  if (!decode && (cli_given(o, "--batch") || cli_given(o, "--heads")))
    return bad_input("options --batch and --heads do not apply to 'fatune best'");
  db_problem p = {.dtype = fa_dtype_name(fp->dtype), .dim = fp->dim, .seq_q = fp->seq_q,
                  .seq_k = fp->seq_k, .causal = fp->causal, .op = fa_op_name(fp->op),
                  .max_rel_err = o->max_error, .deterministic = o->deterministic,
                  .dim_v = fa_problem_dim_v(fp)};
  const fa_key_extra ek = fa_problem_key_extra(fp);
  p.req_batch = ek.batch, p.kv_group = ek.kv_group, p.page = ek.page;
  db *d;
  if (open_db(o, DB_READONLY, &d) != 0) return 1;
  db_best_row r;
  int found = 0, exact = 0;
  char err[512], want[64], got[64];
  /* Without --dtype: the dtypes in the order the main job picks them (bf16
  ** on tensor cores first), the first with an entry for this very seq,
  ** else the first with any. */
  static const char *const order[] = {"bf16", "fp16", "fp32", "fp64", "e4m3"};
  const int any = !cli_given(o, "--dtype");
  const char *pick = NULL;
  int kinds = 0, pick_exact = 0;
  for (size_t i = 0; i < (any ? sizeof order / sizeof order[0] : 1u); i++) {
    if (any) p.dtype = order[i];
    if (db_best(d, o->device, &p, &r, &found, &exact, err, sizeof err) != 0)
      return close_db(d, cli_say(1, err));
    kinds += found;
    if (found && (!pick || (exact && !pick_exact))) pick = p.dtype, pick_exact = exact;
  }
  if (pick && pick != p.dtype) {
    p.dtype = pick;
    if (db_best(d, o->device, &p, &r, &found, &exact, err, sizeof err) != 0)
      return close_db(d, cli_say(1, err));
  }
  if (!found) {
    /* "bwd bf16" names the op when it is not the forward pass. */
    char what[48];
    snprintf(what, sizeof what, "%s%s%s", fp->op == FA_OP_FWD ? "" : p.op,
             fp->op == FA_OP_FWD ? "" : " ", any ? "any dtype" : p.dtype);
    char words[80], budget[96] = "";
    db_budget_text(&p, words, sizeof words);
    if (words[0]) snprintf(budget, sizeof budget, " that meets %s", words);
    char dims[24], key[64] = "";
    fa_dims_text(p.dim, p.dim_v, dims, sizeof dims);
    if (decode) snprintf(key, sizeof key, " batch %d gqa %d page %d", p.req_batch, p.kv_group,
                         p.page);
    else if (p.kv_group > 1) snprintf(key, sizeof key, " gqa %d", p.kv_group);
    fprintf(stderr, "fatune: nothing recorded%s for %s dim %s%s%s%s%s in %s\n", budget, what,
            dims, key, p.causal ? " causal" : "", o->device ? " on device " : "",
            o->device ? o->device : "", db_path(d));
    return close_db(d, 1);
  }
  if (kinds > 1)
    fprintf(stderr, "fatune: dtype %s (no --dtype: the first of bf16, fp16, fp32 and fp64 "
                    "recorded; %d have entries)\n", p.dtype, kinds);
  if (!exact) {
    seq_text(want, sizeof want, p.seq_q, p.seq_k);
    seq_text(got, sizeof got, r.seq_q, r.seq_k);
    if (decode) {  /* the batch asked and the one taken (by ratio, then the length) */
      const size_t w = strlen(want), g = strlen(got);
      snprintf(want + w, sizeof want - w, " batch %d", p.req_batch);
      snprintf(got + g, sizeof got - g, " batch %d", r.req_batch);
    }
    fprintf(stderr, "fatune: no exact entry for %s; nearest tuned: %s\n", want, got);
  }
  if (o->json) best_json(&r, fp, exact);
  else best_text(&r);
  return close_db(d, fflush(stdout) == 0 ? 0 : 1);
}

/* show, export, merge --------------------------------------------------- */

static int cmd_show(const cli_opts *o) {
  const fa_problem *p = &o->problem;
  db_filter f = {
    .device = o->device,
    .dtype = cli_given(o, "--dtype") ? fa_dtype_name(p->dtype) : NULL,
    .dim = cli_given(o, "--dim") ? p->dim : 0,
    .seq_q = cli_given(o, "--seq") ? p->seq_q : 0,
    .seq_k = cli_given(o, "--seq-k") ? p->seq_k : 0,
    .batch = cli_given(o, "--batch") ? p->batch : 0,
    .heads = cli_given(o, "--heads") ? p->heads : 0,
    .causal = p->causal ? 1 : -1,
    .op = fa_op_name(p->op),
    .dim_v = cli_given(o, "--dim-v") ? p->dim_v : 0,
    .kv_group = cli_given(o, "--gqa") ? fa_problem_group(p) : 0,
    .page = cli_given(o, "--page") ? p->page : 0};
  db *d;
  if (open_db(o, DB_READONLY, &d) != 0) return 1;
  char err[512];
  size_t rows;
  if (db_show(d, &f, o->json, stdout, &rows, err, sizeof err) != 0)
    return close_db(d, cli_say(1, err));
  int filtered = f.device || f.dtype || f.dim || f.seq_q || f.seq_k || f.batch || f.heads ||
                 f.causal > 0 || f.dim_v || f.kv_group || f.page;
  if (rows == 0)
    fprintf(stderr, "fatune: no trials %s %s\n", filtered ? "match in" : "recorded in", db_path(d));
  return close_db(d, 0);
}

static int cmd_export(const cli_opts *o) {
  if (!o->format) return bad_input("fatune export needs --format csv or --format json");
  db *d;
  if (open_db(o, DB_READONLY, &d) != 0) return 1;
  char err[512];
  size_t rows;
  if (db_export(d, o->format, stdout, &rows, err, sizeof err) != 0)
    return close_db(d, cli_say(1, err));
  return close_db(d, 0);
}

/* What merging one database brought, and what it refused, on stdout
** and stderr. */
static void merge_said(const char *path, const char *into, const db_merge_counts *c) {
  printf("merged ");
  fa_esc_term(stdout, path);
  printf(" into ");
  fa_esc_term(stdout, into);
  printf("\ndevices:  %zu added, %zu already there\n", c->devices_added, c->devices_skipped);
  printf("variants: %zu added, %zu already there\n", c->variants_added, c->variants_skipped);
  printf("binaries: %zu not imported (binaries are trusted only from this installation)\n",
         c->binaries_not_imported);
  printf("trials:   %zu added, %zu replaced (recorded later there), %zu skipped\n",
         c->trials_added, c->trials_replaced, c->trials_skipped);
  /* Reasons come fit for a terminal (db_merge_counts). */
  if (c->devices_refused)
    fprintf(stderr, "fatune: merge: %zu device%s refused\n", c->devices_refused,
            c->devices_refused == 1 ? "" : "s");
  if (c->variants_refused)
    fprintf(stderr, "fatune: merge: %zu variant%s refused: not what a tune records "
            "(first: %s)\n", c->variants_refused, c->variants_refused == 1 ? "" : "s",
            c->variant_refused);
  if (c->trials_refused)
    fprintf(stderr, "fatune: merge: %zu trial%s refused: not what a tune records "
            "(first: %s)\n", c->trials_refused, c->trials_refused == 1 ? "" : "s",
            c->trial_refused);
  if (c->too_long || c->name_mismatch || c->bad_created || c->over_cap)
    fprintf(stderr, "fatune: merge: of the rows refused, %zu with a field longer than fatune "
            "writes, %zu with a name or hash not their config's, %zu with a created not "
            "fatune's timestamp, %zu past the rows one merge takes\n", c->too_long,
            c->name_mismatch, c->bad_created, c->over_cap);
}

/* Each database in turn, each in its own transaction: a source that fails
** stops the merge, and what the ones before it brought stays. */
static int cmd_merge(const cli_opts *o) {
  if (!o->nmerge) return bad_input("fatune merge needs the path of another fatune database");
  /* Look at every other file first, so that a refused merge creates nothing. */
  db *d, *other;
  char err[512];
  for (int i = 0; i < o->nmerge; i++) {
    if (db_open(o->merge_paths[i], DB_READONLY, &other, err, sizeof err) != 0)
      return cli_say(1, err);
    if (db_close(other) != 0) return cli_say(1, "another database did not close cleanly");
  }
  if (open_db(o, DB_CREATE, &d) != 0) return 1;
  db_merge_counts c, all = {0};
  merge_check check = {0};
  const db_merge_accept accept = merge_check_accept(&check);
  for (int i = 0; i < o->nmerge; i++) {
    if (db_merge(d, o->merge_paths[i], &accept, &c, err, sizeof err) != 0) {
      merge_check_close(&check);
      if (i) fprintf(stderr, "fatune: merge: the %d database%s before it stay merged\n", i,
                     i == 1 ? "" : "s");
      return close_db(d, cli_say(1, err));
    }
    merge_said(o->merge_paths[i], db_path(d), &c);
    all.trials_added += c.trials_added, all.trials_replaced += c.trials_replaced;
    all.trials_skipped += c.trials_skipped, all.trials_refused += c.trials_refused;
  }
  merge_check_close(&check);
  if (o->nmerge > 1)
    printf("all %d: %zu trials added, %zu replaced, %zu skipped, %zu refused\n", o->nmerge,
           all.trials_added, all.trials_replaced, all.trials_skipped, all.trials_refused);
  return close_db(d, fflush(stdout) == 0 ? 0 : 1);
}

int cmd_db_main(const cli_opts *o) {
  switch (o->cmd) {
  case CMD_BEST: return cmd_best(o);
  case CMD_SHOW: return cmd_show(o);
  case CMD_EXPORT: return cmd_export(o);
  default: return cmd_merge(o);
  }
}
