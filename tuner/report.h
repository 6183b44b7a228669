/*
** report.h
** fatune report: the trials the database holds (the main job's and
** explore's), as a self-contained HTML or Markdown page in a directory,
** with plots gnuplot draws as PNG files beside it: performance (TFLOP/s
** on a GPU, global-memory bytes on the emulator) against seq_len per
** FlashAttention design, global-memory bytes against seq_len with the
** FlashAttention paper's standard-attention traffic, rescale multiplies
** per normalization, and the best tile per (dim, seq) as a heat map.
** Without gnuplot the page keeps its tables and says how to get the plots.
*/
#ifndef REPORT_H
#define REPORT_H

#include "cli.h"

/* Returns the command's exit status: 0 when the page is written (plots or
** not), 1 when the database has no trials or a file cannot be written or
** gnuplot fails. */
int report_main(const cli_opts *o);

#endif
