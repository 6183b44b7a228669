/*
** model_plot.h
** fatune model --plot: the timeline of one steady iteration per warp
** role (the producer, each consumer warpgroup, or the warps), drawn by
** gnuplot into a PNG: what each issues, by phase, and its waits shaded.
*/
#ifndef MODEL_PLOT_H
#define MODEL_PLOT_H

#include <stddef.h>

#include "model_sass.h"

/* 0, or -1 with a message (no gnuplot, gnuplot failed, nothing drawn). */
int model_plot(const char *png, const model_kernel *k, const model_result *r, const char *title,
               char *err, size_t errlen);

#endif
