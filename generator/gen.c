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

#include "gen.h"
#include "template_files.h"

struct gen_state {
  lua_State *L;
  int space_ref;           /* registry ref of the space module */
  int engine_ref;          /* registry ref of the engine module */
  char digest[17];         /* FNV-1a 64 of every template file */
  char err[1024];
};

static void set_err(gen_state *g, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g->err, sizeof g->err, fmt, ap);
  va_end(ap);
}

/* Take the error on top of the stack as the message, and pop it. */
static int lua_fail(gen_state *g) {
  const char *msg = lua_tostring(g->L, -1);
  set_err(g, "%s", msg ? msg : "error object is not a string");
  lua_pop(g->L, 1);
  return -1;
}

static unsigned long long fnv1a(unsigned long long h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ULL;
  }
  return h;
}

static const template_file *find_file(const char *name) {
  for (const template_file *f = template_files; f->name; f++)
    if (strcmp(f->name, name) == 0) return f;
  return NULL;
}

static int open_libs(lua_State *L) {
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
  return 0;
}

/* lua_CFunction run under pcall: set up everything that can raise. */
static int setup(lua_State *L) {
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
  return 2;
}

int gen_open(gen_state **out, char *err, size_t errlen) {
  *out = NULL;
  gen_state *g = calloc(1, sizeof *g);
  if (!g) {
    snprintf(err, errlen, "out of memory");
    return -1;
  }
  g->L = luaL_newstate();
  if (!g->L) {
    snprintf(err, errlen, "cannot create a Lua state (out of memory)");
    free(g);
    return -1;
  }
  lua_pushcfunction(g->L, setup);
  if (lua_pcall(g->L, 0, 2, 0) != LUA_OK) {
    lua_fail(g);
    snprintf(err, errlen, "loading the templates: %s", g->err);
    gen_close(g);
    return -1;
  }
  g->space_ref = luaL_ref(g->L, LUA_REGISTRYINDEX);
  g->engine_ref = luaL_ref(g->L, LUA_REGISTRYINDEX);
  unsigned long long h = 14695981039346656037ULL;
  for (const template_file *f = template_files; f->name; f++) {
    h = fnv1a(h, f->name, strlen(f->name) + 1);
    h = fnv1a(h, f->text, f->size);
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

/* Push space[fn]. */
static void push_space_fn(gen_state *g, const char *fn) {
  lua_rawgeti(g->L, LUA_REGISTRYINDEX, g->space_ref);
  lua_getfield(g->L, -1, fn);
  lua_remove(g->L, -2);
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
  lua_createtable(L, 0, 5);
  lua_pushinteger(L, p->dim);
  lua_setfield(L, -2, "dim");
  lua_pushstring(L, fa_dtype_name(p->dtype));
  lua_setfield(L, -2, "dtype");
  lua_pushinteger(L, p->causal ? 1 : 0);
  lua_setfield(L, -2, "causal");
  if (p->seq_q > 0) {
    lua_pushinteger(L, p->seq_q);
    lua_setfield(L, -2, "seq_q");
  }
  if (p->seq_k > 0) {
    lua_pushinteger(L, p->seq_k);
    lua_setfield(L, -2, "seq_k");
  }
}

int gen_target_for_arch(gen_state *g, const char *arch, int smem_bytes,
                        int max_threads, gen_target *t) {
  memset(t, 0, sizeof *t);
  if (strlen(arch) >= sizeof t->arch) {
    set_err(g, "unknown arch '%s'", arch);
    return -1;
  }
  push_space_fn(g, "target");
  lua_pushstring(g->L, arch);
  lua_pushinteger(g->L, smem_bytes);
  lua_pushinteger(g->L, max_threads);
  if (lua_pcall(g->L, 3, 2, 0) != LUA_OK) return lua_fail(g);
  if (lua_isnil(g->L, -2)) {
    lua_remove(g->L, -2);
    return lua_fail(g);
  }
  lua_pop(g->L, 1);
  snprintf(t->arch, sizeof t->arch, "%s", arch);
  lua_getfield(g->L, -1, "smem");
  t->smem_bytes = (int)lua_tointeger(g->L, -1);
  lua_getfield(g->L, -2, "max_threads");
  t->max_threads = (int)lua_tointeger(g->L, -1);
  lua_pop(g->L, 3);
  return 0;
}

/* Copy field `k` (a string) of the table on top into a new C string. */
static char *dup_field(lua_State *L, const char *k) {
  lua_getfield(L, -1, k);
  size_t n;
  const char *s = lua_tolstring(L, -1, &n);
  char *d = s ? malloc(n + 1) : NULL;
  if (d) memcpy(d, s, n + 1);
  lua_pop(L, 1);
  return d;
}

static int int_field(lua_State *L, const char *k) {
  lua_getfield(L, -1, k);
  int v = (int)lua_tointeger(L, -1);
  lua_pop(L, 1);
  return v;
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

int gen_list(gen_state *g, const fa_problem *p, const gen_target *t,
             const char *space, gen_variant **out, size_t *count) {
  *out = NULL;
  *count = 0;
  push_space_fn(g, "list");
  push_problem(g->L, p);
  push_target(g->L, t);
  lua_pushstring(g->L, space);
  if (lua_pcall(g->L, 3, 1, 0) != LUA_OK) return lua_fail(g);
  size_t n = (size_t)luaL_len(g->L, -1);
  gen_variant *v = calloc(n ? n : 1, sizeof *v);
  if (!v) {
    lua_pop(g->L, 1);
    set_err(g, "out of memory listing %zu variants", n);
    return -1;
  }
  for (size_t i = 0; i < n; i++) {
    lua_rawgeti(g->L, -1, (lua_Integer)i + 1);
    v[i].name = dup_field(g->L, "name");
    v[i].hash = dup_field(g->L, "hash");
    v[i].config = dup_field(g->L, "config");
    lua_pop(g->L, 1);
    if (!v[i].name || !v[i].hash || !v[i].config) {
      lua_pop(g->L, 1);
      gen_variants_free(v, i + 1);
      set_err(g, "out of memory listing %zu variants", n);
      return -1;
    }
  }
  lua_pop(g->L, 1);
  *out = v;
  *count = n;
  return 0;
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

/* Join the parameter block, the CUDA prelude and the body. */
static char *cuda_source(gen_state *g, const gen_kernel *k) {
  const template_file *params = find_file("fa_params.h");
  const template_file *prelude = find_file("prelude_cuda.cuh");
  if (!params || !prelude) {
    set_err(g, "fa_params.h or prelude_cuda.cuh is not among the embedded templates");
    return NULL;
  }
  char head[256];
  int hn = snprintf(head, sizeof head, "/* fatune %s (template %s) */\n",
                    k->name, k->template_version);
  size_t bn = strlen(k->body);
  size_t n = (size_t)hn + params->size + prelude->size + bn + 1;
  char *s = malloc(n);
  if (!s) {
    set_err(g, "out of memory rendering %s", k->name);
    return NULL;
  }
  char *w = s;
  memcpy(w, head, (size_t)hn), w += hn;
  memcpy(w, params->text, params->size), w += params->size;
  memcpy(w, prelude->text, prelude->size), w += prelude->size;
  memcpy(w, k->body, bn + 1);
  return s;
}

/* The render result table is on top of the stack; fill k and pop it. */
static int take_kernel(gen_state *g, gen_kernel *k) {
  lua_State *L = g->L;
  memset(k, 0, sizeof *k);
  k->name = dup_field(L, "name");
  k->hash = dup_field(L, "hash");
  k->config = dup_field(L, "config");
  k->entry = dup_field(L, "entry");
  k->body = dup_field(L, "source");
  k->threads = int_field(L, "threads");
  k->smem_bytes = int_field(L, "smem_bytes");
  k->rows_per_cta = int_field(L, "rows_per_cta");
  k->ws_bytes_per_row = int_field(L, "ws_bytes_per_row");
  k->registers_estimate = int_field(L, "registers_estimate");
  lua_getfield(L, -1, "family");
  lua_getfield(L, -2, "template_version");
  snprintf(k->template_version, sizeof k->template_version, "%s/%lld+%.12s",
           lua_tostring(L, -2) ? lua_tostring(L, -2) : "?",
           (long long)lua_tointeger(L, -1), g->digest);
  lua_pop(L, 3);
  if (!k->name || !k->hash || !k->config || !k->entry || !k->body) {
    gen_kernel_free(k);
    set_err(g, "out of memory rendering a kernel");
    return -1;
  }
  k->source = cuda_source(g, k);
  if (!k->source) {
    gen_kernel_free(k);
    return -1;
  }
  snprintf(k->source_hash, sizeof k->source_hash, "%016llx",
           fnv1a(14695981039346656037ULL, k->source, strlen(k->source)));
  return 0;
}

int gen_render_config(gen_state *g, const char *config, const fa_problem *p,
                      const gen_target *t, gen_kernel *out) {
  memset(out, 0, sizeof *out);
  push_space_fn(g, "render_config");
  lua_pushstring(g->L, config);
  if (p) push_problem(g->L, p);
  else lua_pushnil(g->L);
  push_target(g->L, t);
  if (lua_pcall(g->L, 3, 1, 0) != LUA_OK) return lua_fail(g);
  return take_kernel(g, out);
}

int gen_render_name(gen_state *g, const char *name, const gen_target *t,
                    gen_kernel *out) {
  memset(out, 0, sizeof *out);
  push_space_fn(g, "render_name");
  lua_pushstring(g->L, name);
  push_target(g->L, t);
  if (lua_pcall(g->L, 2, 1, 0) != LUA_OK) return lua_fail(g);
  return take_kernel(g, out);
}

int gen_render_text(gen_state *g, const char *chunkname, const char *text,
                    char **out) {
  *out = NULL;
  lua_rawgeti(g->L, LUA_REGISTRYINDEX, g->engine_ref);
  lua_getfield(g->L, -1, "render_text");
  lua_remove(g->L, -2);
  lua_pushstring(g->L, text);
  lua_pushstring(g->L, chunkname);
  if (lua_pcall(g->L, 2, 1, 0) != LUA_OK) return lua_fail(g);
  size_t n;
  const char *s = lua_tolstring(g->L, -1, &n);
  *out = malloc(n + 1);
  if (!*out) {
    lua_pop(g->L, 1);
    set_err(g, "out of memory");
    return -1;
  }
  memcpy(*out, s, n + 1);
  lua_pop(g->L, 1);
  return 0;
}

static unsigned cdiv(long long a, long long b) { return (unsigned)((a + b - 1) / b); }

void gen_launch_shape(const gen_kernel *k, const fa_problem *p, gen_launch *out) {
  memset(out, 0, sizeof *out);
  out->grid[0] = k->rows_per_cta > 0 ? cdiv(p->seq_q, k->rows_per_cta) : 1;
  out->grid[1] = (unsigned)p->heads;
  out->grid[2] = (unsigned)p->batch;
  out->block[0] = (unsigned)k->threads;
  out->block[1] = out->block[2] = 1;
  out->smem_bytes = (unsigned)k->smem_bytes;
  out->ws_bytes = (size_t)k->ws_bytes_per_row * (size_t)p->batch * (size_t)p->heads *
                  (size_t)p->seq_q;
}
