/*
** gen.c
** Embeds Lua to run the search space and the templates. The interpreter
** opens only the base, string, table, math and utf8 libraries, and loses
** dofile, loadfile, load and print once the engine is loaded: templates
** cannot reach the machine, whatever they contain.
*/
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "fa_mod.h"
#include "fa_util.h"
#include "gen.h"
#include "template_files.h"

struct gen_state {
  lua_State *L;
  int space_ref;           /* registry ref of the space module */
  int engine_ref;          /* registry ref of the engine module */
  char digest[17];         /* FNV-1a 64 of every template file */
  char default_arch[16];   /* space.default_arch */
  char err[1024];
};

static void set_err(gen_state *g, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->err, sizeof g->err, fmt, ap);
  va_end(ap);
}

/* Take the error on top of the stack as the message, and pop it; the
** status for Lua's: out of memory, or what was asked is not to be had. */
static int lua_fail(gen_state *g, int lua_status) {
  const char *msg = lua_tostring(g->L, -1);
  set_err(g, "%s", msg ? msg : "error object is not a string");
  lua_pop(g->L, 1);
  return lua_status == LUA_ERRMEM ? FA_ENOMEM : FA_EINVAL;
}

static const template_file *find_file(const char *name) {
  for (const template_file *f = template_files; f->name; f++)
    if (strcmp(f->name, name) == 0) return f;
  return NULL;
}

static void open_libs(lua_State *L) {
  static const luaL_Reg libs[] = {
    {LUA_GNAME, luaopen_base}, {LUA_STRLIBNAME, luaopen_string},
    {LUA_TABLIBNAME, luaopen_table}, {LUA_MATHLIBNAME, luaopen_math},
    {LUA_UTF8LIBNAME, luaopen_utf8}, {NULL, NULL}};
  for (const luaL_Reg *l = libs; l->func; l++) {
    luaL_requiref(L, l->name, l->func, 1);
    lua_pop(L, 1);
  }
  static const char *const drop[] = {"dofile", "loadfile", "print", "collectgarbage", NULL};
  for (int i = 0; drop[i]; i++) {
    lua_pushnil(L);
    lua_setglobal(L, drop[i]);
  }
}

static void copy_string(lua_State *L, int idx, char *buf, size_t n, const char *what);

/* space.ops must name fa_op's values in order: the templates and the
** database speak of ops by these names. Raises when they differ. */
static void check_ops(lua_State *L, gen_state *g) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, g->space_ref);
  lua_getfield(L, -1, "ops");
  if (!lua_istable(L, -1) || lua_rawlen(L, -1) != FA_NOPS)
    luaL_error(L, "space.ops is not a list of %d ops", FA_NOPS);
  for (int i = 0; i < FA_NOPS; i++) {
    lua_rawgeti(L, -1, i + 1);
    const char *lua = lua_tostring(L, -1);
    if (!lua || strcmp(lua, fa_op_name((fa_op)i)))
      luaL_error(L, "space.ops[%d] is '%s', the generator says '%s'", i + 1, lua ? lua : "?",
                 fa_op_name((fa_op)i));
    lua_pop(L, 1);
  }
  lua_pop(L, 2);
}

/* Run under pcall with the gen_state as argument: everything that can raise. */
static int setup(lua_State *L) {
  gen_state *g = lua_touserdata(L, 1);
  const template_file *engine = find_file("engine.lua");
  if (!engine) return luaL_error(L, "engine.lua is not among the embedded templates");
  open_libs(L);
  lua_newtable(L);
  for (const template_file *f = template_files; f->name; f++) {
    lua_pushlstring(L, f->text, f->size);
    lua_setfield(L, -2, f->name);
  }
  if (luaL_loadbufferx(L, engine->text, engine->size, "@engine.lua", "t") != LUA_OK)
    return lua_error(L);
  lua_insert(L, -2);
  lua_call(L, 1, 1);                 /* engine */
  lua_pushnil(L);
  lua_setglobal(L, "load");          /* the engine kept its own copy */
  lua_getfield(L, -1, "require");
  lua_pushstring(L, "space");
  lua_call(L, 1, 1);                 /* engine, space */
  g->space_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  g->engine_ref = luaL_ref(L, LUA_REGISTRYINDEX);
  lua_rawgeti(L, LUA_REGISTRYINDEX, g->space_ref);
  lua_getfield(L, -1, "default_arch");
  copy_string(L, -1, g->default_arch, sizeof g->default_arch, "space.default_arch");
  lua_pop(L, 2);
  check_ops(L, g);
  return 0;
}

int gen_open(gen_state **out, char *err, size_t errlen) {
  *out = NULL;
  gen_state *g = calloc(1, sizeof *g);
  if (!g) {
    snprintf(err, errlen, "out of memory");
    return FA_ENOMEM;
  }
  g->L = luaL_newstate();
  if (!g->L) {
    snprintf(err, errlen, "cannot create a Lua state (out of memory)");
    free(g);
    return FA_ENOMEM;
  }
  lua_pushcfunction(g->L, setup);
  lua_pushlightuserdata(g->L, g);
  int rc = lua_pcall(g->L, 1, 0, 0);
  if (rc != LUA_OK) {
    /* Templates that do not load are fatune's fault, not the caller's. */
    rc = lua_fail(g, rc) == FA_ENOMEM ? FA_ENOMEM : FA_EINTERNAL;
    snprintf(err, errlen, "loading the templates: %s", g->err);
    gen_close(g);
    return rc;
  }
  unsigned long long h = FA_FNV64_OFFSET;
  for (const template_file *f = template_files; f->name; f++) {
    h = fa_fnv1a64(h, f->name, strlen(f->name) + 1);
    h = fa_fnv1a64(h, f->text, f->size);
  }
  snprintf(g->digest, sizeof g->digest, "%016llx", h);
  *out = g;
  return 0;
}

void gen_close(gen_state *g) {
  if (!g) return;
  if (g->L) lua_close(g->L);
  free(g);
}

const char *gen_errmsg(const gen_state *g) { return g->err; }
const char *gen_template_digest(const gen_state *g) { return g->digest; }

/*
** Every conversation with Lua past gen_open runs inside lua_pcall, in one of
** the protected functions below: a Lua error or an out-of-memory condition
** becomes a message, never a panic. A call carries the arguments in and the
** results out; what a failed call had already allocated is freed by its
** caller.
*/
typedef struct gen_call {
  gen_state *g;
  const fa_problem *problem;
  const gen_target *target;
  const char *text, *chunkname, *space;
  int smem, max_threads;
  gen_target *target_out;
  gen_archs *archs_out;
  gen_variant *variants;
  size_t count;
  gen_kernel *kernel;
  char *rendered;
  gen_prediction *prediction;
  char *out, *why;              /* gen_device_arch, gen_default_dtype */
  size_t outlen, whylen;
  fa_dtype *dtype_out;
  gen_family *families;         /* gen_families_for */
  int max;
  gen_explore *explore;         /* gen_explore_plan */
  gen_axis_name *axis_names;    /* gen_explore_axes */
  fa_mod *mod_out;              /* gen_mod_load */
  const fa_mod *mod;            /* gen_set_mod */
} gen_call;

