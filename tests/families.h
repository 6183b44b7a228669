/*
** families.h
** The kernel families the tests sweep, one entry each, in the manner of a
** backend table: test_space runs every variant of each family's default
** space on the emulator and runs the same checks for every entry. A new
** family is covered by adding its entry to `families` below; nothing in
** the tests branches on a family's name.
**
** What differs between families is data here: the dims and dtypes swept,
** the shapes and schedules run. Tolerances are not here: validation reads
** them from val_tolerance, the one place they are written.
*/
#ifndef FAMILIES_H
#define FAMILIES_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu.h"
#include "gen.h"

#define FAM_MAX_SPACE 4   /* dims, dtypes per space sweep */
#define FAM_NSHAPES 2

/* A shape test_space runs, under two schedules that must give equal bits. */
typedef struct fam_shape {
  int batch, heads, seq_q, seq_k;
  emu_schedule s0, s1;
} fam_shape;

typedef struct family {
  const char *name; /* as its variants' names begin: "<name>-..." */

  /* test_space: dims x dtypes x {causal, not}, each default space listed
  ** for batch 1, heads 1, seq list_seq, then run at every shape. */
  size_t ndims, ndtypes;
  int dims[FAM_MAX_SPACE];
  fa_dtype dtypes[FAM_MAX_SPACE];
  int list_seq;
  fam_shape shapes[FAM_NSHAPES];
} family;

#define FAM_COUNT(a) (sizeof (a) / sizeof (a)[0])

static const family families[] = {
  {
    .name = "simt",
    .ndims = 2, .dims = {16, 64},
    .ndtypes = 2, .dtypes = {FA_FP32, FA_FP64},
    .list_seq = 100,
    .shapes = {{2, 1, 100, 100, EMU_FORWARD, EMU_REVERSE},  /* seq a multiple of no tile */
               {1, 2, 70, 130, EMU_REVERSE, EMU_RANDOM}},
  },
  {
    .name = "tc",
    .ndims = 2, .dims = {64, 128},
    .ndtypes = 2, .dtypes = {FA_FP16, FA_BF16},
    .list_seq = 128,
    .shapes = {{1, 2, 128, 128, EMU_FORWARD, EMU_REVERSE},
               {1, 1, 100, 200, EMU_REVERSE, EMU_FORWARD}},
  },
};
#define NFAMILIES FAM_COUNT(families)

/* The families named on the command line (all when none): 0, or -1 with
** the unknown name printed. */
static int fam_select(int argc, char **argv, int *selected) {
  for (size_t f = 0; f < NFAMILIES; f++) selected[f] = argc < 2;
  for (int a = 1; a < argc; a++) {
    size_t f = 0;
    while (f < NFAMILIES && strcmp(argv[a], families[f].name) != 0) f++;
    if (f == NFAMILIES) {
      fprintf(stderr, "unknown family '%s'; known:", argv[a]);
      for (f = 0; f < NFAMILIES; f++) fprintf(stderr, " %s", families[f].name);
      fputc('\n', stderr);
      return -1;
    }
    selected[f] = 1;
  }
  return 0;
}

#endif
