/*
** fc_cubin.c
** What the fake driver reads from a cubin: its architecture, its kernels,
** each kernel's parameters, registers, static shared memory and launch
** bounds. A cubin is a 64-bit little-endian ELF file:
**
**   e_flags          the SM: bits 8..15 in the ELF ABI version 8 cubins of
**                    CUDA 12.8 and later (0x6005004 for sm_80), bits 0..7
**                    in older ones (0x500550)
**   .symtab          each kernel an STT_FUNC symbol (type 2) with its
**                    .text.<name> section; the section's sh_info holds the
**                    register count in bits 24..31
**   .nv.info         EIATTR_REGCOUNT (0x2f): symbol index, registers
**   .nv.info.<name>  EIATTR_KPARAM_INFO (0x17) per parameter: index (u32),
**                    ordinal (u16), offset (u16), then a u32 whose bits
**                    18..31 are the size; EIATTR_CBANK_PARAM_SIZE (0x19):
**                    the parameter block's size; EIATTR_MAX_THREADS (0x05):
**                    __launch_bounds__ as x, y, z
**   .nv.shared.<name> its size is the kernel's static shared memory
**
** An attribute is (format u8, id u8) then, for format 4 (EIFMT_SVAL), a u16
** length and that many bytes; every other format holds a u16 value.
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fakecuda.h"

#define EIATTR_MAX_THREADS 0x05
#define EIATTR_KPARAM_INFO 0x17
#define EIATTR_CBANK_PARAM_SIZE 0x19
#define EIATTR_REGCOUNT 0x2f
#define EIFMT_SVAL 4

typedef struct elf_sec {
  uint32_t name, type;
  uint64_t flags, addr, offset, size;
  uint32_t link, info;
  uint64_t align, entsize;
} elf_sec;

typedef struct elf {
  const unsigned char *b;
  const elf_sec *sec;
  int nsec;
  const elf_sec *shstr, *symtab, *strtab;
} elf;

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p) { return rd16(p) | (uint32_t)rd16(p + 2) << 16; }
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

static const char *str_at(const elf *e, const elf_sec *tab, uint32_t off) {
  if (!tab || off >= tab->size) return "";
  const char *s = (const char *)e->b + tab->offset + off;
  return memchr(s, '\0', tab->size - off) ? s : "";
}

static const char *sec_name(const elf *e, const elf_sec *s) {
  return str_at(e, e->shstr, s->name);
}

static const elf_sec *sec_named(const elf *e, const char *prefix, const char *name) {
  char want[FC_NAME_MAX + 32];
  snprintf(want, sizeof want, "%s%s", prefix, name);
  for (int i = 0; i < e->nsec; i++)
    if (!strcmp(sec_name(e, &e->sec[i]), want)) return &e->sec[i];
  return NULL;
}

/* Each attribute of an .nv.info section: fn(id, data, len, ud). */
static void each_attr(const elf *e, const elf_sec *s,
                      void (*fn)(int id, const unsigned char *d, int len, void *ud), void *ud) {
  const unsigned char *p = e->b + s->offset, *end = p + s->size;
  while (p + 4 <= end) {
    int fmt = p[0], id = p[1], len = fmt == EIFMT_SVAL ? rd16(p + 2) : 2;
    const unsigned char *d = fmt == EIFMT_SVAL ? p + 4 : p + 2;
    if (d + len > end) return;
    fn(id, d, len, ud);
    p = fmt == EIFMT_SVAL ? d + len : p + 4;
  }
}

static void kernel_attr(int id, const unsigned char *d, int len, void *ud) {
  fc_kernel *k = ud;
  if (id == EIATTR_KPARAM_INFO && len >= 12) {
    int ord = rd16(d + 4), off = rd16(d + 6), size = (int)(rd32(d + 8) >> 18);
    if (ord < FC_MAX_PARAMS) {
      k->param_offset[ord] = off, k->param_size[ord] = size;
      if (ord + 1 > k->nparams) k->nparams = ord + 1;
    }
  } else if (id == EIATTR_CBANK_PARAM_SIZE && len == 2) {
    k->param_bytes = rd16(d);
  } else if (id == EIATTR_MAX_THREADS && len >= 12) {
    k->max_threads = (int)(rd32(d) * rd32(d + 4) * rd32(d + 8));
  }
}

typedef struct regs_ud { uint32_t sym; int regs; } regs_ud;