static int protected_call(gen_state *g, lua_CFunction fn, gen_call *c) {
  c->g = g;
  lua_pushcfunction(g->L, fn);
  lua_pushlightuserdata(g->L, c);
  int rc = lua_pcall(g->L, 1, 0, 0);
  return rc == LUA_OK ? FA_OK : lua_fail(g, rc);
}

static gen_call *call_of(lua_State *L) { return lua_touserdata(L, 1); }

/* Push space[fn]. */
static void push_space_fn(lua_State *L, gen_state *g, const char *fn) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, g->space_ref);
  lua_getfield(L, -1, fn);
  lua_remove(L, -2);
}

static void push_target(lua_State *L, const gen_target *t) {
  lua_createtable(L, 0, 3);
  lua_pushstring(L, t->arch);
  lua_setfield(L, -2, "arch");
  lua_pushinteger(L, t->smem_bytes);
  lua_setfield(L, -2, "smem");
  lua_pushinteger(L, t->max_threads);
  lua_setfield(L, -2, "max_threads");
}

static void push_problem(lua_State *L, const fa_problem *p) {
  lua_createtable(L, 0, 7);
  lua_pushinteger(L, p->dim);
  lua_setfield(L, -2, "dim");
  if (fa_problem_dim_v(p) != p->dim) {
    lua_pushinteger(L, fa_problem_dim_v(p));
    lua_setfield(L, -2, "dim_v");
  }
  lua_pushstring(L, fa_dtype_name(p->dtype));
  lua_setfield(L, -2, "dtype");
  lua_pushinteger(L, p->causal ? 1 : 0);
  lua_setfield(L, -2, "causal");
  lua_pushstring(L, fa_op_name(p->op));
  lua_setfield(L, -2, "op");
  if (p->seq_q > 0) {
    lua_pushinteger(L, p->seq_q);
    lua_setfield(L, -2, "seq_q");
  }
  if (p->seq_k > 0) {
    lua_pushinteger(L, p->seq_k);
    lua_setfield(L, -2, "seq_k");
  }
  if (p->kv_group > 1) {
    lua_pushinteger(L, p->kv_group);
    lua_setfield(L, -2, "kv_group");
  }
  if (p->varlen) {
    lua_pushinteger(L, 1);
    lua_setfield(L, -2, "varlen");
  }
  if (p->paged) {
    lua_pushinteger(L, 1);
    lua_setfield(L, -2, "paged");
  }
  if (p->descale_rows > 0) {
    lua_pushinteger(L, 1);
    lua_setfield(L, -2, "blockscale");
  }
}

/* A malloc'ed copy of the string at `idx`; raises when it is not a string
** or memory runs out. */
static char *dup_string(lua_State *L, int idx, const char *what) {
  size_t n;
  const char *s = lua_tolstring(L, idx, &n);
  if (!s) luaL_error(L, "template result: %s is not a string", what);
  char *d = malloc(n + 1);
  if (!d) luaL_error(L, "out of memory copying %s", what);
  memcpy(d, s, n + 1);
  return d;
}

/* Field `k` of the table on top, as a new C string. */
static char *dup_field(lua_State *L, const char *k) {
  lua_getfield(L, -1, k);
  char *d = dup_string(L, -1, k);
  lua_pop(L, 1);
  return d;
}

static int int_field(lua_State *L, const char *k) {
  lua_getfield(L, -1, k);
  int isnum;
  lua_Integer v = lua_tointegerx(L, -1, &isnum);
  if (!isnum) luaL_error(L, "template result: %s is not an integer", k);
  lua_pop(L, 1);
  return (int)v;
}

/* Copy the string at idx into buf (n bytes); raises when it is not a
** string or does not fit. */
static void copy_string(lua_State *L, int idx, char *buf, size_t n, const char *what) {
  size_t len = 0;
  const char *s = lua_type(L, idx) == LUA_TSTRING ? lua_tolstring(L, idx, &len) : NULL;
  if (!s) luaL_error(L, "template result: %s is not a string", what);
  if (len >= n || strlen(s) != len)
    luaL_error(L, "template result: %s is longer than %d bytes or holds a NUL", what, (int)n - 1);
  memcpy(buf, s, len + 1);
}

/* The config described by the table on top: its "family" (a string) and
** its "pairs", a sequence of {key, value} strings; a result without pairs
** (the oracle's) has none. */
static void take_config(lua_State *L, gen_config *c) {
  memset(c, 0, sizeof *c);
  lua_getfield(L, -1, "family");
  copy_string(L, -1, c->family, sizeof c->family, "family");
  lua_pop(L, 1);
  lua_getfield(L, -1, "pairs");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  if (!lua_istable(L, -1)) luaL_error(L, "template result: pairs is not a table");
  const lua_Unsigned n = lua_rawlen(L, -1);
  if (n > GEN_MAX_PAIRS) luaL_error(L, "template result: %d pairs, at most %d", (int)n, GEN_MAX_PAIRS);
  for (lua_Unsigned i = 0; i < n; i++) {
    gen_pair *p = &c->pair[i];
    char what[48];
    if (lua_rawgeti(L, -1, (lua_Integer)i + 1) != LUA_TTABLE)
      luaL_error(L, "template result: pair %d is not a {key, value} table", (int)i + 1);
    lua_rawgeti(L, -1, 1);
    snprintf(what, sizeof what, "the key of pair %d", (int)i + 1);
    copy_string(L, -1, p->key, sizeof p->key, what);
    lua_rawgeti(L, -2, 2);
    snprintf(what, sizeof what, "the value of pair %d", (int)i + 1);
    copy_string(L, -1, p->value, sizeof p->value, what);
    lua_pop(L, 3);
  }
  c->n = (int)n;
  lua_pop(L, 1);
}

const char *gen_config_get(const gen_config *c, const char *key) {
  for (int i = 0; i < c->n; i++)
    if (!strcmp(c->pair[i].key, key)) return c->pair[i].value;
  return NULL;
}

/* A JSON number: digits, and no leading zero (JSON allows none). */
static int is_number(const char *v) {
  if (!*v || (v[0] == '0' && v[1])) return 0;
  for (; *v; v++) if (*v < '0' || *v > '9') return 0;
  return 1;
}

/* Appends text to buf, as it is or (quote) as a JSON string with quotes,
** backslashes and control characters escaped; -1 when n is too small. */
static int put(char *buf, size_t n, size_t *used, const char *text, int quote) {
  char piece[8];
  if (quote && put(buf, n, used, "\"", 0) != 0) return -1;
  for (const char *s = text; *s; s++) {
    const unsigned char ch = (unsigned char)*s;
    if (quote && (ch == '"' || ch == '\\')) snprintf(piece, sizeof piece, "\\%c", ch);
    else if (quote && ch < 0x20) snprintf(piece, sizeof piece, "\\u%04x", ch);
    else piece[0] = (char)ch, piece[1] = '\0';
    const size_t len = strlen(piece);
    if (*used + len >= n) return -1;
    memcpy(buf + *used, piece, len + 1);
    *used += len;
  }
  return quote ? put(buf, n, used, "\"", 0) : 0;
}

int gen_config_json(const gen_config *c, char *buf, size_t n) {
  size_t used = 0;
  if (n) buf[0] = '\0';
  if (put(buf, n, &used, "{\"family\": ", 0) != 0 || put(buf, n, &used, c->family, 1) != 0)
    return -1;
  for (int i = 0; i < c->n; i++) {
    const char *v = c->pair[i].value;
    if (put(buf, n, &used, ", ", 0) != 0 || put(buf, n, &used, c->pair[i].key, 1) != 0 ||
        put(buf, n, &used, ": ", 0) != 0 || put(buf, n, &used, v, !is_number(v)) != 0)
      return -1;
  }
  return put(buf, n, &used, "}", 0);
}

static int target_protected(lua_State *L) {
  gen_call *c = call_of(L);
  push_space_fn(L, c->g, "target");
  lua_pushstring(L, c->text);
  lua_pushinteger(L, c->smem);
  lua_pushinteger(L, c->max_threads);
  lua_call(L, 3, 2);
  if (lua_isnil(L, -2)) return lua_error(L);  /* the message is on top */
  lua_pop(L, 1);
  gen_target *t = c->target_out;
  snprintf(t->arch, sizeof t->arch, "%s", c->text);
  t->smem_bytes = int_field(L, "smem");
  t->max_threads = int_field(L, "max_threads");
  return 0;
}

int gen_target_for_arch(gen_state *g, const char *arch, int smem_bytes,
                        int max_threads, gen_target *t) {
  memset(t, 0, sizeof *t);
  if (strlen(arch) >= sizeof t->arch) {
    set_err(g, "unknown arch '%.32s...'", arch);
    return FA_EINVAL;
  }
  gen_call c = {.text = arch, .smem = smem_bytes, .max_threads = max_threads, .target_out = t};
  return protected_call(g, target_protected, &c);
}

static int archs_protected(lua_State *L) {
  gen_call *c = call_of(L);
  push_space_fn(L, c->g, "archs");
  lua_call(L, 0, 1);
  const lua_Unsigned n = lua_rawlen(L, -1);
  if (n > GEN_MAX_ARCHS) return luaL_error(L, "the space knows over %d archs", GEN_MAX_ARCHS);
  gen_archs *a = c->archs_out;
  for (lua_Unsigned i = 0; i < n; i++) {
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    const char *arch = lua_tostring(L, -1);
    if (!arch || strlen(arch) >= sizeof a->arch[0])
      return luaL_error(L, "the space's arch %d is not a short name", (int)i + 1);
    snprintf(a->arch[i], sizeof a->arch[i], "%s", arch);
    lua_pop(L, 1);
  }
  a->n = (int)n;
  return 0;
}

int gen_list_archs(gen_state *g, gen_archs *out) {
  memset(out, 0, sizeof *out);
  gen_call c = {.archs_out = out};
  return protected_call(g, archs_protected, &c);
}

void gen_variants_free(gen_variant *v, size_t count) {
  if (!v) return;
  for (size_t i = 0; i < count; i++) {
    free(v[i].name);
    free(v[i].hash);
    free(v[i].config);
  }
  free(v);
}

static int list_protected(lua_State *L) {
  gen_call *c = call_of(L);
  push_space_fn(L, c->g, "list");
  push_problem(L, c->problem);
  push_target(L, c->target);
  lua_pushstring(L, c->space);
  lua_call(L, 3, 1);
  lua_Unsigned n = lua_rawlen(L, -1);
  c->variants = calloc(n ? n : 1, sizeof *c->variants);
  if (!c->variants) return luaL_error(L, "out of memory listing %d variants", (int)n);
  for (lua_Unsigned i = 0; i < n; i++) {
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    gen_variant *v = &c->variants[i];
    c->count = i + 1;  /* so that a failure frees what was copied */
    v->name = dup_field(L, "name");
    v->hash = dup_field(L, "hash");
    v->config = dup_field(L, "config");
    take_config(L, &v->cfg);
    lua_pop(L, 1);
  }
  c->count = n;
  return 0;
}

int gen_list(gen_state *g, const fa_problem *p, const gen_target *t,
             const char *space, gen_variant **out, size_t *count) {
  gen_call c = {.problem = p, .target = t, .space = space};
  int rc = protected_call(g, list_protected, &c);
  if (rc != 0) {
    gen_variants_free(c.variants, c.count);
    c.variants = NULL, c.count = 0;
  }
  *out = c.variants;
  *count = c.count;
  return rc;
}

void gen_kernel_free(gen_kernel *k) {
  if (!k) return;
  free(k->name);
  free(k->hash);
  free(k->config);
  free(k->entry);
  free(k->body);
  free(k->source);
  memset(k, 0, sizeof *k);
}

/* The list of embedded file names at the top of the stack, for backend,
** into out; raises on a name that is no embedded file or too many. */
static void take_preludes(lua_State *L, const char *backend, gen_preludes *out) {
  if (lua_getfield(L, -1, backend) != LUA_TTABLE)
    luaL_error(L, "template result: no %s preludes", backend);
  const lua_Unsigned n = lua_rawlen(L, -1);
  if (n > GEN_MAX_PRELUDES)
    luaL_error(L, "template result: %d %s preludes, at most %d", (int)n, backend, GEN_MAX_PRELUDES);
  for (lua_Unsigned i = 0; i < n; i++) {
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    const char *name = lua_tostring(L, -1);
    const template_file *f = name ? find_file(name) : NULL;
    if (!f) luaL_error(L, "template result: %s prelude %d is no embedded file", backend, (int)i + 1);
    out->file[i] = f->name;
    lua_pop(L, 1);
  }
  out->n = (int)n;
  lua_pop(L, 1);
}

/* Join the parameter block, the kernel's CUDA preludes and the body. */
static char *cuda_source(lua_State *L, const gen_kernel *k) {
  const template_file *f[GEN_MAX_PRELUDES + 1];
  const int nparts = k->prelude_cuda.n + 1;
  char head[256];
  int hn = snprintf(head, sizeof head, "/* fatune %s (template %s) */\n",
                    k->name, k->template_version);
  if (hn < 0 || (size_t)hn >= sizeof head) luaL_error(L, "variant name too long: %s", k->name);
  size_t total = (size_t)hn + strlen(k->body) + 1;
  for (int i = 0; i < nparts; i++) {
    const char *name = i == 0 ? "fa_params.h" : k->prelude_cuda.file[i - 1];
    if (!(f[i] = find_file(name))) luaL_error(L, "%s is not among the embedded templates", name);
    total += f[i]->size;
  }
  char *s = malloc(total);
  if (!s) luaL_error(L, "out of memory rendering %s", k->name);
  char *w = s;
  memcpy(w, head, (size_t)hn), w += hn;
  for (int i = 0; i < nparts; i++) memcpy(w, f[i]->text, f[i]->size), w += f[i]->size;
  memcpy(w, k->body, strlen(k->body) + 1);
  return s;
}