static void regcount_attr(int id, const unsigned char *d, int len, void *ud) {
  regs_ud *r = ud;
  if (id == EIATTR_REGCOUNT && len == 8 && rd32(d) == r->sym) r->regs = (int)rd32(d + 4);
}

static void read_kernel(const elf *e, uint32_t sym, const char *name, const elf_sec *text,
                        fc_kernel *k) {
  memset(k, 0, sizeof *k);
  snprintf(k->name, sizeof k->name, "%s", name);
  k->max_threads = 1024;
  k->registers = (int)(text->info >> 24);
  regs_ud r = {sym, -1};
  const elf_sec *info = sec_named(e, ".nv.info", "");
  if (info) each_attr(e, info, regcount_attr, &r);
  if (r.regs >= 0) k->registers = r.regs;
  const elf_sec *ki = sec_named(e, ".nv.info.", name);
  if (ki) each_attr(e, ki, kernel_attr, k);
  const elf_sec *sh = sec_named(e, ".nv.shared.", name);
  if (sh) k->static_smem = (int)sh->size;
}

static CUresult bad(char *why, size_t n, const char *what) {
  snprintf(why, n, "not a cubin: %s", what);
  return CUDA_ERROR_INVALID_IMAGE;
}

CUresult fc_cubin_read(const void *image, fc_cubin *out, char *why, size_t whylen) {
  const unsigned char *b = image;
  memset(out, 0, sizeof *out);
  if (!b || memcmp(b, "\177ELF", 4) != 0) return bad(why, whylen, "no ELF magic");
  if (b[4] != 2 || b[5] != 1) return bad(why, whylen, "not 64-bit little-endian");
  if (rd16(b + 18) != 190) return bad(why, whylen, "e_machine is not EM_CUDA (190)");
  uint32_t flags = rd32(b + 48);
  out->sm = (int)(b[8] >= 8 ? (flags >> 8) & 0xff : flags & 0xff);
  uint64_t shoff = rd64(b + 40);
  int shentsize = rd16(b + 58), nsec = rd16(b + 60), shstrndx = rd16(b + 62);
  if (shentsize != 64 || nsec == 0 || shstrndx >= nsec || shoff > (1u << 30))
    return bad(why, whylen, "bad section table");
  elf_sec *sec = calloc((size_t)nsec, sizeof *sec);
  if (!sec) return CUDA_ERROR_OUT_OF_MEMORY;
  for (int i = 0; i < nsec; i++) {
    const unsigned char *h = b + shoff + (uint64_t)i * 64;
    elf_sec *s = &sec[i];
    s->name = rd32(h), s->type = rd32(h + 4), s->flags = rd64(h + 8), s->addr = rd64(h + 16);
    s->offset = rd64(h + 24), s->size = rd64(h + 32), s->link = rd32(h + 40);
    s->info = rd32(h + 44), s->align = rd64(h + 48), s->entsize = rd64(h + 56);
    if (s->type != 8 && (s->offset > (1u << 30) || s->size > (1u << 30))) {  /* 8: NOBITS */
      free(sec);
      return bad(why, whylen, "section out of range");
    }
  }
  elf e = {b, sec, nsec, &sec[shstrndx], NULL, NULL};
  for (int i = 0; i < nsec; i++)
    if (sec[i].type == 2 && sec[i].link < (uint32_t)nsec)   /* SHT_SYMTAB */
      e.symtab = &sec[i], e.strtab = &sec[sec[i].link];
  if (!e.symtab) {
    free(sec);
    return bad(why, whylen, "no symbol table");
  }
  size_t nsym = e.symtab->size / 24;
  out->kernels = calloc(nsym ? nsym : 1, sizeof *out->kernels);
  if (!out->kernels) {
    free(sec);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  for (size_t i = 0; i < nsym; i++) {
    const unsigned char *s = b + e.symtab->offset + i * 24;
    int type = s[4] & 0xf, bind = s[4] >> 4, shndx = rd16(s + 6);
    if (type != 2 || bind == 0 || shndx == 0 || shndx >= nsec) continue;  /* global FUNC */
    const char *name = str_at(&e, e.strtab, rd32(s));
    if (strncmp(sec_name(&e, &sec[shndx]), ".text.", 6) != 0) continue;
    read_kernel(&e, (uint32_t)i, name, &sec[shndx], &out->kernels[out->nkernels++]);
  }
  free(sec);
  return CUDA_SUCCESS;
}

void fc_cubin_free(fc_cubin *c) {
  free(c->kernels);
  memset(c, 0, sizeof *c);
}