/* The optional field "tma" of the render result on top: a sequence of at
** most GEN_MAX_TMA {tensor = "q"|"k"|"v"|"o"|"t"|"d", box = {inner, rows},
** swizzle = 0|32|64|128}. */
static void take_tma(lua_State *L, gen_kernel *k) {
  lua_getfield(L, -1, "tma");
  if (lua_isnil(L, -1)) {
    lua_pop(L, 1);
    return;
  }
  if (!lua_istable(L, -1)) luaL_error(L, "template result: tma is not a table");
  const lua_Unsigned n = lua_rawlen(L, -1);
  if (n > GEN_MAX_TMA)
    luaL_error(L, "template result: %d tensor maps, at most %d", (int)n, GEN_MAX_TMA);
  for (lua_Unsigned i = 0; i < n; i++) {
    gen_tma *t = &k->tma[i];
    if (lua_rawgeti(L, -1, (lua_Integer)i + 1) != LUA_TTABLE)
      luaL_error(L, "template result: tma[%d] is not a table", (int)i + 1);
    char tensor[2];
    lua_getfield(L, -1, "tensor");
    copy_string(L, -1, tensor, sizeof tensor, "a tensor map's tensor");
    lua_pop(L, 1);
    if (!strchr("qkvotd", tensor[0]) || !tensor[0])
      luaL_error(L, "template result: tma[%d].tensor '%s' is not q, k, v, o, t or d", (int)i + 1,
                 tensor);
    t->tensor = tensor[0];
    t->swizzle = int_field(L, "swizzle");
    if (t->swizzle != 0 && t->swizzle != 32 && t->swizzle != 64 && t->swizzle != 128)
      luaL_error(L, "template result: tma[%d].swizzle %d (0, 32, 64 or 128)", (int)i + 1,
                 t->swizzle);
    if (lua_getfield(L, -1, "box") != LUA_TTABLE || lua_rawlen(L, -1) != 2)
      luaL_error(L, "template result: tma[%d].box is not {inner, rows}", (int)i + 1);
    for (int j = 0; j < 2; j++) {
      int isnum;
      lua_rawgeti(L, -1, j + 1);
      const lua_Integer v = lua_tointegerx(L, -1, &isnum);
      if (!isnum || v < 1 || v > 256)
        luaL_error(L, "template result: tma[%d].box[%d] is not an integer 1..256", (int)i + 1,
                   j + 1);
      t->box[j] = (unsigned)v;
      lua_pop(L, 1);
    }
    lua_pop(L, 2);
  }
  k->ntma = (int)n;
  lua_pop(L, 1);
}

/* Grid dimension d of the launch table on top: an integer, "heads",
** "kv_heads", "batch", or {"seq_q" | "seq_k" | "kv_rows", n}
** (space.check_launches has checked it). */
static gen_grid_dim take_grid_dim(lua_State *L, int d) {
  gen_grid_dim g = {GEN_GRID_FIXED, 1};
  lua_rawgeti(L, -1, d + 1);
  if (lua_isinteger(L, -1)) {
    g.n = (int)lua_tointeger(L, -1);
  } else if (lua_type(L, -1) == LUA_TSTRING) {
    const char *s = lua_tostring(L, -1);
    g.by = !strcmp(s, "heads") ? GEN_GRID_HEADS : !strcmp(s, "kv_heads") ? GEN_GRID_KV_HEADS
                                                                          : GEN_GRID_BATCH;
  } else {
    lua_rawgeti(L, -1, 1);
    const char *s = lua_tostring(L, -1);
    g.by = !strcmp(s, "seq_q") ? GEN_GRID_SEQ_Q : !strcmp(s, "seq_k") ? GEN_GRID_SEQ_K
                                                                      : GEN_GRID_KV_ROWS;
    lua_rawgeti(L, -2, 2);
    g.n = (int)lua_tointeger(L, -1);
    lua_pop(L, 2);
  }
  lua_pop(L, 1);
  return g;
}

/* The workspaces of the launch table on top, added to k->ws unless a
** launch before named them. */
static void take_workspaces(lua_State *L, gen_kernel *k) {
  lua_getfield(L, -1, "workspaces");
  const lua_Unsigned n = lua_rawlen(L, -1);
  for (lua_Unsigned j = 0; j < n; j++) {
    gen_workspace w;
    lua_rawgeti(L, -1, (lua_Integer)j + 1);
    lua_getfield(L, -1, "name");
    copy_string(L, -1, w.name, sizeof w.name, "a workspace's name");
    lua_pop(L, 1);
    w.bytes_per_row = int_field(L, "bytes_per_row");
    lua_getfield(L, -1, "rows");
    w.key_rows = lua_type(L, -1) == LUA_TSTRING && !strcmp(lua_tostring(L, -1), "seq_k");
    lua_pop(L, 1);
    lua_getfield(L, -1, "row_align");
    w.row_align = lua_isnil(L, -1) ? 1 : (int)lua_tointeger(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, -1, "grouped");
    w.grouped = lua_toboolean(L, -1);
    lua_pop(L, 2);
    int seen = 0;
    for (int i = 0; i < k->nws; i++) seen |= !strcmp(k->ws[i].name, w.name);
    if (seen) continue;
    if (k->nws == GEN_MAX_WORKSPACES)
      luaL_error(L, "template result: more than %d workspaces", GEN_MAX_WORKSPACES);
    k->ws[k->nws++] = w;
  }
  lua_pop(L, 1);
}

/* The launch table on top of the stack's role (space.lua checked it). */
static gen_launch_role take_role(lua_State *L) {
  static const char *const names[] = {"dq", "kv_sum", "v_transpose", NULL};
  static const gen_launch_role roles[] = {GEN_ROLE_DQ, GEN_ROLE_KV_SUM, GEN_ROLE_V_TRANSPOSE};
  gen_launch_role r = GEN_ROLE_NONE;
  if (lua_getfield(L, -1, "role") == LUA_TSTRING) {
    const int i = luaL_checkoption(L, -1, NULL, names);
    r = roles[i];
  }
  lua_pop(L, 1);
  return r;
}

/* The "launches" of the render result on top, checked by
** space.check_launches, into k->launch and k->ws. */
static void take_launches(lua_State *L, gen_call *c) {
  gen_kernel *k = c->kernel;
  push_space_fn(L, c->g, "check_launches");
  lua_pushstring(L, "template result");
  lua_getfield(L, -3, "launches");
  lua_call(L, 2, 0);
  lua_getfield(L, -1, "launches");
  const lua_Unsigned n = lua_rawlen(L, -1);
  if (n > GEN_MAX_LAUNCHES)
    luaL_error(L, "template result: %d launches, at most %d", (int)n, GEN_MAX_LAUNCHES);
  for (lua_Unsigned i = 0; i < n; i++) {
    gen_launch_spec *l = &k->launch[i];
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    lua_getfield(L, -1, "entry");
    copy_string(L, -1, l->entry, sizeof l->entry, "a launch's entry");
    lua_pop(L, 1);
    l->threads = int_field(L, "threads");
    l->smem_bytes = int_field(L, "smem_bytes");
    lua_getfield(L, -1, "heavy_first");
    l->heavy_first = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, -1, "persistent");
    l->persistent = lua_toboolean(L, -1);
    lua_pop(L, 1);
    lua_getfield(L, -1, "main");
    if (lua_toboolean(L, -1)) k->main = (int)i;
    lua_pop(L, 1);
    l->role = take_role(L);
    lua_getfield(L, -1, "grid");
    for (int d = 0; d < 3; d++) l->grid[d] = take_grid_dim(L, d);
    lua_pop(L, 1);
    take_workspaces(L, k);
    lua_pop(L, 1);
  }
  k->nlaunch = (int)n;
  lua_pop(L, 1);
  k->entry = strdup(k->launch[k->main].entry);
  if (!k->entry) luaL_error(L, "out of memory copying the entry");
  k->threads = k->launch[k->main].threads;
  k->smem_bytes = k->launch[k->main].smem_bytes;
}

/* The render result table is on top of the stack: fill c->kernel. */
static void take_kernel(lua_State *L, gen_call *c) {
  gen_kernel *k = c->kernel;
  k->name = dup_field(L, "name");
  k->hash = dup_field(L, "hash");
  k->config = dup_field(L, "config");
  k->body = dup_field(L, "source");
  char op[16];
  lua_getfield(L, -1, "op");
  copy_string(L, -1, op, sizeof op, "op");
  lua_pop(L, 1);
  if (fa_op_parse(op, &k->op) != 0) luaL_error(L, "template result: unknown op '%s'", op);
  take_launches(L, c);
  k->registers_estimate = int_field(L, "registers_estimate");
  k->io_align = int_field(L, "io_align");
  lua_getfield(L, -1, "deterministic");
  k->deterministic = lua_isnil(L, -1) || lua_toboolean(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, -1, "ldsm_ways");
  k->ldsm_ways = lua_isnil(L, -1) ? 1 : (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  lua_getfield(L, -1, "red_lines");
  k->red_lines = lua_isnil(L, -1) ? 0 : (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  if (k->io_align < 1 || k->io_align > 256 || (k->io_align & (k->io_align - 1)))
    luaL_error(L, "template result: io_align %d is not a power of two up to 256", k->io_align);
  lua_getfield(L, -1, "arch");
  if (!lua_isnil(L, -1)) copy_string(L, -1, k->arch, sizeof k->arch, "arch");
  lua_pop(L, 1);
  take_tma(L, k);
  lua_getfield(L, -1, "mod_hash");
  if (!lua_isnil(L, -1)) copy_string(L, -1, k->mod_hash, sizeof k->mod_hash, "mod_hash");
  lua_pop(L, 1);
  lua_getfield(L, -1, "mod_label");
  if (!lua_isnil(L, -1)) copy_string(L, -1, k->mod_label, sizeof k->mod_label, "mod_label");
  lua_pop(L, 1);
  if (lua_getfield(L, -1, "preludes") != LUA_TTABLE)
    luaL_error(L, "template result: preludes is not a table");
  take_preludes(L, "cuda", &k->prelude_cuda);
  take_preludes(L, "emu", &k->prelude_emu);
  lua_pop(L, 1);
  int version = int_field(L, "template_version");
  take_config(L, &k->cfg);
  snprintf(k->template_version, sizeof k->template_version, "%s/%d+%.12s", k->cfg.family,
           version, c->g->digest);
  k->source = cuda_source(L, k);
  snprintf(k->source_hash, sizeof k->source_hash, "%016llx",
           fa_fnv1a64(FA_FNV64_OFFSET, k->source, strlen(k->source)));
}

static int render_config_protected(lua_State *L) {
  gen_call *c = call_of(L);
  push_space_fn(L, c->g, "render_config");
  lua_pushstring(L, c->text);
  if (c->problem) push_problem(L, c->problem);
  else lua_pushnil(L);
  push_target(L, c->target);
  lua_call(L, 3, 1);
  take_kernel(L, c);
  lua_getfield(L, -1, "note");
  const char *note = lua_tostring(L, -1);
  if (note) snprintf(c->kernel->note, sizeof c->kernel->note, "%s", note);
  lua_pop(L, 1);
  return 0;
}

static int render_name_protected(lua_State *L) {
  gen_call *c = call_of(L);
  push_space_fn(L, c->g, "render_name");
  lua_pushstring(L, c->text);
  push_target(L, c->target);
  lua_call(L, 2, 1);
  take_kernel(L, c);
  return 0;
}

static int render(gen_state *g, lua_CFunction fn, gen_call *c, gen_kernel *out) {
  memset(out, 0, sizeof *out);
  c->kernel = out;
  int rc = protected_call(g, fn, c);
  if (rc != 0) gen_kernel_free(out);
  return rc;
}

int gen_render_config(gen_state *g, const char *config, const fa_problem *p,
                      const gen_target *t, gen_kernel *out) {
  gen_call c = {.text = config, .problem = p, .target = t};
  return render(g, render_config_protected, &c, out);
}

int gen_render_name(gen_state *g, const char *name, const gen_target *t,
                    gen_kernel *out) {
  gen_call c = {.text = name, .target = t};
  return render(g, render_name_protected, &c, out);
}

int gen_render_name_as(gen_state *g, const char *name, const fa_problem *p, const gen_target *t,
                       gen_kernel *out) {
  int rc = gen_render_name(g, name, t, out);
  if (rc != 0 || !p || !(p->varlen || p->paged || p->descale_rows > 0)) return rc;
  char *config = strdup(out->config);
  gen_kernel_free(out);
  if (!config) {
    set_err(g, "out of memory");
    return FA_EINTERNAL;
  }
  rc = gen_render_config(g, config, p, t, out);
  free(config);
  return rc;
}

/* Push the render function of the template module name (oracle, gemm). */
static void push_module_render(lua_State *L, const gen_call *c, const char *name) {
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->g->engine_ref);
  lua_getfield(L, -1, "require");
  lua_pushstring(L, name);
  lua_call(L, 1, 1);
  lua_getfield(L, -1, "render");
}

/* A module rendering one kernel for a problem (oracle, append): c->text
** names it. */
static int render_module_protected(lua_State *L) {
  gen_call *c = call_of(L);
  push_module_render(L, c, c->text);
  push_problem(L, c->problem);
  lua_call(L, 1, 1);
  take_kernel(L, c);
  return 0;
}

int gen_render_oracle(gen_state *g, const fa_problem *p, gen_kernel *out) {
  gen_call c = {.problem = p, .text = "oracle"};
  return render(g, render_module_protected, &c, out);
}

int gen_render_append(gen_state *g, const fa_problem *p, gen_kernel *out) {
  gen_call c = {.problem = p, .text = "append"};
  return render(g, render_module_protected, &c, out);
}

static int render_gemm_protected(lua_State *L) {
  gen_call *c = call_of(L);
  push_module_render(L, c, "gemm");
  lua_pushstring(L, c->text);
  lua_call(L, 1, 1);
  take_kernel(L, c);
  return 0;
}

int gen_render_gemm(gen_state *g, const char *config, gen_kernel *out) {
  gen_call c = {.text = config};
  return render(g, render_gemm_protected, &c, out);
}

static int render_text_protected(lua_State *L) {
  gen_call *c = call_of(L);
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->g->engine_ref);
  lua_getfield(L, -1, "render_text");
  lua_pushstring(L, c->text);
  lua_pushstring(L, c->chunkname);
  lua_call(L, 2, 1);
  c->rendered = dup_string(L, -1, "the rendered text");
  return 0;
}

int gen_render_text(gen_state *g, const char *chunkname, const char *text,
                    char **out) {
  gen_call c = {.text = text, .chunkname = chunkname};
  int rc = protected_call(g, render_text_protected, &c);
  if (rc != 0) {
    free(c.rendered);
    c.rendered = NULL;
  }
  *out = c.rendered;
  return rc;
}

/* space.parse_config(text, problem), then fam.predict(cfg, problem) with
** the problem's sizes; the {name, count} pairs land in c->prediction. */
static int predict_protected(lua_State *L) {
  gen_call *c = call_of(L);
  push_space_fn(L, c->g, "parse_config");
  lua_pushstring(L, c->text);
  push_problem(L, c->problem);
  lua_call(L, 2, 2);                        /* fam, cfg */
  lua_getfield(L, -2, "predict");
  if (!lua_isfunction(L, -1)) return luaL_error(L, "this family has no cost model");
  lua_insert(L, -2);                        /* fam, predict, cfg */
  push_problem(L, c->problem);
  const int sizes[] = {c->problem->batch, c->problem->heads};
  static const char *const keys[] = {"batch", "heads"};
  for (int i = 0; i < 2; i++) {
    lua_pushinteger(L, sizes[i]);
    lua_setfield(L, -2, keys[i]);
  }
  lua_call(L, 2, 1);
  gen_prediction *o = c->prediction;
  const lua_Unsigned n = lua_rawlen(L, -1);
  if (n > GEN_MAX_FIGURES) return luaL_error(L, "the cost model gives %d figures", (int)n);
  for (lua_Unsigned i = 0; i < n; i++) {
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    lua_rawgeti(L, -1, 1);
    lua_rawgeti(L, -2, 2);
    const char *name = lua_tostring(L, -2);
    int isnum;
    const lua_Integer v = lua_tointegerx(L, -1, &isnum);
    if (!name || !isnum)
      return luaL_error(L, "cost model figure %d is not {name, integer}", (int)i + 1);
    snprintf(o->f[i].name, sizeof o->f[i].name, "%s", name);
    o->f[i].value = (long long)v;
    lua_pop(L, 3);
  }
  o->n = (int)n;
  return 0;
}

int gen_predict(gen_state *g, const char *config, const fa_problem *p, gen_prediction *out) {
  memset(out, 0, sizeof *out);
  gen_call c = {.text = config, .problem = p, .prediction = out};
  return protected_call(g, predict_protected, &c);
}

const char *gen_default_arch(const gen_state *g) { return g->default_arch; }

/* Copy the string at idx into buf, "" when nil. */
static void copy_or_empty(lua_State *L, int idx, char *buf, size_t n, const char *what) {
  if (lua_isnil(L, idx)) buf[0] = '\0';
  else copy_string(L, idx, buf, n, what);
}

static int device_arch_protected(lua_State *L) {
  gen_call *c = call_of(L);
  push_space_fn(L, c->g, "device_arch");
  lua_pushstring(L, c->text);
  lua_call(L, 1, 2);
  copy_string(L, -2, c->out, c->outlen, "the device's arch");
  copy_or_empty(L, -1, c->why, c->whylen, "why");
  return 0;
}

int gen_device_arch(gen_state *g, const char *base, char *arch, size_t n, char *why,
                    size_t whyn) {
  gen_call c = {.text = base, .out = arch, .outlen = n, .why = why, .whylen = whyn};
  return protected_call(g, device_arch_protected, &c);
}

static int default_dtype_protected(lua_State *L) {
  gen_call *c = call_of(L);
  push_space_fn(L, c->g, "default_dtype");
  push_target(L, c->target);
  lua_call(L, 1, 2);
  const char *name = lua_tostring(L, -2);
  if (!name || fa_dtype_parse(name, c->dtype_out) != 0)
    return luaL_error(L, "space.default_dtype gives no dtype");
  copy_string(L, -1, c->why, c->whylen, "why");
  return 0;
}

int gen_default_dtype(gen_state *g, const gen_target *t, fa_dtype *out, char *why, size_t n) {
  gen_call c = {.target = t, .dtype_out = out, .why = why, .whylen = n};
  return protected_call(g, default_dtype_protected, &c);
}

static int families_protected(lua_State *L) {
  gen_call *c = call_of(L);
  push_space_fn(L, c->g, "families_listed");
  push_problem(L, c->problem);
  push_target(L, c->target);
  lua_call(L, 2, 1);
  const lua_Unsigned n = lua_rawlen(L, -1);
  for (lua_Unsigned i = 0; i < n && (int)i < c->max; i++) {
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    lua_getfield(L, -1, "name");
    copy_string(L, -1, c->families[i].name, sizeof c->families[i].name, "a family's name");
    lua_getfield(L, -2, "title");
    copy_string(L, -1, c->families[i].title, sizeof c->families[i].title, "a family's title");
    lua_pop(L, 2);
    /* The head dim the family computes the problem's at (padded_dim, a
    ** family's own function of dim and dim_v where it pads; 0, none, for
    ** a family that computes each at its own size). */
    const int dv = fa_problem_dim_v(c->problem);
    c->families[i].padded_dim = 0;
    if (lua_getfield(L, -1, "padded_dim") == LUA_TFUNCTION) {
      lua_pushinteger(L, c->problem->dim);
      lua_pushinteger(L, dv);
      lua_call(L, 2, 1);
      if (lua_isinteger(L, -1)) c->families[i].padded_dim = (int)lua_tointeger(L, -1);
    }
    lua_pop(L, 2);
    c->count = i + 1;
  }
  return 0;
}

int gen_families_for(gen_state *g, const fa_problem *p, const gen_target *t, gen_family *out,
                     int max, int *count) {
  gen_call c = {.problem = p, .target = t, .families = out, .max = max};
  const int rc = protected_call(g, families_protected, &c);
  *count = rc == 0 ? (int)c.count : 0;
  return rc;
}

/* Field k of the table on top, a string, into buf. */
static void string_field(lua_State *L, const char *k, char *buf, size_t n) {
  lua_getfield(L, -1, k);
  copy_string(L, -1, buf, n, k);
  lua_pop(L, 1);
}

/* The strings of the list in field k of the table on top into rows of
** `stride` bytes from buf, at most max; how many. */
static int string_list(lua_State *L, const char *k, char *buf, size_t stride, int max) {
  lua_getfield(L, -1, k);
  const lua_Unsigned n = lua_istable(L, -1) ? lua_rawlen(L, -1) : 0;
  if (n > (lua_Unsigned)max) luaL_error(L, "explore plan: more than %d %s", max, k);
  for (lua_Unsigned i = 0; i < n; i++) {
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    copy_string(L, -1, buf + i * stride, stride, k);
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  return (int)n;
}

/* One axis of space.explore_plan's, the table on top. */
static void take_explore_axis(lua_State *L, gen_explore_axis *a) {
  string_field(L, "name", a->name, sizeof a->name);
  string_field(L, "title", a->title, sizeof a->title);
  string_field(L, "why", a->why, sizeof a->why);
  a->n = string_list(L, "labels", (char *)a->label, sizeof a->label[0], GEN_EXPLORE_POINTS);
  if (string_list(L, "configs", (char *)a->config, sizeof a->config[0], GEN_EXPLORE_POINTS) != a->n)
    luaL_error(L, "explore axis '%s': not one config per label", a->name);
  a->key[0] = a->key[1] = -1;
  lua_getfield(L, -1, "key");
  for (int i = 0; i < 2 && lua_istable(L, -1); i++) {
    lua_rawgeti(L, -1, i + 1);
    a->key[i] = (int)luaL_checkinteger(L, -1) - 1;   /* Lua counts from 1 */
    lua_pop(L, 1);
  }
  lua_pop(L, 1);
  lua_getfield(L, -1, "key_label");
  copy_or_empty(L, -1, a->key_label, sizeof a->key_label, "key_label");
  lua_pop(L, 1);
}

static int plan_protected(lua_State *L) {
  gen_call *c = call_of(L);
  gen_explore *e = c->explore;
  push_space_fn(L, c->g, "explore_plan");
  push_problem(L, c->problem);
  push_target(L, c->target);
  lua_call(L, 2, 1);
  string_field(L, "family", e->family, sizeof e->family);
  string_field(L, "config", e->config, sizeof e->config);
  string_field(L, "model", e->model, sizeof e->model);
  string_field(L, "kernel", e->kernel, sizeof e->kernel);
  lua_getfield(L, -1, "paper");
  e->paper = lua_toboolean(L, -1);
  lua_pop(L, 1);
  e->ncounters = string_list(L, "counters", (char *)e->counter, sizeof e->counter[0],
                             GEN_EXPLORE_COUNTERS);
  lua_getfield(L, -1, "axes");
  const lua_Unsigned n = lua_rawlen(L, -1);
  if (n > GEN_EXPLORE_AXES)
    return luaL_error(L, "explore plan: more than %d axes", GEN_EXPLORE_AXES);
  for (lua_Unsigned i = 0; i < n; i++) {
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    take_explore_axis(L, &e->axis[i]);
    lua_pop(L, 1);
  }
  e->naxes = (int)n;
  return 0;
}

int gen_explore_plan(gen_state *g, const fa_problem *p, const gen_target *t, gen_explore *out) {
  memset(out, 0, sizeof *out);
  gen_call c = {.problem = p, .target = t, .explore = out};
  return protected_call(g, plan_protected, &c);
}

static int axis_names_protected(lua_State *L) {
  gen_call *c = call_of(L);
  lua_createtable(L, 0, 1);
  push_space_fn(L, c->g, "explore_axes");
  lua_call(L, 0, 1);
  lua_setfield(L, -2, "axes");
  c->count = (size_t)string_list(L, "axes", (char *)c->axis_names, sizeof c->axis_names[0],
                                 c->max);
  return 0;
}

int gen_explore_axes(gen_state *g, gen_axis_name *out, int max, int *count) {
  gen_call c = {.axis_names = out, .max = max};
  const int rc = protected_call(g, axis_names_protected, &c);
  *count = rc == 0 ? (int)c.count : 0;
  return rc;
}

int gen_kernel_fits(const gen_kernel *k, const fa_problem *p, char *why, size_t n) {
  const char *dim = gen_config_get(&k->cfg, "dim"), *dtype = gen_config_get(&k->cfg, "dtype"),
             *causal = gen_config_get(&k->cfg, "causal"), *dim_v = gen_config_get(&k->cfg, "dim_v");
  const char *name = k->name ? k->name : "?";
  if (!dim || !dtype || !causal) {
    snprintf(why, n, "%s has no dim, dtype and causal of its own", name);
    return 0;
  }
  if (k->op != p->op) {
    snprintf(why, n, "variant %s computes op %s, but the problem is op %s", name,
             fa_op_name(k->op), fa_op_name(p->op));
    return 0;
  }
  /* The config's dims are integers the templates checked; dim_v 0 is dim. */
  const int kd = atoi(dim), kdv = dim_v && atoi(dim_v) ? atoi(dim_v) : kd;
  if (kd != p->dim || kdv != fa_problem_dim_v(p) || strcmp(dtype, fa_dtype_name(p->dtype)) ||
      strcmp(causal, p->causal ? "1" : "0")) {
    char have[24], want[24];
    fa_dims_text(kd, kdv, have, sizeof have);
    fa_dims_text(p->dim, p->dim_v, want, sizeof want);
    snprintf(why, n, "variant %s is for dim %s %s%s, but the problem is dim %s %s%s", name, have,
             dtype, strcmp(causal, "0") ? " causal" : "", want, fa_dtype_name(p->dtype),
             p->causal ? " causal" : "");
    return 0;
  }
  const char *varlen = gen_config_get(&k->cfg, "varlen");
  if ((varlen && !strcmp(varlen, "1")) != (p->varlen != 0)) {
    snprintf(why, n, "variant %s addresses %s batch, but the problem is %s", name,
             p->varlen ? "a dense" : "a variable-length", p->varlen ? "variable-length" : "dense");
    return 0;
  }
  const char *paged = gen_config_get(&k->cfg, "paged");
  if ((paged && !strcmp(paged, "1")) != (p->paged != 0)) {
    snprintf(why, n, "variant %s reads K/V %s, but the problem's are %s", name,
             p->paged ? "as dense tensors" : "from a KV cache",
             p->paged ? "in a KV cache" : "dense tensors");
    return 0;
  }
  const char *bs = gen_config_get(&k->cfg, "blockscale");
  if ((bs && !strcmp(bs, "1")) != (p->descale_rows > 0)) {
    snprintf(why, n, "variant %s takes descales %s, but the problem's are %s", name,
             p->descale_rows > 0 ? "per head" : "per block of rows",
             p->descale_rows > 0 ? "per block of rows" : "per head");
    return 0;
  }
  const char *want_mod = p->mod ? p->mod->hash : "";
  if (strcmp(k->mod_hash, want_mod)) {
    snprintf(why, n, "variant %s was generated %s modification, but the problem has %s%s", name,
             k->mod_hash[0] ? "for another" : "without a", p->mod ? "modification " : "none",
             p->mod ? p->mod->label : "");
    return 0;
  }
  return 1;
}

static unsigned cdiv(long long a, long long b) { return (unsigned)((a + b - 1) / b); }

static unsigned grid_dim(gen_grid_dim g, const fa_problem *p) {
  switch (g.by) {
  case GEN_GRID_HEADS: return (unsigned)p->heads;
  case GEN_GRID_KV_HEADS: return (unsigned)(p->kv_group > 1 ? p->heads / p->kv_group : p->heads);
  case GEN_GRID_BATCH: return (unsigned)p->batch;
  case GEN_GRID_SEQ_Q: return cdiv(p->seq_q, g.n);
  case GEN_GRID_SEQ_K: return cdiv(p->seq_k, g.n);
  case GEN_GRID_KV_ROWS: {
    const int group = p->kv_group > 1 ? p->kv_group : 1;
    return (unsigned)(p->heads / group) * cdiv((long long)group * p->seq_q, g.n);
  }
  default: return (unsigned)g.n;
  }
}

void gen_launch_shape(const gen_kernel *k, int i, const fa_problem *p, gen_launch *out) {
  const gen_launch_spec *l = &k->launch[i];
  memset(out, 0, sizeof *out);
  for (int d = 0; d < 3; d++) out->grid[d] = grid_dim(l->grid[d], p);
  if (l->persistent) {  /* the tiles, in one dimension: the kernel decodes them */
    out->grid[0] *= out->grid[1] * out->grid[2];
    out->grid[1] = out->grid[2] = 1;
    out->persistent = 1;
  }
  out->block[0] = (unsigned)l->threads;
  out->block[1] = out->block[2] = 1;
  out->smem_bytes = (unsigned)l->smem_bytes;
  const char *names[GEN_MAX_LAUNCHES];
  const int n = gen_entries(k, names);
  for (int e = 0; e < n; e++)
    if (!strcmp(names[e], l->entry)) out->fn = e;
}

int gen_entries(const gen_kernel *k, const char *names[GEN_MAX_LAUNCHES]) {
  int n = 0;
  for (int i = 0; i < k->nlaunch; i++) {
    int seen = 0;
    for (int e = 0; e < n && !seen; e++) seen = !strcmp(names[e], k->launch[i].entry);
    if (!seen) names[n++] = k->launch[i].entry;
  }
  return n;
}

int gen_workspace_rows(const gen_kernel *k, int i, const fa_problem *p) {
  const int rows = k->ws[i].key_rows ? p->seq_k : p->seq_q, a = k->ws[i].row_align;
  return (rows + a - 1) / a * a;
}

size_t gen_workspace_bytes(const gen_kernel *k, int i, const fa_problem *p) {
  if (k->ws[i].grouped && fa_problem_kv_heads(p) == p->heads) return 0;
  return (size_t)k->ws[i].bytes_per_row * (size_t)p->batch * (size_t)p->heads *
         (size_t)gen_workspace_rows(k, i, p);
}

/* The program of mod.lua's mod.program(tree) on top, into prog. */
static int take_program(lua_State *L, fa_mod_op *prog, const char *what) {
  const lua_Unsigned n = lua_rawlen(L, -1);
  if (n < 1 || n > FA_MOD_MAX_OPS)
    luaL_error(L, "modification: the %s takes %d ops (1 to %d)", what, (int)n, FA_MOD_MAX_OPS);
  for (lua_Unsigned i = 0; i < n; i++) {
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    lua_rawgeti(L, -1, 1);
    lua_rawgeti(L, -2, 2);
    lua_rawgeti(L, -3, 3);
    const char *op = lua_tostring(L, -3), *type = lua_tostring(L, -1);
    const int code = op ? fa_mod_code_of(op) : -1;
    if (code < 0) luaL_error(L, "modification: no op '%s' in the reference", op ? op : "?");
    prog[i].code = (fa_mod_code)code;
    prog[i].value = lua_tonumber(L, -2);
    prog[i].type = type && !strcmp(type, "int") ? FA_MT_INT
                   : type && !strcmp(type, "bool") ? FA_MT_BOOL : FA_MT_FLOAT;
    lua_pop(L, 4);
  }
  return (int)n;
}

static int mod_load_protected(lua_State *L) {
  gen_call *c = call_of(L);
  fa_mod *m = c->mod_out;
  lua_rawgeti(L, LUA_REGISTRYINDEX, c->g->engine_ref);
  lua_getfield(L, -1, "require");
  lua_pushstring(L, "mod");
  lua_call(L, 1, 1);
  const int modlib = lua_gettop(L);
  lua_getfield(L, modlib, "load");
  lua_pushstring(L, c->text);
  if (c->chunkname) lua_pushstring(L, c->chunkname);
  else lua_pushnil(L);
  lua_call(L, 2, 1);
  const int obj = lua_gettop(L);
  lua_getfield(L, obj, "label");
  copy_string(L, -1, m->label, sizeof m->label, "label");
  lua_getfield(L, obj, "hash");
  copy_string(L, -1, m->hash, sizeof m->hash, "hash");
  lua_pop(L, 2);
  lua_getfield(L, obj, "tensors");
  const lua_Unsigned nt = lua_rawlen(L, -1);
  if (nt > FA_MOD_MAX_TENSORS) luaL_error(L, "modification: %d captured tensors", (int)nt);
  for (lua_Unsigned i = 0; i < nt; i++) {
    lua_rawgeti(L, -1, (lua_Integer)i + 1);
    lua_getfield(L, -1, "name");
    copy_string(L, -1, m->tensor_name[i], sizeof m->tensor_name[i], "tensor name");
    lua_getfield(L, -2, "type");
    const char *type = lua_tostring(L, -1);
    m->tensor_type[i] = type && !strcmp(type, "int") ? FA_MT_INT : FA_MT_FLOAT;
    lua_pop(L, 3);
  }
  m->ntensors = (int)nt;
  lua_pop(L, 1);
  const char *parts[3] = {"score", "mask", "dscore"};
  int *const counts[3] = {&m->nscore, &m->nmask, &m->ndscore};
  fa_mod_op *const progs[3] = {m->score, m->mask, m->dscore};
  for (int i = 0; i < 3; i++) {
    lua_getfield(L, obj, parts[i]);
    const int has = !lua_isnil(L, -1);
    lua_pop(L, 1);
    if (!has) continue;
    lua_getfield(L, modlib, "program");
    lua_getfield(L, obj, parts[i]);
    lua_call(L, 1, 1);
    *counts[i] = take_program(L, progs[i], parts[i]);
    lua_pop(L, 1);
  }
  return 0;
}

int gen_mod_load(gen_state *g, const char *spec, const char *text, fa_mod *out) {
  memset(out, 0, sizeof *out);
  if (strlen(spec) >= sizeof out->spec) {
    set_err(g, "modification '%.40s...' is longer than %d bytes", spec, (int)sizeof out->spec - 1);
    return FA_EINVAL;
  }
  if (text && strlen(text) > FA_MOD_MAX_TEXT) {
    set_err(g, "%s: longer than %d bytes", spec, FA_MOD_MAX_TEXT);
    return FA_EINVAL;
  }
  snprintf(out->spec, sizeof out->spec, "%s", spec);
  if (text) snprintf(out->text, sizeof out->text, "%s", text);
  /* mod.load(spec, text): a built-in by spec alone */
  gen_call c = {.text = spec, .chunkname = text, .mod_out = out};
  int rc = protected_call(g, mod_load_protected, &c);
  if (rc != 0) return rc;
  char why[160];
  if ((out->nscore && fa_mod_check(out->score, out->nscore, why, sizeof why)) ||
      (out->nmask && fa_mod_check(out->mask, out->nmask, why, sizeof why)) ||
      (out->ndscore && fa_mod_check(out->dscore, out->ndscore, why, sizeof why))) {
    set_err(g, "modification %s: %s", spec, why);
    return FA_EINVAL;
  }
  return 0;
}

static int set_mod_protected(lua_State *L) {
  gen_call *c = call_of(L);
  push_space_fn(L, c->g, "set_mod");
  if (c->mod) {
    lua_pushstring(L, c->mod->spec);
    if (c->mod->text[0]) lua_pushstring(L, c->mod->text);
    else lua_pushnil(L);
  } else {
    lua_pushnil(L);
    lua_pushnil(L);
  }
  lua_call(L, 2, 0);
  return 0;
}

int gen_set_mod(gen_state *g, const fa_mod *m) {
  gen_call c = {.mod = m};
  return protected_call(g, set_mod_protected, &c);
}
